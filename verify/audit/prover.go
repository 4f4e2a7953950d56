package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// GPU is one device a prover answers for.
type GPU struct {
	UUID      string
	Model     string
	Simulated bool
}

// DeviceProver proves real GPUs on the devices themselves (package
// verify/cuda): the matrix chain, whose Commit places seed g on the
// device of the g-th GPU it was made for (ProverConfig.Devices), and the
// memory proof's buffers in device memory.
type DeviceProver interface {
	challenge.Prover
	// Memory fills, for the g-th GPU of the last Commit (on the device
	// that Commit placed seed g on), the memory proof's buffers of size p
	// for seed (challenge.FillMemBuffer) and returns them.
	//
	// A device without room for the buffers (a renter's job holds its
	// memory) is an error that matches ErrDeviceMemory: the challenge is
	// then refused as busy (CodeNoMemory), judging nothing.
	Memory(ctx context.Context, g int, seed [32]byte, p challenge.MemParams) (challenge.MemBackend, error)
}

// ErrDeviceMemory is what a DeviceProver's Memory returns (wrapped) when
// a device has no room for the memory proof's buffers: the memory is
// taken, which says nothing about the GPU.
var ErrDeviceMemory = errors.New("no room in device memory for the memory proof")

// ProverConfig configures the prover side.
type ProverConfig struct {
	Host host.Host
	GPUs []GPU
	// Devices returns the prover of exactly gpus, real GPUs of one model
	// among GPUs, in the order the challenge names them: seed g on the
	// device of gpus[g], and nothing on any other device (a supplier with
	// A100s and H100s proves its H100s on the H100s). It is called once
	// per challenge admitted, and its prover serves the whole challenge.
	// An error refuses the challenge with CodeNoProver. Nil means there
	// is no GPU prover: a challenge of real GPUs is refused at once with
	// CodeNoProver, never answered by the CPU, which no real deadline
	// allows. Simulated GPUs are always proven by the CPU prover.
	Devices func(gpus []GPU) (DeviceProver, error)
	// Leased reports whether any of uuids, real GPUs a challenge names,
	// is held by a lease (pending or confirmed): it returns how long
	// until they are all free, 0 when none is leased. A challenge of
	// leased GPUs is refused at once, before any work, as busy
	// (CodeLeased) with that retry-after: its work would take the
	// renter's GPUs and memory, and the memory proof could not be filled
	// beside the renter's job. Nil: no GPU is ever leased.
	Leased func(uuids []string) time.Duration
	// Priority reports whether a challenger goes first: a trusted peer,
	// or a renter about to lease. Others are strangers, who share at most
	// StrangerShare of the prover's time over any StrangerWindow. Nil:
	// every challenger is a stranger.
	Priority func(peer.ID) bool
	// StrangerShare (DefaultStrangerShare when 0) and StrangerWindow
	// (DefaultStrangerWindow when 0) bound the time strangers' challenges
	// take.
	StrangerShare  float64
	StrangerWindow time.Duration
	// Cheat makes an impostor, for testnets: it must be zero unless every
	// GPU is simulated (the node refuses it otherwise).
	Cheat challenge.Cheat
	// Scale is the simulation scale (challenge.DefaultSimScale when 0).
	Scale int
	// PeerGap is how often one peer may challenge (MinPeerGap when 0).
	PeerGap time.Duration
	// RequestTimeout is how long a challenger has to send its request
	// once it opened a stream (p2p.StreamTimeout when 0).
	RequestTimeout time.Duration
	Now            func() time.Time
	Log            *slog.Logger

	// memLate, in tests, holds back the commitments of memory proof
	// attempt (0-based) as a lost packet on a WAN would; commitLate
	// holds back the commit of the run-th challenge admitted (0-based).
	memLate    func(attempt int) time.Duration
	commitLate func(run int) time.Duration
	// held, in tests, is told of every challenge admitted, when it ends:
	// from admission to release.
	held func(from, to time.Time, stranger bool)
}

// Prover serves ChallengeProtocol for a supplier's GPUs.
type Prover struct {
	cfg    ProverConfig
	prover challenge.Prover // one, so that a replaying impostor replays

	mu        sync.Mutex
	busy      bool
	busySince time.Time
	last      map[peer.ID]time.Time
	strangers budget // the time strangers' challenges took

	commits atomic.Int64 // commits computed (for ProverConfig.commitLate)
}

