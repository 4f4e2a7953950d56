package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// ErrUnreachable means the prover could not be reached or stopped
// answering: an uptime failure, not a failed challenge.
var ErrUnreachable = errors.New("prover unreachable")

// ErrBusy means the prover declined to start now (another challenge under
// way, or this challenger came too soon): neither a failure nor a pass.
var ErrBusy = errors.New("prover busy")

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

// Challenger challenges suppliers. It judges simulated devices against its
// own run of the same work on the same backend, made at the same time.
type Challenger struct {
	host  host.Host
	scale int
	log   *slog.Logger
}

// NewChallenger returns a challenger using h. scale is the simulation
// scale the testnet runs at (challenge.DefaultSimScale when 0).
func NewChallenger(h host.Host, scale int, log *slog.Logger) *Challenger {
	if scale == 0 {
		scale = challenge.DefaultSimScale
	}
	if log == nil {
		log = slog.Default()
	}
	return &Challenger{host: h, scale: scale, log: log}
}

// ownRun is the challenger's own run of the prover's work.
type ownRun struct {
	took time.Duration
	err  error
}

// sameWork computes, here, what a simulated prover of gpus GPUs computes
// for a commit, and times it.
func (c *Challenger) sameWork(ctx context.Context, p challenge.Params, gpus int) ownRun {
	seeds := make([][32]byte, gpus)
	for i := range seeds {
		_, _ = rand.Read(seeds[i][:])
	}
	start := time.Now()
	_, err := challenge.NewCPUProver(challenge.CPUOptions{}).Commit(ctx, seeds, p)
	return ownRun{took: time.Since(start), err: err}
}

// maxRTTAllowance caps the round trip added to the memory deadline.
const maxRTTAllowance = 250 * time.Millisecond

// roundTrip measures one libp2p ping round trip to p, capped.
func (c *Challenger) roundTrip(ctx context.Context, p peer.ID) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, maxRTTAllowance)
	defer cancel()
	r, ok := <-ping.Ping(ctx, c.host, p)
	if !ok || r.Error != nil {
		return maxRTTAllowance
	}
	return min(r.RTT, maxRTTAllowance)
}

// ownMem holds this machine's own copy of a simulated memory proof, to
// time its answer beside the prover's.
type ownMem []*challenge.MemProver

func newOwnMem(ctx context.Context, m challenge.MemParams, gpus int) (ownMem, error) {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	own := make(ownMem, gpus)
	for g := range own {
		var err error
		if own[g], err = challenge.NewMemProver(ctx, MemSeed(seed, g), m, 1); err != nil {
			return nil, fmt.Errorf("challenge: prepare the same memory here: %w", err)
		}
	}
	return own, nil
}

// respond answers every GPU's memory proof and times it.
func (o ownMem) respond(ctx context.Context, sigma0 [32]byte) ownRun {
	start := time.Now()
	for _, m := range o {
		if _, err := m.Respond(ctx, sigma0); err != nil {
			return ownRun{err: err}
		}
	}
	return ownRun{took: time.Since(start)}
}

