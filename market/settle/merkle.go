package settle

import "github.com/gpumesh/gpumesh/merkle"

// ReceiptsRoot is the RFC 6962 Merkle Tree Hash (package merkle) over
// receipt hashes in seq order: each 32-byte hash is a leaf, hashed as
// SHA-256(0x00 || hash); an interior node is SHA-256(0x01 || left ||
// right), the left subtree holding the largest power of two of leaves
// smaller than the count. The root of no receipts is SHA-256 of nothing.
// A statement carries it as receipts_root.
func ReceiptsRoot(hashes [][32]byte) [32]byte {
	leaves := make([]merkle.Hash, len(hashes))
	for i := range hashes {
		leaves[i] = merkle.LeafHash(hashes[i][:])
	}
	return merkle.Root(leaves)
}

// emptyRoot is the root of no receipts.
func emptyRoot() [32]byte { return merkle.EmptyRoot() }
