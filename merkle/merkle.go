// Package merkle is gpumesh's one Merkle tree: RFC 6962's Merkle Tree
// Hash and its inclusion proofs, over SHA-256. Two records use it, each
// with its own leaves:
//
//   - a settlement statement's receipts_root (market/settle): a leaf is a
//     receipt's 32-byte hash;
//   - a benchmark challenge's commitment (verify/challenge): a leaf is a
//     row of the committed matrix with its index before it.
//
// A leaf is hashed as SHA-256(0x00 || data), an interior node as
// SHA-256(0x01 || left || right), and the root of no leaves is SHA-256 of
// the empty string. RFC 6962 splits n > 1 leaves at k, the largest power
// of two smaller than n; built level by level, that is the same tree as
// pairing (0,1), (2,3), ... at each level and promoting an odd last node
// unchanged to the level above, which is how Tree builds it. A proof is
// RFC 6962's audit path: the sibling hashes from the leaf up, the levels
// where the path's node is promoted skipped. docs/PROTOCOL.md §19.3 and
// §32.1 describe both uses on the wire.
package merkle

import "crypto/sha256"

// Hash is a SHA-256 digest: a leaf's, a node's or a root.
type Hash = [sha256.Size]byte

// LeafHash is SHA-256(0x00 || data...): the hash of a leaf whose data is
// the concatenation of data.
func LeafHash(data ...[]byte) Hash {
	h := sha256.New()
	h.Write([]byte{0})
	for _, d := range data {
		h.Write(d)
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// NodeHash is SHA-256(0x01 || left || right).
func NodeHash(left, right Hash) Hash {
	var buf [1 + 2*sha256.Size]byte
	buf[0] = 1
	copy(buf[1:], left[:])
	copy(buf[1+sha256.Size:], right[:])
	return sha256.Sum256(buf[:])
}

// EmptyRoot is the root of no leaves: SHA-256 of the empty string.
func EmptyRoot() Hash { return sha256.Sum256(nil) }

// Tree keeps every level of a tree: levels[0] are the leaf hashes, the
// last level is the root alone.
type Tree struct {
	levels [][]Hash
}

// New builds the tree over leaves (leaf hashes, see LeafHash). It keeps
// leaves, which the caller must not change afterwards.
func New(leaves []Hash) *Tree {
	t := &Tree{levels: [][]Hash{leaves}}
	for cur := leaves; len(cur) > 1; {
		next := make([]Hash, (len(cur)+1)/2)
		for i := 0; i+1 < len(cur); i += 2 {
			next[i/2] = NodeHash(cur[i], cur[i+1])
		}
		if len(cur)%2 == 1 {
			next[len(next)-1] = cur[len(cur)-1]
		}
		t.levels = append(t.levels, next)
		cur = next
	}
	return t
}

// Root is the tree's root (EmptyRoot for no leaves).
func (t *Tree) Root() Hash {
	top := t.levels[len(t.levels)-1]
	if len(top) == 0 {
		return EmptyRoot()
	}
	return top[0]
}

// Size is the number of leaves.
func (t *Tree) Size() int { return len(t.levels[0]) }

// Root is the root of the tree over leaves, without keeping the tree.
func Root(leaves []Hash) Hash { return New(leaves).Root() }

// Proof returns leaf i's audit path: the sibling hashes from the leaf up
// to the root, skipping the levels where the node on the path is
// promoted. i must be a leaf of the tree.
func (t *Tree) Proof(i int) []Hash {
	var out []Hash
	for _, level := range t.levels[:len(t.levels)-1] {
		if sib := i ^ 1; sib < len(level) {
			out = append(out, level[sib])
		}
		i /= 2
	}
	return out
}

// ProofLen is the length of a proof of leaf index in a tree of size
// leaves: the levels above the leaf where the path's node has a sibling.
// It is at most the bit length of size-1, and 0 for an index outside
// the tree.
func ProofLen(size, index int) int {
	if index < 0 || index >= size {
		return 0
	}
	n := 0
	for ; size > 1; size = (size + 1) / 2 {
		if index != size-1 || size%2 == 0 {
			n++
		}
		index /= 2
	}
	return n
}

// Verify reports whether proof leads from leaf (a leaf hash, at index of
// a tree of size leaves) to root, using every proof element exactly once.
// It does at most len(proof) hashes. The size is the caller's to know: a
// proof does not prove it.
func Verify(root Hash, size, index int, leaf Hash, proof []Hash) bool {
	if size <= 0 || index < 0 || index >= size || len(proof) != ProofLen(size, index) {
		return false
	}
	h, used := leaf, 0
	for ; size > 1; size = (size + 1) / 2 {
		if index != size-1 || size%2 == 0 { // not promoted: a sibling exists
			if index%2 == 0 {
				h = NodeHash(h, proof[used])
			} else {
				h = NodeHash(proof[used], h)
			}
			used++
		}
		index /= 2
	}
	return h == root
}