// Challenge makes subject prove every GPU of model that uuids lists (all
// it claims). A failed proof is a Result with Passed false and the
// reason; an error means the challenge could not be run (ErrUnreachable
// for the prover's part).
func (c *Challenger) Challenge(ctx context.Context, subject peer.ID, model string, uuids []string, simulated bool) (Result, error) {
	prof, ok := catalog.Lookup(model)
	if !ok {
		return Result{}, fmt.Errorf("challenge: unknown model %q", model)
	}
	params, memParams := Sizes(prof, simulated, c.scale)
	res := Result{PeerID: subject.String(), Model: model, Claimed: len(uuids), UUIDs: uuids, Simulated: simulated,
		N: params.N, T: params.T, K: params.K, VerifierCostRatio: challenge.CostRatio(params)}
	_, _ = rand.Read(res.id[:])
	res.ChallengeID = hex.EncodeToString(res.id[:])
	var bound *challenge.TimeBound // nil: measured alongside (simulated)
	var memDeadline time.Duration  // 0: measured alongside (simulated)
	if !simulated {
		b := challenge.RealTimeBound(prof, params)
		bound = &b
		res.Expected = gops(params, len(uuids), b.Max)
		memDeadline = time.Duration(len(uuids)) * challenge.MemRealDeadline(prof, memParams)
	}
	start := time.Now()
	err := c.run(ctx, subject, &res, params, memParams, bound, memDeadline)
	res.DurationMs = time.Since(start).Milliseconds()
	if err != nil && !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrBusy) {
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
func (c *Challenger) run(ctx context.Context, subject peer.ID, res *Result, params challenge.Params, mp challenge.MemParams, bound *challenge.TimeBound, memDeadline time.Duration) error {
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
	// A simulated device is judged against this machine doing the same
	// work at the same time, so that both meet the same load.
	own := make(chan ownRun, 1)
	if bound == nil {
		go func() { own <- c.sameWork(ctx, params, gpus) }()
	}
	var commit pb.Commit
	if err := io(p2p.ReadMsg(s, gpus*40+maxSmallMsg, &commit)); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if commit.Refused != "" && commit.Busy {
		return fmt.Errorf("%w: %s", ErrBusy, commit.Refused)
	}
	if commit.Refused != "" {
		return fmt.Errorf("prover refused: %s", commit.Refused)
	}
	if len(commit.Roots) != gpus {
		return fmt.Errorf("%d roots for %d GPUs: %w", len(commit.Roots), gpus, challenge.ErrMalformed)
	}
	res.CommitMs = elapsed.Milliseconds()
	res.Measured = gops(params, gpus, elapsed)
	if bound == nil {
		o := <-own
		if o.err != nil {
			return fmt.Errorf("challenge: measure the same work here: %w", o.err)
		}
		b := challenge.SimTimeBound(o.took)
		bound = &b
		res.Expected = gops(params, gpus, b.Max)
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
	var mine ownMem
	if memDeadline == 0 {
		var err error
		if mine, err = newOwnMem(ctx, mp, gpus); err != nil {
			return err
		}
	}
	var ready pb.MemReady
	if err := io(p2p.ReadMsg(s, maxSmallMsg, &ready)); err != nil {
		return err
	}
	// The memory proof is short (tens of ms for simulated devices), so the
	// round trip counts: measure one now, under the same load, and allow
	// it, up to maxRTTAllowance (a prover slowing its pings gains no more).
	rtt := c.roundTrip(ctx, subject)
	if ready.Refused != "" {
		return fmt.Errorf("memory proof refused: %s", ready.Refused)
	}
	step()
	memStart := time.Now()
	if err := io(p2p.WriteMsg(s, &pb.MemRequest{Sigma0: sigma0[:]})); err != nil {
		return err
	}
	ownAnswer := make(chan ownRun, 1)
	if mine != nil {
		var other [32]byte
		_, _ = rand.Read(other[:])
		go func() { ownAnswer <- mine.respond(ctx, other) }()
	}
	var done pb.MemDone
	if err := io(p2p.ReadMsg(s, gpus*40+maxSmallMsg, &done)); err != nil {
		return err
	}
	memElapsed := time.Since(memStart)
	res.MemoryMs = memElapsed.Milliseconds()
	if mine != nil {
		o := <-ownAnswer
		if o.err != nil {
			return fmt.Errorf("challenge: answer the same memory proof here: %w", o.err)
		}
		memDeadline = challenge.MemSimDeadline(o.took)
	}
	memDeadline += rtt
	var mem pb.MemResponse
	if err := io(p2p.ReadMsg(s, memLimit(gpus, mp), &mem)); err != nil {
		return err
	}
	if len(mem.Gpus) != gpus || len(done.Commitments) != gpus {
		return fmt.Errorf("memory proofs for %d and commitments for %d of %d GPUs: %w", len(mem.Gpus), len(done.Commitments), gpus, challenge.ErrMalformed)
	}
	for g := range gpus {
		if c := memCommitment(mem.Gpus[g]); string(c[:]) != string(done.Commitments[g]) {
			return fmt.Errorf("GPU %s: memory digests do not match the commitment sent when the clock stopped: %w", res.UUIDs[g], challenge.ErrMemDigest)
		}
	}
	for g := range gpus {
		// The deadline covers all GPUs' answers together.
		if err := challenge.MemVerify(MemSeed(memSeed, g), mp, sigma0, checkSeed, decodeMem(mem.Gpus[g]), memElapsed, memDeadline); err != nil {
			return fmt.Errorf("GPU %s: %w", res.UUIDs[g], err)
		}
	}
	return nil
}
