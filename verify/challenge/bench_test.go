package challenge

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
)

func simH100(tb testing.TB) Params {
	prof, ok := catalog.Lookup("h100-sxm")
	if !ok {
		tb.Fatal("no h100-sxm profile")
	}
	return SimParams(prof, DefaultSimScale)
}

// BenchmarkCPUProver measures one GPU-challenge (Commit of one GPU) at the
// simulated H100 size, with all GOMAXPROCS workers.
func BenchmarkCPUProver(b *testing.B) {
	p := simH100(b)
	pr := NewCPUProver(CPUOptions{})
	seed := sha256.Sum256([]byte("bench"))
	ctx := context.Background()
	for b.Loop() {
		if _, err := pr.Commit(ctx, [][32]byte{seed}, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*ProverOps(p)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOPS")
	b.ReportMetric(float64(p.N), "n")
	b.ReportMetric(float64(p.T), "T")
}

// BenchmarkVerifyRow measures checking one opened row at the simulated
// H100 size: "cached" with B derived once (Verifier), "cold" with the
// package-level VerifyRow that derives B every call.
func BenchmarkVerifyRow(b *testing.B) {
	p := simH100(b)
	ctx := context.Background()
	seed := sha256.Sum256([]byte("bench-verify"))
	pr := NewCPUProver(CPUOptions{})
	roots, err := pr.Commit(ctx, [][32]byte{seed}, p)
	if err != nil {
		b.Fatal(err)
	}
	r := DrawVector(seed, p.N)
	s, _ := pr.Sweep(ctx, 0, r)
	open, _ := pr.Open(ctx, 0, []int{17})
	b.Run("cached", func(b *testing.B) {
		v, err := NewVerifier(ctx, seed, p, 1)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := v.VerifyRow(ctx, roots[0], r, s, open[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			if err := VerifyRow(seed, p, roots[0], r, s, open[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkChallengeCost measures, at the simulated H100 size, the
// prover's commit and sweep and the verifier's whole check of K openings
// (deriving B included), and reports the measured verifier/prover time
// ratio next to the computed CostRatio at simulated and real sizes.
func BenchmarkChallengeCost(b *testing.B) {
	p := simH100(b)
	ctx := context.Background()
	pr := NewCPUProver(CPUOptions{})
	var proverT, verifierT time.Duration
	i := 0
	for b.Loop() {
		seed := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		i++
		start := time.Now()
		roots, err := pr.Commit(ctx, [][32]byte{seed}, p)
		if err != nil {
			b.Fatal(err)
		}
		r := DrawVector(seed, p.N)
		s, _ := pr.Sweep(ctx, 0, r)
		proverT += time.Since(start)
		rows, _ := DrawRows(seed, p.N, p.K)
		open, _ := pr.Open(ctx, 0, rows)
		start = time.Now()
		v, err := NewVerifier(ctx, seed, p, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := v.VerifyOpenings(ctx, roots[0], r, s, rows, open); err != nil {
			b.Fatal(err)
		}
		verifierT += time.Since(start)
	}
	h100, _ := catalog.Lookup("h100-sxm")
	b.ReportMetric(float64(verifierT)/float64(proverT), "measured-ratio")
	b.ReportMetric(CostRatio(p), "sim-ratio")
	b.ReportMetric(CostRatio(RealParams(h100)), "real-ratio")
	b.ReportMetric(float64(verifierT.Microseconds())/float64(b.N), "verifier-µs/op")
}
