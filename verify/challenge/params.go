package challenge

import (
	"fmt"
	"math"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
)

// Bounds on a challenge's sizes. A prover refuses anything outside them,
// so no peer can ask for unbounded work.
const (
	MinN    = 8     // smallest matrix size
	MaxN    = 65536 // largest matrix size (a Merkle proof then has ≤ 16 hashes)
	MaxT    = 4096  // longest chain
	MaxGPUs = 64    // most GPUs in one commit
)

// Real-device sizing (see RealParams). Efficiency is measured on an H200;
// the other figures are documented assumptions.
const (
	// RealN is the matrix size for real GPUs: A, B and X_T take 1 GiB each
	// and an INT32 accumulator 4 GiB, which fits every profiled model.
	RealN = 32768
	// RealK is the number of rows opened: 0.9^66 ≈ 0.00096, so a prover
	// that skips or corrupts 10% of rows passes with probability < 0.1%.
	RealK = 66
	// TargetSeconds is the time a real GPU should take at its expected
	// rate; T is chosen to meet it.
	TargetSeconds = 10.0
	// Efficiency is the fraction of the datasheet's dense INT8 peak that
	// the reference prover's chain (verify/cuda, the tiled mma.sync
	// kernel) sustains, as measured: η = 0.21-0.22 on an H200 at
	// N = 32768 (bench/GPU.md). It was 0.5, an assumption, until that
	// first run showed an honest H200 would miss the bound by 1.6x.
	// Measured on one model only: the others are assumed to match.
	Efficiency = 0.2
	// SlowTolerance: a real GPU fails when it takes more than this many
	// times its expected time.
	SlowTolerance = 1.5
)

// Simulated-device sizing (see SimParams).
const (
	// minSimN is 2·RealK rounded up to a multiple of 8.
	minSimN = 136
	// SimMinT is the shortest simulated chain, so that a simulated GPU's
	// time (about 0.2 s for N = 256 on one 2-core machine) stands well
	// above timer and scheduling noise and SimSlack.
	SimMinT = 128

	// DefaultSimScale is the one factor by which simulated devices are
	// scaled down: matrix size n by it, memory by its square (so the ratio
	// of matrix bytes to device memory is that of the real device).
	DefaultSimScale = 128
	// SimSlowTolerance and SimSlack bound a simulated device's time
	// against the challenger's own measurement of the same work on the
	// same backend: it fails above SimSlowTolerance·measured + SimSlack.
	SimSlowTolerance = 1.5
	SimSlack         = 100 * time.Millisecond
)

// Params are the sizes of a matrix challenge for one GPU: N×N matrices,
// a chain of T products, K rows opened.
type Params struct {
	N, T, K int
}

// Validate reports whether p is within the bounds a prover accepts:
// MinN ≤ N ≤ MaxN with N a multiple of 8, 1 ≤ T ≤ MaxT, 1 ≤ K ≤ N.
func (p Params) Validate() error {
	switch {
	case p.N < MinN || p.N > MaxN || p.N%8 != 0:
		return fmt.Errorf("challenge: n=%d not a multiple of 8 in [%d, %d]: %w", p.N, MinN, MaxN, ErrParams)
	case p.T < 1 || p.T > MaxT:
		return fmt.Errorf("challenge: t=%d not in [1, %d]: %w", p.T, MaxT, ErrParams)
	case p.K < 1 || p.K > p.N:
		return fmt.Errorf("challenge: k=%d not in [1, n=%d]: %w", p.K, p.N, ErrParams)
	}
	return nil
}

// RealParams returns the challenge sizes for a real GPU of profile:
// N = RealN, K = RealK, and T such that the chain takes about
// TargetSeconds at Efficiency of the profile's dense INT8 peak
// (2·T·N³ operations), at least 1. For an H100 SXM T = 141; for a T4, 9.
func RealParams(profile catalog.Profile) Params {
	n := float64(RealN)
	t := TargetSeconds * float64(profile.INT8GOPS) * 1e9 * Efficiency / (2 * n * n * n)
	return Params{N: RealN, T: min(MaxT, max(1, int(math.Round(t)))), K: RealK}
}

