package challenge

import (
	"encoding/binary"
	"math/big"
	"math/rand/v2"
	"testing"
)

// foldBig is MemFold in math/big, straight from the definition.
func foldBig(win []byte, rho uint64) uint64 {
	p := new(big.Int).SetUint64(P)
	r := new(big.Int).SetUint64(rho)
	f, pw := new(big.Int), big.NewInt(1)
	for k := 0; k+8 <= len(win); k += 8 {
		w := new(big.Int).SetUint64(binary.LittleEndian.Uint64(win[k:]))
		f.Add(f, w.Mul(w, pw))
		pw.Mul(pw, r).Mod(pw, p)
	}
	return f.Mod(f, p).Uint64()
}

func TestMemFold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 8, 16, 56, 64, 72, 120, 4096, 4096 + 24} {
		win := make([]byte, n)
		for i := range win {
			win[i] = byte(rng.Uint32())
		}
		for _, rho := range []uint64{0, 1, 2, P - 1, rng.Uint64() & P, rng.Uint64() & P} {
			want := foldBig(win, rho)
			if got := MemFold(win, rho); got != want {
				t.Errorf("n=%d ρ=%d: MemFold = %d, want %d", n, rho, got, want)
			}
			if got := memFoldNaive(win, rho); got != want {
				t.Errorf("n=%d ρ=%d: memFoldNaive = %d, want %d", n, rho, got, want)
			}
		}
	}
	// Words at and above P, where w mod P matters.
	win := make([]byte, 64)
	for i := range 8 {
		binary.LittleEndian.PutUint64(win[8*i:], ^uint64(0)-uint64(i))
	}
	if got, want := MemFold(win, 3), foldBig(win, 3); got != want {
		t.Errorf("high words: MemFold = %d, want %d", got, want)
	}
}

// TestMemFoldVector pins the fold of a fixed window, for independent
// implementations (PROTOCOL §19.7).
func TestMemFoldVector(t *testing.T) {
	win := make([]byte, 256)
	FillMemBuffer(win, [32]byte{1}, 0)
	const rho = 0x123456789abcdef % P
	if got, want := MemFold(win, rho), foldBig(win, rho); got != want {
		t.Fatalf("MemFold = %#x, want %#x", got, want)
	}
}

func BenchmarkMemFold(b *testing.B) {
	win := make([]byte, 4<<20)
	FillMemBuffer(win, [32]byte{2}, 0)
	b.SetBytes(int64(len(win)))
	for b.Loop() {
		MemFold(win, 0x1234567)
	}
}
