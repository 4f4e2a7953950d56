package challenge

import (
	"context"
	"encoding/binary"
	"math/bits"
)

// MemFold is the memory proof's window fold (challenge protocol v2):
//
//	F = Σ_k (w_k mod P)·ρ^k mod P
//
// over the window's little-endian 64-bit words w_0, w_1, …, with P =
// 2^61 − 1 and ρ < P. len(win) must be a multiple of 8 (a shorter tail is
// ignored). Every term is independent of the others, so a GPU folds a
// window at the speed it reads it: each thread block folds a slice at
// ρ^(its first word) and the partial sums are added. Keeping only part of
// a window cannot give F for a ρ drawn after the window was chosen: F is
// a random polynomial's value at a fresh point, and the words are
// ChaCha8 output, which does not compress.
//
// This is the CPU reference: eight interleaved Horner chains in ρ^8, so
// that the multiplications of one step do not wait for each other.
func MemFold(win []byte, rho uint64) uint64 {
	n := len(win) / 8
	if n == 0 {
		return 0
	}
	rho = mod61(rho)
	// Lane l folds words l, l+8, l+16, … in ρ^8 (Horner, from the
	// highest index down), then F = Σ_l ρ^l·lane_l.
	var pw [9]uint64
	pw[0] = 1
	for i := 1; i <= 8; i++ {
		pw[i] = mulMod61(pw[i-1], rho)
	}
	r8 := pw[8]
	var acc [8]uint64
	full := n / 8
	// Words past the last full group of 8 start the chains: they are the
	// highest powers.
	for k := n - 1; k >= full*8; k-- {
		l := k % 8
		acc[l] = mod61(acc[l] + mod61(binary.LittleEndian.Uint64(win[8*k:])))
	}
	for g := full - 1; g >= 0; g-- {
		b := win[64*g : 64*g+64]
		acc[0] = mod61(mulMod61(acc[0], r8) + mod61(binary.LittleEndian.Uint64(b[0:])))
		acc[1] = mod61(mulMod61(acc[1], r8) + mod61(binary.LittleEndian.Uint64(b[8:])))
		acc[2] = mod61(mulMod61(acc[2], r8) + mod61(binary.LittleEndian.Uint64(b[16:])))
		acc[3] = mod61(mulMod61(acc[3], r8) + mod61(binary.LittleEndian.Uint64(b[24:])))
		acc[4] = mod61(mulMod61(acc[4], r8) + mod61(binary.LittleEndian.Uint64(b[32:])))
		acc[5] = mod61(mulMod61(acc[5], r8) + mod61(binary.LittleEndian.Uint64(b[40:])))
		acc[6] = mod61(mulMod61(acc[6], r8) + mod61(binary.LittleEndian.Uint64(b[48:])))
		acc[7] = mod61(mulMod61(acc[7], r8) + mod61(binary.LittleEndian.Uint64(b[56:])))
	}
	var f uint64
	for l := range 8 {
		f = mod61(f + mulMod61(acc[l], pw[l]))
	}
	return f
}

// memFoldNaive is MemFold term by term, Σ_k w_k·ρ^k in ascending powers:
// the definition, for tests.
func memFoldNaive(win []byte, rho uint64) uint64 {
	rho = mod61(rho)
	var f uint64
	pw := uint64(1)
	for k := 0; k+8 <= len(win); k += 8 {
		f = mod61(f + mulMod61(mod61(binary.LittleEndian.Uint64(win[k:])), pw))
		pw = mulMod61(pw, rho)
	}
	return f
}

// mulMod61 returns a·b mod P for a, b < P.
func mulMod61(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return reduce128(hi, lo)
}

// MemBackend holds the filled buffers of one memory proof where the
// answer is computed (host memory for the CPU prover, device memory for
// a GPU prover) and folds one window of each buffer per round.
type MemBackend interface {
	// FoldRound sets out[j] = MemFold(buffer j's bytes [offs[j],
	// offs[j]+window), rhos[j]) for every buffer j. offs, rhos and out
	// have one entry per buffer.
	FoldRound(ctx context.Context, offs []int, window int, rhos, out []uint64) error
	// HeldBytes is the memory the backend holds for the buffers.
	HeldBytes() int64
	// Close frees the buffers.
	Close() error
}

// FillMemBuffer fills dst with buffer j of the memory proof keyed by
// seed: the ChaCha8 stream keyed by subSeed(seed, "mem-buffer", j). A GPU
// backend fills on the host with it and copies the result to the device.
func FillMemBuffer(dst []byte, seed [32]byte, j int) {
	fillStream(dst, subSeed(seed, labelMemBuf, uint32(j)))
}
