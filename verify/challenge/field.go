package challenge

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// P is the sweep modulus, the Mersenne prime 2^61 − 1.
const P = 1<<61 - 1

// DrawVector returns the sweep vector r ∈ F_P^n for seed: the ChaCha8
// stream keyed by subSeed(seed, "sweep", 0) is read as Uint64 values v;
// v & P is taken when it is not P itself (v & P == P is skipped). The
// challenger draws seed afresh after receiving the commit.
func DrawVector(seed [32]byte, n int) []uint64 {
	if n <= 0 {
		return nil
	}
	c := rand.NewChaCha8(subSeed(seed, labelSweep, 0))
	r := make([]uint64, n)
	for i := range r {
		v := c.Uint64() & P
		for v == P {
			v = c.Uint64() & P
		}
		r[i] = v
	}
	return r
}

// DrawRows returns k distinct row indices in [0, n) for seed, in the order
// drawn: each is uniformIndex over the ChaCha8 stream keyed by
// subSeed(seed, "open", 0), repeats skipped. The challenger draws seed
// afresh after receiving the sweep.
func DrawRows(seed [32]byte, n, k int) ([]int, error) {
	if n <= 0 || k < 0 || k > n {
		return nil, fmt.Errorf("challenge: draw %d rows of %d: %w", k, n, ErrParams)
	}
	return drawDistinct(rand.NewChaCha8(subSeed(seed, labelOpen, 0)), n, k), nil
}

// drawDistinct draws k distinct indices in [0, n) from c.
func drawDistinct(c *rand.ChaCha8, n, k int) []int {
	out := make([]int, 0, k)
	seen := make(map[int]bool, k)
	for len(out) < k {
		i := uniformIndex(c, n)
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}

// uniformIndex returns an unbiased value in [0, n): a Uint64 v is drawn
// until v < 2^64 − (2^64 mod n), and v mod n is returned.
func uniformIndex(c *rand.ChaCha8, n int) int {
	un := uint64(n)
	limit := -((-un) % un) // 2^64 − (2^64 mod n), as (2^64 − n) mod n == 2^64 mod n
	for {
		v := c.Uint64()
		if limit == 0 || v < limit {
			return int(v % un)
		}
	}
}

// mod61 reduces x < 2^64 modulo P.
func mod61(x uint64) uint64 {
	x = (x & P) + (x >> 61)
	if x >= P {
		x -= P
	}
	return x
}

// reduce128 reduces hi·2^64 + lo modulo P; hi must be below 2^61.
func reduce128(hi, lo uint64) uint64 {
	// hi·2^64 + lo = (hi<<3 | lo>>61)·2^61 + (lo & P), and 2^61 ≡ 1.
	return mod61(mod61(lo&P) + mod61(hi<<3|lo>>61))
}

// dotRow returns Σ_j row[j]·r[j] mod P for r ∈ F_P^len(row), len(row) ≤
// 2^16. Each r[j] is split into 32-bit halves so that both partial sums
// fit in a uint64 (255·(2^32−1)·2^16 < 2^56).
func dotRow(row []byte, r []uint64) uint64 {
	r = r[:len(row)]
	var lo, hi uint64
	for j, b := range row {
		x := uint64(b)
		lo += x * (r[j] & 0xFFFFFFFF)
		hi += x * (r[j] >> 32)
	}
	// hi·2^32 + lo, with hi < 2^56.
	h, l := bits.Mul64(hi, 1<<32)
	return mod61(reduce128(h, l) + mod61(lo))
}
