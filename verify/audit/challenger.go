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
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"google.golang.org/protobuf/proto"

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

// BusyError is ErrBusy with the prover's reason and when it said to try
// again (0 when it did not say).
type BusyError struct {
	Reason     string
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%v: %s (retry after %v)", ErrBusy, e.Reason, e.RetryAfter)
	}
	return fmt.Sprintf("%v: %s", ErrBusy, e.Reason)
}

// Is makes a BusyError ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// ErrNoProver means the prover has real GPUs of the model and no GPU
// prover to answer for them: a Result with OutcomeNoProver, neither a
// failure nor down.
var ErrNoProver = errors.New("no GPU prover")

// ErrVersion means the prover speaks only the retired challenge protocol
// (ChallengeProtocolV1): a Result with OutcomeVersion, neither a failure
// nor a sign that it is down.
var ErrVersion = errors.New("prover speaks only challenge protocol 1.0.0, not 2.0.0")

// Outcomes of a Result.
const (
	OutcomePassed = "passed" // every check held
	OutcomeFailed = "failed" // a check failed, or the prover refused the request
	// OutcomeVersion: the prover speaks only a retired protocol version;
	// nothing was proven or disproven.
	OutcomeVersion = "version"
	// OutcomeNoProver: the prover has no GPU prover for its real GPUs and
	// refused at once; nothing was proven or disproven.
	OutcomeNoProver = "no-prover"
)

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
	MemoryMs          int64    `json:"memory_ms"`       // the last memory proof asked
	MemAttempts       int      `json:"memory_attempts"` // memory proofs asked (MemAttempts at most)
	Runs              int      `json:"runs"`            // 2 when a late commit was run again
	DurationMs        int64    `json:"duration_ms"`
	Simulated         bool     `json:"simulated"`
	ChallengeID       string   `json:"challenge_id"`
	Outcome           string   `json:"outcome"` // OutcomePassed, OutcomeFailed, or one that judges nothing (OutcomeNoProver, OutcomeVersion)
	N, T, K           int      `json:"-"`
	id                [32]byte
	// commitLate is set when the commit came after commitAllowed.
	commitLate    bool
	commitAllowed time.Duration
}

// Judged reports whether r is a verdict on the supplier's GPUs, passed or
// failed, to be attested; other outcomes prove and disprove nothing.
func (r Result) Judged() bool { return r.Outcome == OutcomePassed || r.Outcome == OutcomeFailed }