// Serve installs the prover on cfg.Host.
func Serve(cfg ProverConfig) *Prover {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Scale == 0 {
		cfg.Scale = challenge.DefaultSimScale
	}
	if cfg.PeerGap == 0 {
		cfg.PeerGap = MinPeerGap
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = p2p.StreamTimeout
	}
	if cfg.StrangerShare <= 0 {
		cfg.StrangerShare = DefaultStrangerShare
	}
	if cfg.StrangerWindow <= 0 {
		cfg.StrangerWindow = DefaultStrangerWindow
	}
	if cfg.Priority == nil {
		cfg.Priority = func(peer.ID) bool { return false }
	}
	p := &Prover{cfg: cfg, prover: challenge.NewCheatProver(cfg.Cheat, challenge.CPUOptions{}), last: map[peer.ID]time.Time{},
		strangers: budget{window: cfg.StrangerWindow, share: cfg.StrangerShare}}
	cfg.Host.SetStreamHandler(ChallengeProtocol, func(s network.Stream) {
		if err := p.handle(s); err != nil {
			cfg.Log.Debug("challenge stream", "from", s.Conn().RemotePeer(), "err", err)
			s.Reset()
			return
		}
		s.Close()
	})
	cfg.Host.SetStreamHandler(ChallengeProtocolV1, p.refuseV1)
	return p
}

// refuseV1 answers a version-1 challenge with RetiredRefusal, marked
// busy: a version-1 challenger then neither fails nor takes the prover
// for down, and says why.
func (p *Prover) refuseV1(s network.Stream) {
	_ = s.SetDeadline(time.Now().Add(p.cfg.RequestTimeout))
	var req pb.ChallengeRequest
	if err := p2p.ReadMsg(s, maxRequest, &req); err != nil {
		s.Reset()
		return
	}
	if err := p2p.WriteMsg(s, &pb.Commit{Refused: RetiredRefusal, Busy: true, Code: CodeRetired}); err != nil {
		s.Reset()
		return
	}
	s.Close()
}

// refusal is a busy refusal: its reason and when to try again.
type refusal struct {
	reason     string
	retryAfter time.Duration
}

// admit enforces, in order, one challenge at a time, a gap per
// challenger, and the strangers' share of the prover's time (priority
// challengers are not held to it). The function it returns ends the
// challenge and accounts its time; the duration, for a stranger, is the
// most it may hold the prover (what is left of the strangers' share in
// the window: then it is cancelled), 0 for a priority challenger.
// ProverConfig.Priority, which may read
// a store, is asked only once the cheap checks passed, and outside the
// prover's mutex; they are made again after it, as another challenge may
// have been admitted meanwhile.
func (p *Prover) admit(from peer.ID) (func(), time.Duration, *refusal) {
	p.mu.Lock()
	no := p.cheapChecks(from, p.cfg.Now())
	p.mu.Unlock()
	if no != nil {
		return nil, 0, no
	}
	stranger := !p.cfg.Priority(from)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	if no := p.cheapChecks(from, now); no != nil {
		return nil, 0, no
	}
	var limit time.Duration
	if stranger {
		if wait := p.strangers.wait(now); wait > 0 {
			return nil, 0, &refusal{fmt.Sprintf("challenges by peers it does not trust took their share (%.0f%%) of the last %s", 100*p.cfg.StrangerShare, p.cfg.StrangerWindow), wait}
		}
		limit = max(time.Millisecond, p.strangers.left(now))
	}
	if len(p.last) > 10000 {
		clear(p.last)
	}
	p.busy, p.busySince, p.last[from] = true, now, now
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.busy = false
		end := p.cfg.Now()
		p.strangers.took(p.busySince, end, stranger)
		if p.cfg.held != nil {
			p.cfg.held(p.busySince, end, stranger)
		}
	}, limit, nil
}