// SimParams returns the challenge sizes for a simulated GPU of profile:
// the real sizes with N divided by scale (DefaultSimScale when scale ≤ 0),
// rounded down to a multiple of 8 and at least 2·RealK; K as for the real
// device; T as for the real device but at least SimMinT. With T unchanged
// the prover's work shrinks by scale³; the checks are exactly those of a
// real device. At the default scale N = 256.
func SimParams(profile catalog.Profile, scale int) Params {
	if scale <= 0 {
		scale = DefaultSimScale
	}
	p := RealParams(profile)
	n := RealN / scale
	n -= n % 8
	p.N = max(n, minSimN)
	p.T = max(p.T, SimMinT)
	return p
}

// ProverOps is the prover's work per GPU: T·N³ multiply-adds.
func ProverOps(p Params) float64 {
	n := float64(p.N)
	return float64(p.T) * n * n * n
}

// VerifierOps is the verifier's work per GPU: K·T·N² multiply-adds to
// recompute the opened rows, K·N for their sweep values, and N² + K·N
// for regenerating B and the opened rows of A (one per byte). Merkle
// proofs (K·log2 N hashes) are negligible and not counted.
func VerifierOps(p Params) float64 {
	n, k := float64(p.N), float64(p.K)
	return k*float64(p.T)*n*n + k*n + n*n + k*n
}

// CostRatio is VerifierOps over ProverOps: about K/N + 1/(T·N). It is
// 0.2% at real sizes (N = 32768, K = 66).
func CostRatio(p Params) float64 { return VerifierOps(p) / ProverOps(p) }

// ExpectedSeconds is how long a real GPU of profile should take for the
// chain: 2·T·N³ operations at Efficiency of its dense INT8 peak. It is 0
// for a profile without an INT8 figure.
func ExpectedSeconds(profile catalog.Profile, p Params) float64 {
	if profile.INT8GOPS <= 0 {
		return 0
	}
	return 2 * ProverOps(p) / (float64(profile.INT8GOPS) * 1e9 * Efficiency)
}

// TimeBound is the accepted range of a prover's measured time (on the
// challenger's clock, round trips excluded by the caller).
type TimeBound struct {
	Min, Max time.Duration
}

// RealTimeBound is the bound for a real GPU of profile: below 2·T·N³ at
// the full dense INT8 peak is physically impossible (ErrTooFast); above
// SlowTolerance·ExpectedSeconds is too slow (ErrTooSlow).
func RealTimeBound(profile catalog.Profile, p Params) TimeBound {
	exp := ExpectedSeconds(profile, p)
	return TimeBound{
		Min: time.Duration(exp * Efficiency * float64(time.Second)),
		Max: time.Duration(exp * SlowTolerance * float64(time.Second)),
	}
}

// SimTimeBound is the bound for a simulated GPU, given the challenger's
// own measurement of the same work on the same backend: no lower bound,
// and at most SimSlowTolerance·measured + SimSlack.
func SimTimeBound(measured time.Duration) TimeBound {
	return TimeBound{Max: time.Duration(SimSlowTolerance*float64(measured)) + SimSlack}
}

// Check returns ErrTooFast or ErrTooSlow (wrapped with the figures) when
// elapsed is outside b; a zero Max means no upper bound.
func (b TimeBound) Check(elapsed time.Duration) error {
	if elapsed < b.Min {
		return fmt.Errorf("challenge: took %v, physically possible only in %v or more: %w", elapsed, b.Min, ErrTooFast)
	}
	if b.Max > 0 && elapsed > b.Max {
		return fmt.Errorf("challenge: took %v, allowed %v: %w", elapsed, b.Max, ErrTooSlow)
	}
	return nil
}