// Attestation is the signed verdict's content.
func (r Result) Attestation(now time.Time) *pb.Attestation {
	a := &pb.Attestation{
		CreatedMs: now.UnixMilli(), Kind: reputation.KindChallenge, Passed: r.Passed, Reason: r.Reason,
		Model: r.Model, RowsChecked: uint32(r.RowsChecked), DurationMs: r.DurationMs,
		MeasuredMilliOps: int64(r.Measured * 1e3), ExpectedMilliOps: int64(r.Expected * 1e3),
		ChallengeId: r.id[:], Simulated: r.Simulated,
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
	// rerun is RerunSlowFactor; tests widen it to make a run late by
	// little at will.
	rerun float64
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
	return &Challenger{host: h, scale: scale, log: log, rerun: RerunSlowFactor}
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

// maxRTTAllowance caps the round trip added to the commit's time bound and
// to the memory deadline.
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
//
// A commit that came late by little (at most RerunSlowFactor times the
// time allowed), while nothing else was found wrong, is run once more,
// from fresh seeds, once the prover's MinPeerGap has passed since the
// first run ended, and the second run's verdict stands: a burst of load
// on either machine, or a retransmission on the WAN, delays one run,
// while a device slower than its claim is as slow the second time.
func (c *Challenger) Challenge(ctx context.Context, subject peer.ID, model string, uuids []string, simulated bool) (Result, error) {
	res, err := c.challengeOnce(ctx, subject, model, uuids, simulated)
	if err != nil || res.Passed || !res.lateByLittle(c.rerun) {
		return res, err
	}
	c.log.Debug("challenge: commit late by little; running it again", "peer", subject, "model", model, "reason", res.Reason)
	// The prover admitted the first run after it began, at most as it
	// ended: a gap counted from the end is a gap from the admission.
	t := time.NewTimer(MinPeerGap)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return res, nil
	case <-t.C:
	}
	again, err := c.challengeOnce(ctx, subject, model, uuids, simulated)
	if err != nil {
		return res, nil // busy or gone: the first run's verdict stands
	}
	again.Runs = 2
	return again, nil
}

// RerunSlowFactor bounds how late a commit may be, as a multiple of the
// time allowed, for Challenge to run the challenge once more.
const RerunSlowFactor = 1.5

// lateByLittle reports whether r failed only because its commit came
// after the time allowed, by at most factor times that time.
func (r Result) lateByLittle(factor float64) bool {
	return r.commitLate && r.commitAllowed > 0 &&
		float64(r.CommitMs)*float64(time.Millisecond) <= factor*float64(r.commitAllowed)
}

// challengeOnce is one run of Challenge.
func (c *Challenger) challengeOnce(ctx context.Context, subject peer.ID, model string, uuids []string, simulated bool) (Result, error) {
	prof, ok := catalog.Lookup(model)
	if !ok {
		return Result{}, fmt.Errorf("challenge: unknown model %q", model)
	}
	params, memParams := Sizes(prof, simulated, c.scale)
	res := Result{PeerID: subject.String(), Model: model, Claimed: len(uuids), UUIDs: uuids, Simulated: simulated, Runs: 1,
		N: params.N, T: params.T, K: params.K, VerifierCostRatio: challenge.CostRatio(params)}
	_, _ = rand.Read(res.id[:])
	res.ChallengeID = hex.EncodeToString(res.id[:])
	var bound *challenge.TimeBound // nil: measured alongside (simulated)
	var memDeadline time.Duration  // 0: measured alongside (simulated)
	if !simulated {
		b := challenge.RealTimeBound(prof, params)
		bound = &b
		res.Expected = gops(params, len(uuids), b.Max)
		// The GPUs answer at once, each on its own device.
		memDeadline = challenge.MemRealDeadline(prof, memParams)
	}
	start := time.Now()
	err := c.run(ctx, subject, &res, params, memParams, bound, memDeadline)
	res.DurationMs = time.Since(start).Milliseconds()
	switch {
	case errors.Is(err, ErrVersion):
		res.Outcome, res.Reason = OutcomeVersion, err.Error()
		return res, nil
	case errors.Is(err, ErrNoProver):
		res.Outcome, res.Reason = OutcomeNoProver, err.Error()
		return res, nil
	case errors.Is(err, ErrUnreachable) || errors.Is(err, ErrBusy):
		return res, err
	case err != nil:
		res.Passed, res.Reason, res.GPUs, res.Outcome = false, err.Error(), 0, OutcomeFailed
		return res, nil
	}
	res.Passed, res.GPUs, res.Reason, res.Outcome = true, len(uuids), "all GPUs proven", OutcomePassed
	return res, nil
}

func gops(p challenge.Params, gpus int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return 2 * challenge.ProverOps(p) * float64(gpus) / d.Seconds() / 1e9
}

// run is the exchange: open a stream, then its three phases, commit,
// sweep-and-open and memory. A verification failure is returned as is; a
// transport failure wraps ErrUnreachable.
func (c *Challenger) run(ctx context.Context, subject peer.ID, res *Result, params challenge.Params, mp challenge.MemParams, bound *challenge.TimeBound, memDeadline time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, exchangeTimeout(len(res.UUIDs), mp))
	defer cancel()
	s, err := c.host.NewStream(ctx, subject, ChallengeProtocol)
	if err != nil {
		if c.speaksOnlyV1(ctx, subject) {
			return fmt.Errorf("%w: upgrade it to take a challenge", ErrVersion)
		}
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer s.Close()
	x := &exchange{c: c, s: s, subject: subject, res: res, params: params, mp: mp, gpus: len(res.UUIDs)}
	roots, err := x.commit(ctx, bound)
	if err != nil {
		return err
	}
	if err := x.sweepAndOpen(ctx, roots); err != nil {
		return err
	}
	return x.memory(ctx, memDeadline)
}

// speaksOnlyV1 reports whether subject, which did not take a
// ChallengeProtocol stream, speaks only ChallengeProtocolV1: its
// protocols, as identify put them in the peerstore, do not list
// ChallengeProtocol, and it takes a ChallengeProtocolV1 stream (the
// stream opened to find out is reset at once). A prover of this version
// also takes version-1 streams (to refuse them), so a stream of this
// version that failed for a passing reason (a reset, a resource limit)
// to a peer that lists ChallengeProtocol is not a version mismatch.
func (c *Challenger) speaksOnlyV1(ctx context.Context, subject peer.ID) bool {
	if c.host.Network().Connectedness(subject) != network.Connected {
		return false
	}
	if v2, err := c.host.Peerstore().SupportsProtocols(subject, ChallengeProtocol); err != nil || len(v2) > 0 {
		return false
	}
	s, err := c.host.NewStream(ctx, subject, ChallengeProtocolV1)
	if err != nil {
		return false
	}
	s.Reset()
	return true
}

// exchange is one challenge's stream and what its phases share. Each
// phase starts a step: it sets the stream's deadline and writes the
// challenger's message, then reads the prover's answers.
type exchange struct {
	c       *Challenger
	s       network.Stream
	subject peer.ID
	res     *Result
	params  challenge.Params
	mp      challenge.MemParams
	gpus    int
	seeds   [][32]byte // the commit's, one per GPU
}

// send starts a step with m.
func (x *exchange) send(m proto.Message) error {
	_ = x.s.SetDeadline(time.Now().Add(stepTimeout))
	return x.transport(p2p.WriteMsg(x.s, m))
}

// recv reads the prover's next answer into m.
func (x *exchange) recv(limit int, m proto.Message) error {
	return x.transport(p2p.ReadMsg(x.s, limit, m))
}

// transport turns a stream failure into ErrUnreachable and resets the
// stream.
func (x *exchange) transport(err error) error {
	if err != nil {
		x.s.Reset()
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return nil
}

// draw returns n fresh random seeds.
func draw(n int) [][32]byte {
	seeds := make([][32]byte, n)
	for i := range seeds {
		_, _ = rand.Read(seeds[i][:])
	}
	return seeds
}

// commit is the first phase: the prover commits to every GPU's product
// of the seeded matrices, and the time it took is held against bound (nil
// for a simulated device: then this machine does the same work at the
// same time, so that both meet the same load, and bounds it by that). It
// returns the prover's roots, one per GPU.
func (x *exchange) commit(ctx context.Context, bound *challenge.TimeBound) ([][]byte, error) {
	x.seeds = draw(x.gpus)
	req := &pb.ChallengeRequest{ChallengeId: x.res.id[:], Model: x.res.Model, GpuUuids: x.res.UUIDs,
		N: uint32(x.params.N), T: uint32(x.params.T), K: uint32(x.params.K), Simulated: x.res.Simulated, Scale: uint32(x.c.scale)}
	for i := range x.seeds {
		req.Seeds = append(req.Seeds, x.seeds[i][:])
	}
	// The commit's time includes one round trip (request out, commit
	// back), which a prover across a WAN cannot help: it is allowed on
	// top of the bound, as the memory deadline allows it, capped.
	rtt := x.c.roundTrip(ctx, x.subject)
	start := time.Now()
	if err := x.send(req); err != nil {
		return nil, err
	}
	own := make(chan ownRun, 1)
	if bound == nil {
		go func() { own <- x.c.sameWork(ctx, x.params, x.gpus) }()
	}
	var commit pb.Commit
	if err := x.recv(x.gpus*40+maxSmallMsg, &commit); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	if err := x.checkCommit(&commit); err != nil {
		return nil, err
	}
	x.res.CommitMs = elapsed.Milliseconds()
	x.res.Measured = gops(x.params, x.gpus, elapsed)
	if bound == nil {
		o := <-own
		if o.err != nil {
			return nil, fmt.Errorf("challenge: measure the same work here: %w", o.err)
		}
		b := challenge.SimTimeBound(o.took)
		bound = &b
		x.res.Expected = gops(x.params, x.gpus, b.Max)
	}
	allowed := *bound
	if allowed.Max > 0 {
		allowed.Max += rtt
	}
	if err := allowed.Check(elapsed); err != nil {
		x.res.commitLate, x.res.commitAllowed = errors.Is(err, challenge.ErrTooSlow), allowed.Max
		return nil, err
	}
	return commit.Roots, nil
}

// checkCommit checks that the prover committed, to one root per GPU.
func (x *exchange) checkCommit(commit *pb.Commit) error {
	switch {
	case commit.Refused != "" && commit.Code == CodeNoProver:
		return fmt.Errorf("%w: %s", ErrNoProver, commit.Refused)
	case commit.Refused != "" && commit.Busy:
		return &BusyError{Reason: commit.Refused, RetryAfter: time.Duration(commit.RetryAfterMs) * time.Millisecond}
	case commit.Refused != "":
		return fmt.Errorf("prover refused: %s", commit.Refused)
	case len(commit.Roots) != x.gpus:
		return fmt.Errorf("%d roots for %d GPUs: %w", len(commit.Roots), x.gpus, challenge.ErrMalformed)
	}
	return nil
}

// sweepAndOpen is the second phase: the prover sweeps each committed
// product with a random vector, then opens random rows of it, and each
// opening must lead to its GPU's root and agree with the sweep.
func (x *exchange) sweepAndOpen(ctx context.Context, roots [][]byte) error {
	var rSeed, rowsSeed [32]byte
	_, _ = rand.Read(rSeed[:])
	_, _ = rand.Read(rowsSeed[:])
	if err := x.send(&pb.SweepRequest{RSeed: rSeed[:]}); err != nil {
		return err
	}
	var sweeps pb.SweepResponse
	if err := x.recv(sweepLimit(x.gpus, x.params), &sweeps); err != nil {
		return err
	}
	if len(sweeps.Gpus) != x.gpus {
		return fmt.Errorf("%d sweeps for %d GPUs: %w", len(sweeps.Gpus), x.gpus, challenge.ErrMalformed)
	}
	if err := x.send(&pb.OpenRequest{RowsSeed: rowsSeed[:]}); err != nil {
		return err
	}
	var opens pb.OpenResponse
	if err := x.recv(openLimit(x.gpus, x.params), &opens); err != nil {
		return err
	}
	if len(opens.Gpus) != x.gpus {
		return fmt.Errorf("openings for %d of %d GPUs: %w", len(opens.Gpus), x.gpus, challenge.ErrMalformed)
	}
	r := challenge.DrawVector(rSeed, x.params.N)
	for g := range x.gpus {
		if err := x.verifyOpenings(ctx, g, seed32(roots[g]), r, sweeps.Gpus[g].S, RowSeed(rowsSeed, g), opens.Gpus[g]); err != nil {
			return err
		}
	}
	return nil
}

// verifyOpenings checks GPU g's openings of the rows rowSeed draws against
// its root and its sweep s of vector r.
func (x *exchange) verifyOpenings(ctx context.Context, g int, root [32]byte, r, s []uint64, rowSeed [32]byte, opened *pb.GPUOpenings) error {
	rows, err := challenge.DrawRows(rowSeed, x.params.N, x.params.K)
	if err != nil {
		return err
	}
	os, err := decodeOpenings(opened)
	if err != nil {
		return fmt.Errorf("GPU %s: %w", x.res.UUIDs[g], err)
	}
	v, err := challenge.NewVerifier(ctx, x.seeds[g], x.params, 0)
	if err != nil {
		return err
	}
	if err := v.VerifyOpenings(ctx, root, r, s, rows, os); err != nil {
		return fmt.Errorf("GPU %s: %w", x.res.UUIDs[g], err)
	}
	x.res.RowsChecked += len(rows)
	return nil
}

// memory is the last phase: the prover fills each GPU's memory from a
// seed, then answers a random walk over it against the clock, committing
// to its digests when the clock stops. deadline is 0 for a simulated
// device: then this machine answers the same walk over its own copy at
// the same time and the deadline follows from that. An answer whose
// digests all check but that came after the deadline is asked again,
// with a fresh σ_0 and a fresh round trip, up to MemAttempts times in
// all: a lost packet or a burst of load delays one answer, while a prover
// that cannot do the work in time is late every time.
func (x *exchange) memory(ctx context.Context, deadline time.Duration) error {
	var memSeed [32]byte
	_, _ = rand.Read(memSeed[:])
	mine, rtt, err := x.memPrepare(ctx, memSeed, deadline == 0)
	if err != nil {
		return err
	}
	var late error
	for attempt := 1; attempt <= MemAttempts; attempt++ {
		if attempt > 1 {
			rtt = x.c.roundTrip(ctx, x.subject)
		}
		err := x.memAttempt(ctx, memSeed, mine, rtt, deadline)
		if late != nil && errors.Is(err, ErrUnreachable) {
			// A prover of before MemAttempts closes after one answer.
			return late
		}
		if !errors.Is(err, challenge.ErrMemDeadline) {
			return err
		}
		late = err
		x.c.log.Debug("memory proof late", "peer", x.subject, "attempt", attempt, "err", err)
	}
	return fmt.Errorf("%w (asked %d times)", late, MemAttempts)
}

// memAttempt asks for one memory proof from a fresh σ_0 and checks it:
// every digest first, then the time against deadline + rtt (deadline
// from this machine's own answer when mine is set).
func (x *exchange) memAttempt(ctx context.Context, memSeed [32]byte, mine ownMem, rtt, deadline time.Duration) error {
	var sigma0, checkSeed [32]byte
	_, _ = rand.Read(sigma0[:])
	_, _ = rand.Read(checkSeed[:])
	done, took, ownDeadline, err := x.memAnswer(ctx, sigma0, mine)
	if err != nil {
		return err
	}
	if mine != nil {
		deadline = ownDeadline
	}
	x.res.MemoryMs = took.Milliseconds()
	x.res.MemAttempts++
	var mem pb.MemResponse
	if err := x.recv(memLimit(x.gpus, x.mp), &mem); err != nil {
		return err
	}
	return x.memCheck(&mem, done, memSeed, sigma0, checkSeed, took, deadline+rtt)
}

// memPrepare has the prover fill its memory (and, when own, prepares the
// same here), then measures a round trip to it. The memory proof is short
// (tens of ms for simulated devices), so the round trip counts: it is
// measured now, under the same load, and allowed, up to maxRTTAllowance
// (a prover slowing its pings gains no more).
func (x *exchange) memPrepare(ctx context.Context, memSeed [32]byte, own bool) (ownMem, time.Duration, error) {
	if err := x.send(&pb.MemPrepare{Seed: memSeed[:]}); err != nil {
		return nil, 0, err
	}
	// The prover fills every GPU's buffers before it answers.
	_ = x.s.SetDeadline(time.Now().Add(prepareTimeout(x.gpus, x.mp)))
	var mine ownMem
	if own {
		var err error
		if mine, err = newOwnMem(ctx, x.mp, x.gpus); err != nil {
			return nil, 0, err
		}
	}
	var ready pb.MemReady
	if err := x.recv(maxSmallMsg, &ready); err != nil {
		return nil, 0, err
	}
	if ready.Refused != "" && ready.Busy {
		// A device without room (a renter's job holds it) judges nothing.
		return nil, 0, &BusyError{Reason: "memory proof: " + ready.Refused, RetryAfter: time.Duration(ready.RetryAfterMs) * time.Millisecond}
	}
	rtt := x.c.roundTrip(ctx, x.subject)
	if ready.Refused != "" {
		return nil, 0, fmt.Errorf("memory proof refused: %s", ready.Refused)
	}
	return mine, rtt, nil
}

// memAnswer starts the clock with sigma0 and stops it at the prover's
// commitments. When mine holds this machine's own copy, it answers at the
// same time and the deadline it returns follows from its time.
func (x *exchange) memAnswer(ctx context.Context, sigma0 [32]byte, mine ownMem) (*pb.MemDone, time.Duration, time.Duration, error) {
	start := time.Now()
	if err := x.send(&pb.MemRequest{Sigma0: sigma0[:]}); err != nil {
		return nil, 0, 0, err
	}
	ownAnswer := make(chan ownRun, 1)
	if mine != nil {
		var other [32]byte
		_, _ = rand.Read(other[:])
		go func() { ownAnswer <- mine.respond(ctx, other) }()
	}
	var done pb.MemDone
	if err := x.recv(x.gpus*40+maxSmallMsg, &done); err != nil {
		return nil, 0, 0, err
	}
	took := time.Since(start)
	if mine == nil {
		return &done, took, 0, nil
	}
	o := <-ownAnswer
	if o.err != nil {
		return nil, 0, 0, fmt.Errorf("challenge: answer the same memory proof here: %w", o.err)
	}
	return &done, took, challenge.MemSimDeadline(o.took), nil
}

// memCheck checks the prover's digests against the commitments it sent
// when the clock stopped, then each GPU's walk, all within deadline.
func (x *exchange) memCheck(mem *pb.MemResponse, done *pb.MemDone, memSeed, sigma0, checkSeed [32]byte, took, deadline time.Duration) error {
	if len(mem.Gpus) != x.gpus || len(done.Commitments) != x.gpus {
		return fmt.Errorf("memory proofs for %d and commitments for %d of %d GPUs: %w", len(mem.Gpus), len(done.Commitments), x.gpus, challenge.ErrMalformed)
	}
	for g := range x.gpus {
		if c := memCommitment(mem.Gpus[g]); string(c[:]) != string(done.Commitments[g]) {
			return fmt.Errorf("GPU %s: memory digests do not match the commitment sent when the clock stopped: %w", x.res.UUIDs[g], challenge.ErrMemDigest)
		}
	}
	for g := range x.gpus {
		if err := challenge.MemVerify(MemSeed(memSeed, g), x.mp, sigma0, checkSeed, decodeMem(mem.Gpus[g]), took, 0); err != nil {
			return fmt.Errorf("GPU %s: %w", x.res.UUIDs[g], err)
		}
	}
	// The deadline covers all GPUs' answers together; it is judged after
	// the digests, so that only an honest but late answer is asked again.
	if deadline > 0 && took > deadline {
		return fmt.Errorf("challenge: memory proof took %v, deadline %v: %w", took, deadline, challenge.ErrMemDeadline)
	}
	return nil
}
