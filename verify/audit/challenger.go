package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// ErrUnreachable means the prover could not be reached or stopped
// answering: an uptime failure, not a failed challenge.
var ErrUnreachable = errors.New("prover unreachable")

// Result is a challenge's outcome. JSON names are a contract of
// `gpumesh challenge --json`.
type Result struct {
	PeerID            string   `json:"peer_id"`
	Model             string   `json:"model"`
	Passed            bool     `json:"passed"`
	Reason            string   `json:"reason"`
	GPUs              int      `json:"gpus"` // proven (0 unless passed)
	Claimed           int      `json:"claimed"`
	UUIDs             []string `json:"gpu_uuids"`
	Measured          float64  `json:"measured"` // throughput, GOPS (2 ops per multiply-add)
	Expected          float64  `json:"expected"` // the least throughput the claim allows, GOPS
	RowsChecked       int      `json:"rows_checked"`
	VerifierCostRatio float64  `json:"verifier_cost_ratio"`
	CommitMs          int64    `json:"commit_ms"`
	MemoryMs          int64    `json:"memory_ms"`
	DurationMs        int64    `json:"duration_ms"`
	Simulated         bool     `json:"simulated"`
	ChallengeID       string   `json:"challenge_id"`
	N, T, K           int      `json:"-"`
	id                [32]byte
}

// Attestation is the signed verdict's content.
func (r Result) Attestation(now time.Time) *pb.Attestation {
	a := &pb.Attestation{
		CreatedMs: now.UnixMilli(), Kind: reputation.KindChallenge, Passed: r.Passed, Reason: r.Reason,
		Model: r.Model, RowsChecked: uint32(r.RowsChecked), DurationMs: r.DurationMs,
		MeasuredMilliOps: int64(r.Measured * 1e3), ExpectedMilliOps: int64(r.Expected * 1e3),
		ChallengeId: r.id[:],
	}
	if id, err := peer.Decode(r.PeerID); err == nil {
		a.Subject = []byte(id)
	}
	if r.Passed {
		a.Gpus, a.GpuUuids = uint32(r.GPUs), r.UUIDs
	}
	return a
}

// Challenger challenges suppliers. It keeps its own measurements of the
// simulated work, to judge simulated devices against the same backend.
type Challenger struct {
	host  host.Host
	scale int
	log   *slog.Logger

	mu    sync.Mutex
	calib map[challenge.Params]calibration
}

type calibration struct {
	perGPU, mem time.Duration
	at          time.Time
}

// calibrationTTL is how long a measurement of the local machine is reused.
const calibrationTTL = time.Minute

// NewChallenger returns a challenger using h. scale is the simulation
// scale the testnet runs at (challenge.DefaultSimScale when 0).
func NewChallenger(h host.Host, scale int, log *slog.Logger) *Challenger {
	if scale == 0 {
		scale = challenge.DefaultSimScale
	}
	if log == nil {
		log = slog.Default()
	}
	return &Challenger{host: h, scale: scale, log: log, calib: map[challenge.Params]calibration{}}
}

// measure times one honest simulated GPU and one memory proof of these
// sizes on this machine, reusing a recent measurement.
func (c *Challenger) measure(ctx context.Context, p challenge.Params, m challenge.MemParams) (calibration, error) {
	c.mu.Lock()
	cal, ok := c.calib[p]
	c.mu.Unlock()
	if ok && time.Since(cal.at) < calibrationTTL {
		return cal, nil
	}
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	start := time.Now()
	if _, err := challenge.NewCPUProver(challenge.CPUOptions{}).Commit(ctx, [][32]byte{seed}, p); err != nil {
		return cal, fmt.Errorf("calibrate: %w", err)
	}
	perGPU := time.Since(start)
	mem, err := challenge.MemCalibrate(ctx, m)
	if err != nil {
		return cal, fmt.Errorf("calibrate memory: %w", err)
	}
	cal = calibration{perGPU: perGPU, mem: mem, at: time.Now()}
	c.mu.Lock()
	c.calib[p] = cal
	c.mu.Unlock()
	return cal, nil
}

