//go:build linux && cgo

package cuda

import (
	"context"
	"testing"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// TestChecks runs the checks of `make gpu-check` at small sizes on the
// fake driver: the self-tests match, the challenge and the memory proof
// verify, and the figures are filled in.
func TestChecks(t *testing.T) {
	ctx := context.Background()
	d := openFake(t, Options{})
	st, err := SelfTest(ctx, d, challenge.Params{N: 256, T: 2, K: 8}, KernelAuto)
	if err != nil || !st.Match || st.GPUs != 2 || st.Used != "tiled" {
		t.Errorf("SelfTest = %+v, %v; want a match on 2 gpus with the tiled kernel", st, err)
	}
	ft, err := FoldSelfTest(ctx, d.Devices()[1], challenge.MemParams{Buffers: 2, BufferBytes: 1 << 16, WindowBytes: 1 << 12, Rounds: 4, Checks: 2})
	if err != nil || !ft.Match || ft.Device != 1 {
		t.Errorf("FoldSelfTest = %+v, %v; want a match on device 1", ft, err)
	}
	profile, ok := catalog.Lookup("h100-sxm")
	if !ok {
		t.Fatal("no h100-sxm profile")
	}
	p := challenge.Params{N: 128, T: 3, K: 8}
	cr, err := RunChallenge(ctx, d.Devices()[0], profile, p, KernelAuto)
	if err != nil {
		t.Fatalf("RunChallenge: %v", err)
	}
	if !cr.Verified || cr.Verdict == "" || cr.CommitS <= 0 || cr.ChainS <= 0 || cr.TOPS <= 0 || cr.Eta <= 0 || cr.CostRatio != challenge.CostRatio(p) {
		t.Errorf("RunChallenge = %+v; want verified openings and every figure", cr)
	}
	if want := 2 * challenge.ProverOps(p) / cr.ChainS / 1e12 / 1978.9; cr.Eta != want {
		t.Errorf("Eta = %g, want %g", cr.Eta, want)
	}
	mp := challenge.MemParams{Buffers: 3, BufferBytes: 1 << 16, WindowBytes: 1 << 12, Rounds: 4, Checks: 3}
	mr, err := RunMemProof(ctx, d.Devices()[0], profile, mp)
	if err != nil {
		t.Fatalf("RunMemProof: %v", err)
	}
	if !mr.Verified || mr.RespondS <= 0 || mr.DeadlineS <= 0 || mr.GBps <= 0 || mr.DatasheetGBs != 3350 {
		t.Errorf("RunMemProof = %+v; want a verified answer and every figure", mr)
	}
	pk, err := MMAPeak(ctx, d.Devices()[1], profile)
	if err != nil || !pk.Match || pk.TOPS <= 0 || pk.Fraction != pk.TOPS/1978.9 {
		t.Errorf("MMAPeak = %+v, %v; want every thread's sum and a rate", pk, err)
	}
	checkNoLeak(t, d)
}