// cheapChecks refuses a challenge while another runs, and a challenger
// within its PeerGap. Only the holder of p.mu calls it.
func (p *Prover) cheapChecks(from peer.ID, now time.Time) *refusal {
	if p.busy {
		// The running challenge may take as long as the longest yet.
		left := p.strangers.longest - now.Sub(p.busySince)
		return &refusal{"busy with another challenge", max(time.Second, left)}
	}
	if since := now.Sub(p.last[from]); since < p.cfg.PeerGap {
		return &refusal{fmt.Sprintf("challenged by you less than %s ago", p.cfg.PeerGap), p.cfg.PeerGap - since}
	}
	return nil
}

// realWithoutProver reports whether model's GPUs here are real (any of
// them) and no GPU prover answers for them.
func (p *Prover) realWithoutProver(model string) bool {
	if p.cfg.Devices != nil {
		return false
	}
	for _, g := range p.cfg.GPUs {
		if g.Model == model && !g.Simulated {
			return true
		}
	}
	return false
}

// sizes are what a request implies for the prover: the challenge's sizes
// and whether its GPUs are simulated.
type sizes struct {
	params    challenge.Params
	mem       challenge.MemParams
	simulated bool
	gpus      []GPU // the GPUs the request names, in its order
}

// expect checks a request against the prover's own GPUs and profile and
// returns the sizes it implies.
func (p *Prover) expect(req *pb.ChallengeRequest) (sizes, error) {
	var uuids []string
	simulated := true
	byUUID := map[string]GPU{}
	for _, g := range p.cfg.GPUs {
		if g.Model == req.Model {
			uuids = append(uuids, g.UUID)
			simulated = simulated && g.Simulated
			byUUID[g.UUID] = g
		}
	}
	prof, ok := catalog.Lookup(req.Model)
	switch {
	case len(uuids) == 0 || !ok:
		return sizes{}, fmt.Errorf("no %s GPUs here", req.Model)
	case len(req.GpuUuids) != len(uuids) || !sameSet(req.GpuUuids, uuids):
		return sizes{}, fmt.Errorf("challenge names %d GPUs, not the %d %s here", len(req.GpuUuids), len(uuids), req.Model)
	case len(req.Seeds) != len(uuids):
		return sizes{}, errors.New("one seed per GPU is needed")
	case req.Simulated != simulated || (simulated && int(req.Scale) != p.cfg.Scale):
		return sizes{}, fmt.Errorf("sizes for simulated=%v scale %d; this node runs simulated=%v scale %d", req.Simulated, req.Scale, simulated, p.cfg.Scale)
	}
	params, mem := Sizes(prof, simulated, p.cfg.Scale)
	sz := sizes{params: params, mem: mem, simulated: simulated}
	for _, u := range req.GpuUuids {
		sz.gpus = append(sz.gpus, byUUID[u])
	}
	if int(req.N) != params.N || int(req.T) != params.T || int(req.K) != params.K {
		return sz, fmt.Errorf("sizes n=%d T=%d k=%d, want n=%d T=%d k=%d", req.N, req.T, req.K, params.N, params.T, params.K)
	}
	for _, s := range req.Seeds {
		if len(s) != 32 {
			return sz, errors.New("a seed is not 32 bytes")
		}
	}
	return sz, nil
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// handle serves one challenge: the request and its admission, then the
// phases the challenger drives, commit, sweep, open, and the memory proof.
// The work runs on a context that ends with the stream: a challenger that
// resets or closes it, or whose connection is lost, stops the work.
func (p *Prover) handle(s network.Stream) error {
	// The challenger writes its request at once: a peer that has not
	// done so within RequestTimeout does not hold the stream for a step.
	_ = s.SetDeadline(time.Now().Add(p.cfg.RequestTimeout))
	var req pb.ChallengeRequest
	if err := p2p.ReadMsg(s, maxRequest, &req); err != nil {
		return err
	}
	step(s)
	if p.realWithoutProver(req.Model) {
		return p2p.WriteMsg(s, &pb.Commit{Refused: noProverRefusal(req.Model), Code: CodeNoProver})
	}
	if wait := p.leased(&req); wait > 0 {
		return p2p.WriteMsg(s, &pb.Commit{Refused: fmt.Sprintf("its %s GPUs are leased", req.Model), Busy: true, Code: CodeLeased,
			RetryAfterMs: retryMs(wait)})
	}
	done, limit, no := p.admit(s.Conn().RemotePeer())
	if no != nil {
		return p2p.WriteMsg(s, &pb.Commit{Refused: no.reason, Busy: true, Code: CodeBusy, RetryAfterMs: retryMs(no.retryAfter)})
	}
	var once sync.Once
	release := func() { once.Do(done) }
	defer release()
	if limit > 0 {
		// A stranger holds the prover no longer than the share left for
		// it, however slowly it answers: then its stream is reset, which
		// cancels the work.
		t := time.AfterFunc(limit, func() {
			p.cfg.Log.Debug("challenge: a stranger's challenge ran past the share left for it; reset", "from", s.Conn().RemotePeer(), "limit", limit)
			s.Reset()
		})
		defer t.Stop()
	}
	sz, err := p.expect(&req)
	if err != nil {
		return p2p.WriteMsg(s, &pb.Commit{Refused: err.Error()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), exchangeTimeout(len(req.Seeds), sz.mem))
	defer cancel()
	ws := watch(s, cancel)
	defer ws.stop()
	var prover challenge.Prover = p.prover
	var dev DeviceProver
	if !sz.simulated {
		if dev, err = p.cfg.Devices(sz.gpus); err != nil {
			return p2p.WriteMsg(s, &pb.Commit{Refused: fmt.Sprintf("no GPU prover for the %s GPUs named: %v", req.Model, err), Code: CodeNoProver})
		}
		prover = dev
	}
	gpus := len(req.Seeds)
	if err := p.commit(ctx, ws, prover, req.Seeds, sz.params); err != nil {
		return err
	}
	if err := p.sweep(ctx, ws, prover, gpus, sz.params); err != nil {
		return err
	}
	if err := p.open(ctx, ws, prover, gpus, sz.params); err != nil {
		return err
	}
	return p.memory(ctx, ws, dev, gpus, sz, release)
}

// retryMs is a retry-after on the wire: at least 1 ms.
func retryMs(d time.Duration) uint32 { return uint32(min(max(0, d.Milliseconds())+1, math.MaxUint32)) }

// leased is how long until the real GPUs req names are free of leases
// (ProverConfig.Leased): 0 when none of them is leased, or they are
// simulated.
func (p *Prover) leased(req *pb.ChallengeRequest) time.Duration {
	if p.cfg.Leased == nil {
		return 0
	}
	real := map[string]bool{}
	for _, g := range p.cfg.GPUs {
		if g.Model == req.Model && !g.Simulated {
			real[g.UUID] = true
		}
	}
	var uuids []string
	for _, u := range req.GpuUuids {
		if real[u] {
			uuids = append(uuids, u)
		}
	}
	if len(uuids) == 0 {
		return 0
	}
	return p.cfg.Leased(uuids)
}

// noProverRefusal is the refusal of a challenge of real GPUs without a
// GPU prover.
func noProverRefusal(model string) string {
	return fmt.Sprintf("the real %s GPUs here have none, and renters will not lease them by default", model)
}

// step gives the next step of the exchange its time.
func step(s network.Stream) { _ = s.SetDeadline(time.Now().Add(stepTimeout)) }

// commit computes every GPU's product of its seeded matrices and sends
// their roots.
func (p *Prover) commit(ctx context.Context, s network.Stream, prover challenge.Prover, rawSeeds [][]byte, params challenge.Params) error {
	seeds := make([][32]byte, len(rawSeeds))
	for i, b := range rawSeeds {
		copy(seeds[i][:], b)
	}
	roots, err := prover.Commit(ctx, seeds, params)
	if err != nil {
		return err
	}
	if run := p.commits.Add(1) - 1; p.cfg.commitLate != nil {
		time.Sleep(p.cfg.commitLate(int(run)))
	}
	commit := &pb.Commit{}
	for _, r := range roots {
		commit.Roots = append(commit.Roots, r[:])
	}
	return p2p.WriteMsg(s, commit)
}

// sweep answers the sweep request: each GPU's product times the vector
// its seed draws.
func (p *Prover) sweep(ctx context.Context, s network.Stream, prover challenge.Prover, gpus int, params challenge.Params) error {
	step(s)
	var sw pb.SweepRequest
	if err := p2p.ReadMsg(s, maxSmallMsg, &sw); err != nil {
		return err
	}
	r := challenge.DrawVector(seed32(sw.RSeed), params.N)
	sweeps := &pb.SweepResponse{}
	for g := range gpus {
		v, err := prover.Sweep(ctx, g, r)
		if err != nil {
			return err
		}
		sweeps.Gpus = append(sweeps.Gpus, &pb.SweepValues{S: v})
	}
	return p2p.WriteMsg(s, sweeps)
}

// open answers the open request: each GPU's rows that its seed draws, with
// their Merkle proofs.
func (p *Prover) open(ctx context.Context, s network.Stream, prover challenge.Prover, gpus int, params challenge.Params) error {
	step(s)
	var or pb.OpenRequest
	if err := p2p.ReadMsg(s, maxSmallMsg, &or); err != nil {
		return err
	}
	opens := &pb.OpenResponse{}
	for g := range gpus {
		rows, err := challenge.DrawRows(RowSeed(seed32(or.RowsSeed), g), params.N, params.K)
		if err != nil {
			return err
		}
		os, err := prover.Open(ctx, g, rows)
		if err != nil {
			return err
		}
		opens.Gpus = append(opens.Gpus, encodeOpenings(os))
	}
	return p2p.WriteMsg(s, opens)
}

// memory serves the memory proof: fill each GPU's memory from the seed,
// say so, then answer the walk from sigma0, commitments first (they stop
// the challenger's clock), the digests after. A challenger whose clock
// ran past its deadline may ask again with a fresh sigma0, up to
// MemAttempts requests in all; the challenge is over when it closes the
// stream, or sends nothing within memRetryWait. dev fills real GPUs'
// memory (nil for simulated ones). release lets the next challenge start
// once this one is over.
func (p *Prover) memory(ctx context.Context, s network.Stream, dev DeviceProver, gpus int, sz sizes, release func()) error {
	// Reading MemPrepare, filling and writing MemReady: the fill's time.
	_ = s.SetDeadline(time.Now().Add(prepareTimeout(gpus, sz.mem)))
	var prep pb.MemPrepare
	if err := p2p.ReadMsg(s, maxSmallMsg, &prep); err != nil {
		return err
	}
	mems := make([]*challenge.MemProver, gpus)
	defer func() {
		for _, m := range mems {
			if m != nil {
				m.Close()
			}
		}
	}()
	errs := make([]error, gpus)
	fill := func(g int) { mems[g], errs[g] = p.memProver(ctx, dev, g, MemSeed(seed32(prep.Seed), g), sz) }
	if sz.simulated {
		// They share the CPU, as the challenger's own copy does.
		for g := range gpus {
			if fill(g); errs[g] != nil {
				break
			}
		}
	} else {
		// Each on its own device, at once.
		var wg sync.WaitGroup
		for g := range gpus {
			wg.Go(func() { fill(g) })
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrDeviceMemory) {
			// The memory is taken (a renter's job): that judges nothing.
			return p2p.WriteMsg(s, &pb.MemReady{Refused: err.Error(), Busy: true, Code: CodeNoMemory, RetryAfterMs: retryMs(NoMemoryRetry)})
		}
		return p2p.WriteMsg(s, &pb.MemReady{Refused: err.Error()})
	}
	if err := p2p.WriteMsg(s, &pb.MemReady{}); err != nil {
		return err
	}
	defer release()
	for attempt := range MemAttempts {
		if attempt == 0 {
			step(s)
		} else {
			_ = s.SetDeadline(time.Now().Add(memRetryWait))
		}
		var mr pb.MemRequest
		if err := p2p.ReadMsg(s, maxSmallMsg, &mr); err != nil {
			if attempt > 0 {
				return nil // the challenger is satisfied, or gave up
			}
			return err
		}
		step(s)
		memResp, memDone, err := answerMem(ctx, mems, seed32(mr.Sigma0), !sz.simulated)
		if err != nil {
			return err
		}
		if p.cfg.memLate != nil {
			time.Sleep(p.cfg.memLate(attempt))
		}
		if err := p2p.WriteMsg(s, memDone); err != nil {
			return err
		}
		if err := p2p.WriteMsg(s, memResp); err != nil {
			return err
		}
	}
	return nil
}

// memProver fills GPU g's memory for seed: in host memory for simulated
// GPUs, on dev's device for real ones.
func (p *Prover) memProver(ctx context.Context, dev DeviceProver, g int, seed [32]byte, sz sizes) (*challenge.MemProver, error) {
	if sz.simulated {
		return challenge.NewMemProver(ctx, seed, sz.mem, p.cfg.Cheat.MemKept())
	}
	b, err := dev.Memory(ctx, g, seed, sz.mem)
	if err != nil {
		return nil, err
	}
	m, err := challenge.NewMemProverOn(b, sz.mem)
	if err != nil {
		b.Close()
		return nil, err
	}
	return m, nil
}

// answerMem walks every GPU's memory from sigma0 and returns the digests
// and the commitments to them: at once when the GPUs are real (each on
// its own device, and the deadline is one GPU's), in turn when they are
// simulated (they share the CPU, and the challenger times the same).
func answerMem(ctx context.Context, mems []*challenge.MemProver, sigma0 [32]byte, atOnce bool) (*pb.MemResponse, *pb.MemDone, error) {
	resps := make([]challenge.MemResponse, len(mems))
	errs := make([]error, len(mems))
	var wg sync.WaitGroup
	for g, m := range mems {
		if !atOnce {
			resps[g], errs[g] = m.Respond(ctx, sigma0)
			continue
		}
		wg.Go(func() { resps[g], errs[g] = m.Respond(ctx, sigma0) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	memResp, memDone := &pb.MemResponse{}, &pb.MemDone{}
	for _, resp := range resps {
		d := encodeMem(resp)
		memResp.Gpus = append(memResp.Gpus, d)
		c := memCommitment(d)
		memDone.Commitments = append(memDone.Commitments, c[:])
	}
	return memResp, memDone, nil
}

// RowSeed is the seed of GPU g's rows: SHA-256(rows_seed || g as uint32 BE).
func RowSeed(seed [32]byte, g int) [32]byte { return subSeed(seed, g) }

// MemSeed is the seed of GPU g's memory buffers, likewise.
func MemSeed(seed [32]byte, g int) [32]byte { return subSeed(seed, g) }

func subSeed(seed [32]byte, g int) [32]byte {
	return sha256.Sum256(binary.BigEndian.AppendUint32(seed[:], uint32(g)))
}

func seed32(b []byte) [32]byte {
	var s [32]byte
	copy(s[:], b)
	return s
}

func encodeOpenings(os []challenge.Opening) *pb.GPUOpenings {
	out := &pb.GPUOpenings{}
	for _, o := range os {
		ro := &pb.RowOpening{Index: uint32(o.Index), Row: o.Row}
		for _, h := range o.Proof {
			ro.Proof = append(ro.Proof, h[:])
		}
		out.Rows = append(out.Rows, ro)
	}
	return out
}

func decodeOpenings(g *pb.GPUOpenings) ([]challenge.Opening, error) {
	var out []challenge.Opening
	for _, ro := range g.GetRows() {
		o := challenge.Opening{Index: int(ro.Index), Row: ro.Row}
		if len(ro.Proof) > challenge.MaxProofLen {
			return nil, fmt.Errorf("proof of %d hashes: %w", len(ro.Proof), challenge.ErrMalformed)
		}
		for _, h := range ro.Proof {
			if len(h) != 32 {
				return nil, fmt.Errorf("proof hash of %d bytes: %w", len(h), challenge.ErrMalformed)
			}
			o.Proof = append(o.Proof, seed32(h))
		}
		out = append(out, o)
	}
	return out, nil
}

func encodeMem(r challenge.MemResponse) *pb.MemDigests {
	out := &pb.MemDigests{}
	for _, d := range r.Digests {
		out.Rounds = append(out.Rounds, &pb.RoundDigests{Digests: d})
	}
	return out
}

// memCommitment is SHA-256 over a GPU's digests, little-endian, in order.
func memCommitment(m *pb.MemDigests) [32]byte {
	h := sha256.New()
	var b [8]byte
	for _, r := range m.GetRounds() {
		for _, d := range r.Digests {
			binary.LittleEndian.PutUint64(b[:], d)
			h.Write(b[:])
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func decodeMem(m *pb.MemDigests) challenge.MemResponse {
	var r challenge.MemResponse
	for _, d := range m.GetRounds() {
		r.Digests = append(r.Digests, d.Digests)
	}
	return r
}