// Challenge makes subject prove every GPU of model that uuids lists (all
// it claims). A failed proof is a Result with Passed false and the
// reason; an error means the challenge could not be run (ErrUnreachable
// for the prover's part).
func (c *Challenger) Challenge(ctx context.Context, subject peer.ID, model string, uuids []string, simulated bool) (Result, error) {
	prof, ok := verify.LookupProfile(model)
	if !ok {
		return Result{}, fmt.Errorf("challenge: unknown model %q", model)
	}
	params, memParams := Sizes(prof, simulated, c.scale)
	res := Result{PeerID: subject.String(), Model: model, Claimed: len(uuids), UUIDs: uuids, Simulated: simulated,
		N: params.N, T: params.T, K: params.K, VerifierCostRatio: challenge.CostRatio(params)}
	_, _ = rand.Read(res.id[:])
	res.ChallengeID = hex.EncodeToString(res.id[:])
	bound := challenge.RealTimeBound(prof, params)
	memDeadline := time.Duration(len(uuids)) * challenge.MemRealDeadline(prof, memParams)
	if simulated {
		cal, err := c.measure(ctx, params, memParams)
		if err != nil {
			return res, err
		}
		bound = challenge.SimTimeBound(time.Duration(len(uuids)) * cal.perGPU)
		memDeadline = challenge.MemSimDeadline(time.Duration(len(uuids)) * cal.mem)
	}
	if bound.Max > 0 {
		res.Expected = gops(params, len(uuids), bound.Max)
	}
	start := time.Now()
	err := c.run(ctx, subject, &res, params, memParams, bound, memDeadline)
	res.DurationMs = time.Since(start).Milliseconds()
	if err != nil && !errors.Is(err, ErrUnreachable) {
		res.Passed, res.Reason, res.GPUs = false, err.Error(), 0
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Passed, res.GPUs, res.Reason = true, len(uuids), "all GPUs proven"
	return res, nil
}

func gops(p challenge.Params, gpus int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return 2 * challenge.ProverOps(p) * float64(gpus) / d.Seconds() / 1e9
}

// run is the exchange. A verification failure is returned as is; a
// transport failure wraps ErrUnreachable.
func (c *Challenger) run(ctx context.Context, subject peer.ID, res *Result, params challenge.Params, mp challenge.MemParams, bound challenge.TimeBound, memDeadline time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 4*stepTimeout)
	defer cancel()
	s, err := c.host.NewStream(ctx, subject, ChallengeProtocol)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer s.Close()
	step := func() { _ = s.SetDeadline(time.Now().Add(stepTimeout)) }
	io := func(err error) error {
		if err != nil {
			s.Reset()
			return fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
		return nil
	}
	gpus := len(res.UUIDs)
	seeds := make([][32]byte, gpus)
	req := &pb.ChallengeRequest{ChallengeId: res.id[:], Model: res.Model, GpuUuids: res.UUIDs,
		N: uint32(params.N), T: uint32(params.T), K: uint32(params.K), Simulated: res.Simulated, Scale: uint32(c.scale)}
	for i := range seeds {
		_, _ = rand.Read(seeds[i][:])
		req.Seeds = append(req.Seeds, seeds[i][:])
	}
	step()
	start := time.Now()
	if err := io(p2p.WriteMsg(s, req)); err != nil {
		return err
	}
	var commit pb.Commit
	if err := io(p2p.ReadMsg(s, gpus*40+maxSmallMsg, &commit)); err != nil {
		return err
	}
	elapsed := time.Since(start)
	res.CommitMs = elapsed.Milliseconds()
	res.Measured = gops(params, gpus, elapsed)
	if commit.Refused != "" {
		return fmt.Errorf("prover refused: %s", commit.Refused)
	}
	if len(commit.Roots) != gpus {
		return fmt.Errorf("%d roots for %d GPUs: %w", len(commit.Roots), gpus, challenge.ErrMalformed)
	}
	if err := bound.Check(elapsed); err != nil {
		return err
	}

	var rSeed, rowsSeed, memSeed, sigma0, checkSeed [32]byte
	for _, b := range []*[32]byte{&rSeed, &rowsSeed, &memSeed, &sigma0, &checkSeed} {
		_, _ = rand.Read(b[:])
	}
	step()
	if err := io(p2p.WriteMsg(s, &pb.SweepRequest{RSeed: rSeed[:]})); err != nil {
		return err
	}
	var sweeps pb.SweepResponse
	if err := io(p2p.ReadMsg(s, sweepLimit(gpus, params), &sweeps)); err != nil {
		return err
	}
	if len(sweeps.Gpus) != gpus {
		return fmt.Errorf("%d sweeps for %d GPUs: %w", len(sweeps.Gpus), gpus, challenge.ErrMalformed)
	}
	step()
	if err := io(p2p.WriteMsg(s, &pb.OpenRequest{RowsSeed: rowsSeed[:]})); err != nil {
		return err
	}
	var opens pb.OpenResponse
	if err := io(p2p.ReadMsg(s, openLimit(gpus, params), &opens)); err != nil {
		return err
	}
	if len(opens.Gpus) != gpus {
		return fmt.Errorf("openings for %d of %d GPUs: %w", len(opens.Gpus), gpus, challenge.ErrMalformed)
	}
	r := challenge.DrawVector(rSeed, params.N)
	for g := range gpus {
		rows, err := challenge.DrawRows(RowSeed(rowsSeed, g), params.N, params.K)
		if err != nil {
			return err
		}
		os, err := decodeOpenings(opens.Gpus[g])
		if err != nil {
			return fmt.Errorf("GPU %s: %w", res.UUIDs[g], err)
		}
		v, err := challenge.NewVerifier(ctx, seeds[g], params, 0)
		if err != nil {
			return err
		}
		if err := v.VerifyOpenings(ctx, seed32(commit.Roots[g]), r, sweeps.Gpus[g].S, rows, os); err != nil {
			return fmt.Errorf("GPU %s: %w", res.UUIDs[g], err)
		}
		res.RowsChecked += len(rows)
	}

	step()
	if err := io(p2p.WriteMsg(s, &pb.MemPrepare{Seed: memSeed[:]})); err != nil {
		return err
	}
	var ready pb.MemReady
	if err := io(p2p.ReadMsg(s, maxSmallMsg, &ready)); err != nil {
		return err
	}
	if ready.Refused != "" {
		return fmt.Errorf("memory proof refused: %s", ready.Refused)
	}
	step()
	memStart := time.Now()
	if err := io(p2p.WriteMsg(s, &pb.MemRequest{Sigma0: sigma0[:]})); err != nil {
		return err
	}
	var mem pb.MemResponse
	if err := io(p2p.ReadMsg(s, memLimit(gpus, mp), &mem)); err != nil {
		return err
	}
	memElapsed := time.Since(memStart)
	res.MemoryMs = memElapsed.Milliseconds()
	if len(mem.Gpus) != gpus {
		return fmt.Errorf("memory proofs for %d of %d GPUs: %w", len(mem.Gpus), gpus, challenge.ErrMalformed)
	}
	for g := range gpus {
		// The deadline covers all GPUs' answers together.
		if err := challenge.MemVerify(MemSeed(memSeed, g), mp, sigma0, checkSeed, decodeMem(mem.Gpus[g]), memElapsed, memDeadline); err != nil {
			return fmt.Errorf("GPU %s: %w", res.UUIDs[g], err)
		}
	}
	return nil
}
