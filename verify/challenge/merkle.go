package challenge

import (
	"context"
	"encoding/binary"

	"github.com/gpumesh/gpumesh/merkle"
)

// MaxProofLen bounds the length of a Merkle proof: a tree over at most
// MaxN leaves has at most 16 levels above its leaves.
const MaxProofLen = 16

// leafHash is the commitment's leaf for row index: SHA-256(0x00 || uint32
// BE index || row), package merkle's leaf over the index and the row.
func leafHash(index int, row []byte) [32]byte {
	return merkle.LeafHash(binary.BigEndian.AppendUint32(make([]byte, 0, 4), uint32(index)), row)
}

// buildTree hashes the n rows of m as leaves (on workers goroutines) and
// builds package merkle's tree above them.
func buildTree(ctx context.Context, m Matrix, workers int) (*merkle.Tree, error) {
	leaves := make([][32]byte, m.N)
	if err := parallel(ctx, workers, m.N, func(i int) error {
		leaves[i] = leafHash(i, m.Row(i))
		return nil
	}); err != nil {
		return nil, err
	}
	return merkle.New(leaves), nil
}
