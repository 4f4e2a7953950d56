package merkle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"slices"
	"testing"
)

// rfcRoot is RFC 6962's MTH, section 2.1, as the RFC writes it: the
// oracle for Tree, which builds the same tree level by level.
func rfcRoot(leaves []Hash) Hash {
	switch len(leaves) {
	case 0:
		return EmptyRoot()
	case 1:
		return leaves[0]
	}
	k := splitPoint(len(leaves))
	return NodeHash(rfcRoot(leaves[:k]), rfcRoot(leaves[k:]))
}

// rfcPath is RFC 6962's PATH(m, D[n]), section 2.1.1, as the RFC writes it.
func rfcPath(m int, leaves []Hash) []Hash {
	if len(leaves) <= 1 {
		return nil
	}
	k := splitPoint(len(leaves))
	if m < k {
		return append(rfcPath(m, leaves[:k]), rfcRoot(leaves[k:]))
	}
	return append(rfcPath(m-k, leaves[k:]), rfcRoot(leaves[:k]))
}

// splitPoint is the largest power of two smaller than n > 1.
func splitPoint(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

func leavesOf(n int) []Hash {
	out := make([]Hash, n)
	for i := range out {
		out[i] = LeafHash(binary.BigEndian.AppendUint32(nil, uint32(i)))
	}
	return out
}

// TestRFC6962Vectors checks the roots of the first n of eight leaf inputs
// against RFC 6962's test vectors (as transparency-dev/merkle's testonly
// package lists them); market/settle's receipts_root depends on them.
func TestRFC6962Vectors(t *testing.T) {
	leaves := []string{"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"}
	roots := []string{
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
	var in []Hash
	for _, s := range leaves {
		b, _ := hex.DecodeString(s)
		in = append(in, LeafHash(b))
	}
	for n, want := range roots {
		if got := Root(in[:n]); hex.EncodeToString(got[:]) != want {
			t.Errorf("root of %d leaves = %x, want %s", n, got, want)
		}
	}
}

// TestChallengeShape checks the challenge's description (PROTOCOL §19.3):
// pairs at each level, an odd last node promoted unchanged.
func TestChallengeShape(t *testing.T) {
	l := []Hash{LeafHash([]byte("a")), LeafHash([]byte("b")), LeafHash([]byte("c"))}
	if got, want := Root(l), NodeHash(NodeHash(l[0], l[1]), l[2]); got != want {
		t.Errorf("3-leaf root = %x, want %x", got, want)
	}
	l = append(l, LeafHash([]byte("d")), LeafHash([]byte("e")))
	if got, want := Root(l), NodeHash(NodeHash(NodeHash(l[0], l[1]), NodeHash(l[2], l[3])), l[4]); got != want {
		t.Errorf("5-leaf root = %x, want %x", got, want)
	}
	if got, want := LeafHash([]byte{1, 2}, []byte{3}), sha256.Sum256([]byte{0, 1, 2, 3}); got != want {
		t.Errorf("LeafHash of two parts = %x, want SHA-256(0x00||parts) %x", got, want)
	}
}

// TestTreeIsRFC6962 checks, at every size up to 130, that the tree built
// level by level has the RFC's root and the RFC's audit paths, that each
// proof verifies, and that it fails for any other index, leaf or root.
func TestTreeIsRFC6962(t *testing.T) {
	for n := 0; n <= 130; n++ {
		leaves := leavesOf(n)
		tr := New(leaves)
		root := tr.Root()
		if want := rfcRoot(leaves); root != want {
			t.Fatalf("n=%d: root %x, RFC 6962 %x", n, root, want)
		}
		if tr.Size() != n {
			t.Fatalf("n=%d: Size %d", n, tr.Size())
		}
		for i := range n {
			pf := tr.Proof(i)
			if want := rfcPath(i, leaves); !slices.Equal(pf, want) {
				t.Fatalf("n=%d: proof of %d has %d hashes, not RFC 6962's path of %d", n, i, len(pf), len(want))
			}
			if len(pf) != ProofLen(n, i) || len(pf) > bits.Len(uint(n-1)) {
				t.Fatalf("n=%d: proof of %d has %d hashes, ProofLen says %d", n, i, len(pf), ProofLen(n, i))
			}
			if !Verify(root, n, i, leaves[i], pf) {
				t.Fatalf("n=%d: proof of leaf %d fails", n, i)
			}
			if n > 1 && Verify(root, n, (i+1)%n, leaves[i], pf) {
				t.Errorf("n=%d: proof of leaf %d accepted at %d", n, i, (i+1)%n)
			}
			if n > 1 && Verify(root, n, i, leaves[(i+1)%n], pf) {
				t.Errorf("n=%d: proof of leaf %d accepted for leaf %d", n, i, (i+1)%n)
			}
			if Verify(NodeHash(root, root), n, i, leaves[i], pf) {
				t.Errorf("n=%d: proof of leaf %d accepted against another root", n, i)
			}
		}
	}
}

func TestVerifyRejectsMalformed(t *testing.T) {
	leaves := leavesOf(11)
	tr := New(leaves)
	root, pf := tr.Root(), tr.Proof(10) // 10 is promoted twice: 2 hashes
	if !Verify(root, 11, 10, leaves[10], pf) {
		t.Fatal("the proof of leaf 10 fails")
	}
	for _, tc := range []struct {
		name        string
		size, index int
		proof       []Hash
	}{
		{"no leaves", 0, 0, pf},
		{"negative index", 11, -1, pf},
		{"index past the end", 11, 11, pf},
		{"a hash short", 11, 10, pf[:len(pf)-1]},
		{"a hash too many", 11, 10, append(append([]Hash{}, pf...), root)},
		{"empty proof", 11, 10, nil},
		{"other size", 12, 10, pf},
	} {
		if Verify(root, tc.size, tc.index, leaves[10], tc.proof) {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// FuzzVerify feeds Verify proofs a peer could send: arbitrary sizes,
// indexes and hashes, and real proofs with a byte changed. It must never
// panic, and accept only a real proof of the real leaf.
func FuzzVerify(f *testing.F) {
	f.Add(uint16(7), uint16(3), []byte{}, uint16(0))
	f.Add(uint16(1), uint16(0), []byte{1}, uint16(5))
	f.Add(uint16(300), uint16(299), bytes.Repeat([]byte{7}, 70), uint16(1000))
	f.Fuzz(func(t *testing.T, size, index uint16, junk []byte, flip uint16) {
		n := int(size%512) + 1
		i := int(index) % n
		leaves := leavesOf(n)
		tr := New(leaves)
		root, pf := tr.Root(), tr.Proof(i)
		if !Verify(root, n, i, leaves[i], pf) {
			t.Fatalf("n=%d: real proof of %d fails", n, i)
		}
		// A real proof with one bit flipped, in a hash or in the leaf.
		bit := int(flip) % ((len(pf) + 1) * 256)
		forged, leaf := append([]Hash{}, pf...), leaves[i]
		if h := bit / 256; h < len(forged) {
			forged[h][bit%256/8] ^= 1 << (bit % 8)
		} else {
			leaf[bit%256/8] ^= 1 << (bit % 8)
		}
		if Verify(root, n, i, leaf, forged) {
			t.Fatalf("n=%d: proof of %d with bit %d flipped accepted", n, i, bit)
		}
		// Arbitrary hashes from junk, at an arbitrary index and size.
		var any []Hash
		for len(junk) >= 32 {
			any = append(any, Hash(junk[:32]))
			junk = junk[32:]
		}
		if Verify(root, int(size), int(index), leaves[i], any) && !slices.Equal(any, pf) {
			t.Fatalf("n=%d: junk proof of %d hashes at size %d index %d accepted", n, len(any), size, index)
		}
	})
}
