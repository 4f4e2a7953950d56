package challenge

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
)

// MaxProofLen bounds the length of a Merkle proof: a tree over at most
// MaxN leaves has at most 16 levels above its leaves.
const MaxProofLen = 16

// leafHash is SHA-256(0x00 || uint32 BE index || row).
func leafHash(index int, row []byte) [32]byte {
	h := sha256.New()
	var pre [5]byte
	binary.BigEndian.PutUint32(pre[1:], uint32(index))
	h.Write(pre[:])
	h.Write(row)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// nodeHash is SHA-256(0x01 || left || right).
func nodeHash(left, right [32]byte) [32]byte {
	var buf [65]byte
	buf[0] = 1
	copy(buf[1:], left[:])
	copy(buf[33:], right[:])
	return sha256.Sum256(buf[:])
}

// merkleTree keeps every level of a tree: levels[0] are the leaf hashes,
// the last level is the root alone. At a level with an odd count the last
// node is promoted unchanged to the level above.
type merkleTree struct {
	levels [][][32]byte
}

// buildTree hashes the n rows of m as leaves (on workers goroutines) and
// builds the tree above them.
func buildTree(ctx context.Context, m Matrix, workers int) (*merkleTree, error) {
	leaves := make([][32]byte, m.N)
	if err := parallel(ctx, workers, m.N, func(i int) error {
		leaves[i] = leafHash(i, m.Row(i))
		return nil
	}); err != nil {
		return nil, err
	}
	return treeFromLeaves(leaves), nil
}

func treeFromLeaves(leaves [][32]byte) *merkleTree {
	t := &merkleTree{levels: [][][32]byte{leaves}}
	for cur := leaves; len(cur) > 1; {
		next := make([][32]byte, (len(cur)+1)/2)
		for i := 0; i+1 < len(cur); i += 2 {
			next[i/2] = nodeHash(cur[i], cur[i+1])
		}
		if len(cur)%2 == 1 {
			next[len(next)-1] = cur[len(cur)-1]
		}
		t.levels = append(t.levels, next)
		cur = next
	}
	return t
}

func (t *merkleTree) root() [32]byte { return t.levels[len(t.levels)-1][0] }

// proof returns the sibling hashes from leaf i up to the root, skipping
// the levels where the node on the path is promoted.
func (t *merkleTree) proof(i int) [][32]byte {
	var out [][32]byte
	for _, level := range t.levels[:len(t.levels)-1] {
		sib := i ^ 1
		if sib < len(level) {
			out = append(out, level[sib])
		}
		i /= 2
	}
	return out
}

// verifyProof reports whether proof leads from leaf (at index of a tree
// over n leaves) to root, using every proof element exactly once.
func verifyProof(root [32]byte, n, index int, leaf [32]byte, proof [][32]byte) bool {
	if n <= 0 || index < 0 || index >= n || len(proof) > MaxProofLen {
		return false
	}
	h, used := leaf, 0
	for size := n; size > 1; size = (size + 1) / 2 {
		if !(index == size-1 && size%2 == 1) { // not promoted: a sibling exists
			if used == len(proof) {
				return false
			}
			if index%2 == 0 {
				h = nodeHash(h, proof[used])
			} else {
				h = nodeHash(proof[used], h)
			}
			used++
		}
		index /= 2
	}
	return used == len(proof) && h == root
}
