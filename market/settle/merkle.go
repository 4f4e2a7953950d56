package settle

import "crypto/sha256"

// ReceiptsRoot is the RFC 6962 Merkle Tree Hash over receipt hashes in seq
// order: each 32-byte hash is a leaf, hashed as SHA-256(0x00 || hash);
// an interior node is SHA-256(0x01 || left || right), the left subtree
// holding the largest power of two of leaves smaller than the count. The
// root of no receipts is SHA-256 of nothing. A statement carries it as
// receipts_root.
func ReceiptsRoot(hashes [][32]byte) [32]byte {
	leaves := make([][]byte, len(hashes))
	for i := range hashes {
		leaves[i] = hashes[i][:]
	}
	return merkleRoot(leaves)
}

// merkleRoot is RFC 6962's MTH over leaves of any length.
func merkleRoot(leaves [][]byte) [32]byte {
	switch len(leaves) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return sha256.Sum256(append([]byte{0}, leaves[0]...))
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := merkleRoot(leaves[:k]), merkleRoot(leaves[k:])
	var buf [1 + 2*sha256.Size]byte
	buf[0] = 1
	copy(buf[1:], l[:])
	copy(buf[1+sha256.Size:], r[:])
	return sha256.Sum256(buf[:])
}

// emptyRoot is the root of no receipts.
func emptyRoot() [32]byte { return sha256.Sum256(nil) }
