package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// The checks of a machine with a GPU (cmd/gpucheck, `make gpu-check`):
// each returns one result, which the tool prints as a JSON line.

// SelfTestResult is a small-size challenge answered by the GPU prover and
// by the CPU reference, one seed per device.
type SelfTestResult struct {
	Check   string  `json:"check"` // "selftest"
	N       int     `json:"n"`
	T       int     `json:"t"`
	GPUs    int     `json:"gpus"`
	Kernel  string  `json:"kernel"` // the kernel asked for
	Used    string  `json:"used"`   // the kernel the first GPU ran
	Match   bool    `json:"match"`  // roots, sweeps and openings all identical
	Detail  string  `json:"detail,omitempty"`
	Seconds float64 `json:"seconds"`
}

// SelfTest commits a challenge of size p on every device of drv with the
// GPU prover and with challenge.CPUProver, and compares the roots, the
// sweeps and the openings of p.K drawn rows.
func SelfTest(ctx context.Context, drv *Driver, p challenge.Params, kernel Kernel) (SelfTestResult, error) {
	start := time.Now()
	res := SelfTestResult{Check: "selftest", N: p.N, T: p.T, GPUs: len(drv.Devices()), Kernel: kernel.String()}
	seeds := make([][32]byte, res.GPUs)
	for g := range seeds {
		seeds[g] = [32]byte{'s', 'e', 'l', 'f', byte(g), byte(p.N), byte(p.N >> 8), byte(p.T)}
	}
	gpu := NewProver(drv, ProverOptions{Kernel: kernel})
	cpu := challenge.NewCPUProver(challenge.CPUOptions{})
	got, err := gpu.Commit(ctx, seeds, p)
	if err != nil {
		return res, fmt.Errorf("self-test: gpu commit: %w", err)
	}
	res.Used = gpu.LastTiming().GPUs[0].Kernel
	want, err := cpu.Commit(ctx, seeds, p)
	if err != nil {
		return res, fmt.Errorf("self-test: cpu commit: %w", err)
	}
	res.Match = true
	differ := func(format string, a ...any) {
		if res.Match {
			res.Detail = fmt.Sprintf(format, a...)
		}
		res.Match = false
	}
	r := challenge.DrawVector([32]byte{'r'}, p.N)
	for g := range seeds {
		if got[g] != want[g] {
			differ("gpu %d (device %d): root %x, cpu %x", g, g%res.GPUs, got[g], want[g])
			continue
		}
		sg, err := gpu.Sweep(ctx, g, r)
		if err != nil {
			return res, err
		}
		sc, err := cpu.Sweep(ctx, g, r)
		if err != nil {
			return res, err
		}
		if !reflect.DeepEqual(sg, sc) {
			differ("gpu %d: sweeps differ", g)
			continue
		}
		rows, err := challenge.DrawRows([32]byte{'o', byte(g)}, p.N, p.K)
		if err != nil {
			return res, err
		}
		og, err := gpu.Open(ctx, g, rows)
		if err != nil {
			return res, err
		}
		oc, err := cpu.Open(ctx, g, rows)
		if err != nil {
			return res, err
		}
		if !reflect.DeepEqual(og, oc) {
			differ("gpu %d: openings differ", g)
		}
	}
	if !res.Match && res.Detail == "" {
		res.Detail = "differs"
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// FoldTestResult is a small memory proof answered over device buffers and
// by the CPU reference.
type FoldTestResult struct {
	Check       string  `json:"check"` // "foldtest"
	Device      int     `json:"device"`
	Buffers     int     `json:"buffers"`
	WindowBytes int     `json:"window_bytes"`
	Rounds      int     `json:"rounds"`
	Match       bool    `json:"match"`
	Detail      string  `json:"detail,omitempty"`
	Seconds     float64 `json:"seconds"`
}

// FoldSelfTest answers a memory proof of size p on dev (MemBackend) and on
// the host (challenge.NewMemProver) and compares every digest.
func FoldSelfTest(ctx context.Context, dev *Device, p challenge.MemParams) (FoldTestResult, error) {
	start := time.Now()
	res := FoldTestResult{Check: "foldtest", Device: dev.Info.Ordinal, Buffers: p.Buffers, WindowBytes: p.WindowBytes, Rounds: p.Rounds}
	seed, sigma := [32]byte{'f', 'o', 'l', 'd'}, [32]byte{'s', 'i', 'g'}
	b, err := NewMemBackend(ctx, dev, seed, p)
	if err != nil {
		return res, err
	}
	gm, err := challenge.NewMemProverOn(b, p)
	if err != nil {
		b.Close()
		return res, err
	}
	defer gm.Close()
	got, err := gm.Respond(ctx, sigma)
	if err != nil {
		return res, err
	}
	cm, err := challenge.NewMemProver(ctx, seed, p, 1)
	if err != nil {
		return res, err
	}
	defer cm.Close()
	want, err := cm.Respond(ctx, sigma)
	if err != nil {
		return res, err
	}
	res.Match = reflect.DeepEqual(got, want)
	if !res.Match {
		for s := range want.Digests {
			if !reflect.DeepEqual(got.Digests[s], want.Digests[s]) {
				res.Detail = fmt.Sprintf("round %d differs first", s)
				break
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// PeakResult is what mma.sync alone reaches on one device: the ceiling of
// the tensor-core chain kernels, against which their rate is judged.
type PeakResult struct {
	Check    string  `json:"check"` // "mma_peak"
	Model    string  `json:"model"`
	Device   int     `json:"device"`
	TOPS     float64 `json:"tops"`      // the best of the runs
	PeakTOPS float64 `json:"peak_tops"` // the profile's dense INT8 peak
	Fraction float64 `json:"fraction"`  // TOPS / PeakTOPS
	Runs     int     `json:"runs"`
	Match    bool    `json:"match"` // every thread wrote 1024·iters
}

// MMAPeak times gm_mma_peak on dev: 4 blocks of 256 threads per SM,
// 2048 rounds of 8 mma.sync m16n8k32 per warp, the best of 3 runs.
func MMAPeak(ctx context.Context, dev *Device, profile catalog.Profile) (PeakResult, error) {
	const threads, iters, runs = 256, 2048, 3
	res := PeakResult{Check: "mma_peak", Model: profile.Slug, Device: dev.Info.Ordinal, PeakTOPS: float64(profile.INT8GOPS) / 1e3, Runs: runs}
	if !dev.tensorKernels() {
		return res, fmt.Errorf("cuda: mma peak: no tensor-core kernels on device %d (compute capability %s): %v", dev.Info.Ordinal, ccString(dev.Info), dev.TensorErr)
	}
	blocks := max(1, 4*dev.Info.SMs)
	total := blocks * threads
	ops := float64(total/32) * iters * 8 * (16 * 8 * 32 * 2)
	out := make([]byte, 4*total)
	err := dev.do(func(s *devState) (err error) {
		buf, err := s.alloc(len(out))
		if err != nil {
			return err
		}
		defer func() {
			if e := s.free(buf); e != nil && err == nil {
				err = e
			}
		}()
		for range runs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := s.recordStart(); err != nil {
				return err
			}
			if err := s.launch(kMMAPeak, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{threads, 1, 1}, buf, uint32(iters)); err != nil {
				return err
			}
			secs, err := s.elapsed()
			if err != nil {
				return err
			}
			if secs > 0 {
				res.TOPS = max(res.TOPS, ops/secs/1e12)
			}
		}
		return s.dtoh(out, buf)
	})
	if err != nil {
		return res, err
	}
	res.Match = true
	for i := 0; i < len(out); i += 4 {
		if binary.LittleEndian.Uint32(out[i:]) != 1024*iters {
			res.Match = false
			break
		}
	}
	if res.PeakTOPS > 0 {
		res.Fraction = res.TOPS / res.PeakTOPS
	}
	return res, nil
}

// ChallengeResult is a full challenge of one device, timed by phase, and
// checked by a CPU challenger as a real one checks it.
type ChallengeResult struct {
	Check  string `json:"check"` // "challenge"
	Model  string `json:"model"`
	Device int    `json:"device"`
	Name   string `json:"name"`
	N      int    `json:"n"`
	T      int    `json:"t"`
	K      int    `json:"k"`
	Kernel string `json:"kernel"`
	// The prover's phases, seconds.
	DeriveS   float64 `json:"derive_s"`
	UploadS   float64 `json:"upload_s"`
	ChainS    float64 `json:"chain_s"` // device time (events)
	DownloadS float64 `json:"download_s"`
	TreeS     float64 `json:"tree_s"`
	CommitS   float64 `json:"commit_s"` // the timed window: the whole Commit
	SweepS    float64 `json:"sweep_s"`
	OpenS     float64 `json:"open_s"`
	// The challenger's checks: deriving B and recomputing K rows.
	VerifyS float64 `json:"verify_s"`
	// VerifierFraction is VerifyS over CommitS, measured; CostRatio the
	// same ratio in operations (challenge.CostRatio).
	VerifierFraction float64 `json:"verifier_fraction"`
	CostRatio        float64 `json:"cost_ratio"`
	// Ops is 2·T·N³; TOPS over the chain's device time; Eta that over the
	// profile's dense INT8 peak, and CommitEta over the whole commit (what
	// the time bound judges).
	Ops       float64 `json:"ops"`
	TOPS      float64 `json:"tops"`
	PeakTOPS  float64 `json:"peak_tops"`
	Eta       float64 `json:"eta"`
	CommitEta float64 `json:"commit_eta"`
	// The bound of challenge.RealTimeBound and its verdict on CommitS.
	BoundMinS float64 `json:"bound_min_s"`
	BoundMaxS float64 `json:"bound_max_s"`
	Verified  bool    `json:"verified"`
	Pass      bool    `json:"pass"`
	Verdict   string  `json:"verdict"`
	// RealT is the T of challenge.RealParams, when the check ran a shorter
	// chain to fit its time (PlanT): the rates still hold, the time bound
	// is not judged.
	RealT int `json:"real_t,omitempty"`
}

// PlanT returns the longest chain, at most realT, whose commit and CPU
// verification fit in budget, judging by probe: a challenge of the same
// device, N and K with T = 1. The device's cost and the verifier's grow
// linearly in T (the verifier checks its K rows together, one product
// per step, so its cost per step is the probe's); the fixed costs are the
// probe's derive, upload, download and tree. The first H200 run, which
// probed one row and multiplied by K, planned a tenth of the chain that
// fitted.
func PlanT(probe ChallengeResult, realT int, budget time.Duration) int {
	fixed := probe.DeriveS + probe.UploadS + probe.DownloadS + probe.TreeS
	perStep := probe.ChainS + probe.VerifyS
	if perStep <= 0 {
		return realT
	}
	t := int((budget.Seconds() - fixed) / perStep)
	return max(1, min(realT, t))
}

// RunChallenge runs a challenge of size p on dev alone, as a supplier
// answers one: Commit (timed), Sweep of a fresh vector, Open of K drawn
// rows; then checks them as the challenger does (challenge.Verifier) and
// judges the commit's time by challenge.RealTimeBound(profile, p).
func RunChallenge(ctx context.Context, dev *Device, profile catalog.Profile, p challenge.Params, kernel Kernel) (ChallengeResult, error) {
	res := ChallengeResult{Check: "challenge", Model: profile.Slug, Device: dev.Info.Ordinal, Name: dev.Info.Name, N: p.N, T: p.T, K: p.K}
	pr := NewProverOn([]*Device{dev}, ProverOptions{Kernel: kernel})
	seed := [32]byte{'c', 'h', 'a', 'l', 'l', 'e', 'n', 'g', 'e'}
	roots, err := pr.Commit(ctx, [][32]byte{seed}, p)
	if err != nil {
		return res, err
	}
	tm := pr.LastTiming()
	g := tm.GPUs[0]
	res.Kernel = g.Kernel
	res.DeriveS, res.UploadS, res.ChainS, res.DownloadS = g.Derive.Seconds(), g.Upload.Seconds(), g.Chain.Seconds(), g.Download.Seconds()
	res.TreeS, res.CommitS = tm.Tree.Seconds(), tm.Total.Seconds()

	r := challenge.DrawVector([32]byte{'r', 's'}, p.N)
	t := time.Now()
	s, err := pr.Sweep(ctx, 0, r)
	if err != nil {
		return res, err
	}
	res.SweepS = time.Since(t).Seconds()
	rows, err := challenge.DrawRows([32]byte{'r', 'o', 'w', 's'}, p.N, p.K)
	if err != nil {
		return res, err
	}
	t = time.Now()
	openings, err := pr.Open(ctx, 0, rows)
	if err != nil {
		return res, err
	}
	res.OpenS = time.Since(t).Seconds()

	t = time.Now()
	v, err := challenge.NewVerifier(ctx, seed, p, 0)
	if err != nil {
		return res, err
	}
	verr := v.VerifyOpenings(ctx, roots[0], r, s, rows, openings)
	res.VerifyS = time.Since(t).Seconds()
	res.Verified = verr == nil

	res.CostRatio = challenge.CostRatio(p)
	if res.CommitS > 0 {
		res.VerifierFraction = res.VerifyS / res.CommitS
	}
	res.Ops = 2 * challenge.ProverOps(p)
	res.PeakTOPS = float64(profile.INT8GOPS) / 1e3
	if res.ChainS > 0 {
		res.TOPS = res.Ops / res.ChainS / 1e12
	}
	if res.PeakTOPS > 0 {
		res.Eta = res.TOPS / res.PeakTOPS
		if res.CommitS > 0 {
			res.CommitEta = res.Ops / res.CommitS / 1e12 / res.PeakTOPS
		}
	}
	bound := challenge.RealTimeBound(profile, p)
	res.BoundMinS, res.BoundMaxS = bound.Min.Seconds(), bound.Max.Seconds()
	berr := bound.Check(tm.Total)
	if realT := challenge.RealParams(profile).T; p.N == challenge.RealN && p.T != realT {
		res.RealT = realT
	}
	switch {
	case verr != nil:
		res.Verdict = "openings rejected: " + verr.Error()
	case res.RealT != 0 || p.N != challenge.RealN:
		res.Pass = true
		res.Verdict = fmt.Sprintf("verified; time bound not judged (N = %d, T = %d, not the real sizes)", p.N, p.T)
	case berr != nil:
		res.Verdict = berr.Error()
	default:
		res.Pass = true
		res.Verdict = "pass"
	}
	return res, nil
}

// MemResult is a full-size memory proof of one device.
type MemResult struct {
	Check       string  `json:"check"` // "memory"
	Model       string  `json:"model"`
	Device      int     `json:"device"`
	Buffers     int     `json:"buffers"`
	BufferBytes int     `json:"buffer_bytes"`
	WindowBytes int     `json:"window_bytes"`
	Rounds      int     `json:"rounds"`
	FillS       float64 `json:"fill_s"`    // untimed: filling the buffers
	RespondS    float64 `json:"respond_s"` // the timed rounds
	DeadlineS   float64 `json:"deadline_s"`
	Margin      float64 `json:"margin"` // DeadlineS / RespondS
	// GBps is the bytes the rounds read over RespondS; Eta that over the
	// profile's datasheet bandwidth (the deadline assumes
	// challenge.MemEfficiency).
	GBps         float64 `json:"gbps"`
	DatasheetGBs float64 `json:"datasheet_gbps"`
	Eta          float64 `json:"eta"`
	Verified     bool    `json:"verified"`
	Pass         bool    `json:"pass"`
	Verdict      string  `json:"verdict"`
}

// RunMemProof fills p's buffers on dev, answers the rounds (timed) and
// checks the answer as the challenger does (challenge.MemVerify against
// challenge.MemRealDeadline of profile).
func RunMemProof(ctx context.Context, dev *Device, profile catalog.Profile, p challenge.MemParams) (MemResult, error) {
	res := MemResult{Check: "memory", Model: profile.Slug, Device: dev.Info.Ordinal, Buffers: p.Buffers,
		BufferBytes: p.BufferBytes, WindowBytes: p.WindowBytes, Rounds: p.Rounds, DatasheetGBs: float64(profile.MemoryBandwidthGBps)}
	seed, sigma := [32]byte{'m', 'e', 'm'}, [32]byte{'s', '0'}
	t := time.Now()
	b, err := NewMemBackend(ctx, dev, seed, p)
	if err != nil {
		return res, err
	}
	res.FillS = time.Since(t).Seconds()
	mp, err := challenge.NewMemProverOn(b, p)
	if err != nil {
		b.Close()
		return res, err
	}
	defer mp.Close()
	t = time.Now()
	resp, err := mp.Respond(ctx, sigma)
	if err != nil {
		return res, err
	}
	elapsed := time.Since(t)
	res.RespondS = elapsed.Seconds()
	deadline := challenge.MemRealDeadline(profile, p)
	res.DeadlineS = deadline.Seconds()
	if res.RespondS > 0 {
		res.Margin = res.DeadlineS / res.RespondS
		res.GBps = float64(p.RoundBytes()) * float64(p.Rounds) / res.RespondS / 1e9
	}
	if res.DatasheetGBs > 0 {
		res.Eta = res.GBps / res.DatasheetGBs
	}
	// The digests first (no deadline), then the time, so that the result
	// tells a wrong answer from a slow one.
	verr := challenge.MemVerify(seed, p, sigma, [32]byte{'c', 'k'}, resp, 0, 0)
	res.Verified = verr == nil
	switch {
	case verr != nil:
		res.Verdict = verr.Error()
	case elapsed > deadline:
		res.Verdict = fmt.Sprintf("took %v, deadline %v", elapsed, deadline)
	default:
		res.Pass = true
		res.Verdict = "pass"
	}
	return res, nil
}
