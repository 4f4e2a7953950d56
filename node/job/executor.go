package job

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/cluster"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/shell"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

var ksRuns = store.MustKeyspace("job-runs") // lease ID -> runRecord (JSON)

// runRecord is the supplier's durable note of an attempt, so that a
// restarted node can kill what is left of it and say what became of it.
type runRecord struct {
	LeaseID  string    `json:"lease_id"`
	JobID    string    `json:"job_id"`
	Renter   string    `json:"renter"`
	Attempt  uint32    `json:"attempt"`
	State    State     `json:"state"`
	Pid      int       `json:"pid"`
	Dir      string    `json:"dir"`
	ExitCode int       `json:"exit_code"`
	Started  time.Time `json:"started"`
	Updated  time.Time `json:"updated"`
}

// ExecutorConfig configures an Executor. Fields without a default note are
// required.
type ExecutorConfig struct {
	// Host serves the job protocols.
	Host Listener
	Key  crypto.PrivKey
	// Self is this supplier's peer ID (default: Key's).
	Self   peer.ID
	Store  store.Store
	Ledger *settle.Ledger
	// Runtimes by name; "process" must be there.
	Runtimes map[string]runtime.Runtime
	// DataDir is the node's data dir: attempts run under DataDir/jobs.
	DataDir string
	// Hide lists paths jobs must not read (the node's key, token, store).
	Hide []string
	// RunAs is the user jobs run as ("": the node's own).
	RunAs string
	// Limits are the supplier's per-job defaults and maxima (zero: none).
	Limits Limits
	// GPUDevices gives the device nodes of a lease's GPUs, by UUID, which
	// the runtime confines the job to (runtime.Spec.GPUDevices): see
	// DeviceNodes. An error fails the start. nil: no GPU has a node (a
	// supplier of simulated GPUs).
	GPUDevices func(uuids []string) ([]string, error)
	// Usage samples the leased GPUs' utilisation and memory in use for
	// the receipts (inventory.NewUsageReader: NVML on real GPUs); nil, or
	// one that fails with inventory.ErrNotMeasured, makes the receipts
	// say "not measured". UsageEvery is how often it is sampled between
	// receipts (default UsageEvery); each receipt also takes one sample.
	Usage      inventory.UsageReader
	UsageEvery time.Duration
	// Leases are the supplier's leases that jobs run on
	// (market.Supplier.Leases).
	Leases Leases
	// Chain, if not nil, settles leases on chain with renters that can
	// pay there (docs/PROTOCOL.md §43.6).
	Chain *SupplierChain
	// Cluster makes cluster jobs members of their cluster's network
	// (node/cluster); nil: cluster jobs are refused.
	Cluster ClusterJoiner
	// HeaderTimeout and BodyTimeout bound the reads of a session's Hello
	// and of a start's spec and checkpoint (defaults HeaderTimeout,
	// BodyTimeout).
	HeaderTimeout, BodyTimeout time.Duration
	// MaxPendingPerPeer and MaxPending cap the session streams waiting
	// for their Hello to be admitted (defaults MaxPendingPerPeer,
	// MaxPending).
	MaxPendingPerPeer, MaxPending int
	// HaltGrace is how long a job stays paused for payment before it is
	// stopped (default 2 min).
	HaltGrace time.Duration
	// StopGrace is how long a stopped job has between SIGTERM and SIGKILL
	// (default 5 s).
	StopGrace time.Duration
	// Clock runs the meter's timers: receipt intervals and the lease's
	// end (clock.Real() when nil).
	Clock clock.Clock
	// Now is the time for records (Clock.Now when nil).
	Now func() time.Time
	Log *slog.Logger
}

// Leases is the owner of a supplier's leases, as the executor uses it:
// *market.LeaseBook.
type Leases interface {
	// Lease gives a lease confirmed by this supplier, by ID, or says why
	// there is none.
	Lease(id market.ID) (*market.Lease, error)
	// Claim tells the market that a job starts on a lease, so that it is
	// not released as unclaimed; it fails for a lease released already.
	// The function it returns undoes the claim, for a job that then
	// failed to start.
	Claim(id market.ID) (undo func(), err error)
	// Release gives a lease's GPUs back once its job is over; it fails,
	// wrapping market.ErrNoReservation, when they are free already.
	Release(id market.ID) error
}

// Executor is the supplier side of jobs: it serves SessionProtocol and
// CheckpointProtocol, runs attempts and meters them.
type Executor struct {
	cfg   ExecutorConfig
	log   *slog.Logger
	chain *supplierChain // nil: settles off chain only

	gate *gate // session streams not yet admitted

	mu       sync.Mutex
	runs     map[market.ID]*run
	starting map[market.ID]bool // leases whose start is reading its body
	closed   bool
	quit     chan struct{} // closed by Close: ends the waits of shells' watchers
	wg       sync.WaitGroup
}

// NewExecutor installs the job protocols. Attempts a previous run of the
// node left behind are killed and closed with a final receipt.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Key != nil && cfg.Self == "" {
		id, err := peer.IDFromPrivateKey(cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("executor: %w", err)
		}
		cfg.Self = id
	}
	if cfg.HaltGrace == 0 {
		cfg.HaltGrace = 2 * time.Minute
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 5 * time.Second
	}
	cfg.HeaderTimeout = cmp.Or(cfg.HeaderTimeout, HeaderTimeout)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, BodyTimeout)
	cfg.MaxPendingPerPeer = cmp.Or(cfg.MaxPendingPerPeer, MaxPendingPerPeer)
	cfg.MaxPending = cmp.Or(cfg.MaxPending, MaxPending)
	if cfg.Runtimes["process"] == nil {
		return nil, errors.New("executor: no process runtime")
	}
	chain, err := newSupplierChain(cfg.Chain, cfg.Self)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if cfg.Leases == nil {
		return nil, errors.New("executor: no leases")
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	e := &Executor{
		cfg: cfg, chain: chain, log: cfg.Log.With("sub", "jobs"), gate: newGate(cfg.MaxPendingPerPeer, cfg.MaxPending),
		runs: map[market.ID]*run{}, starting: map[market.ID]bool{}, quit: make(chan struct{}),
	}
	if err := e.recover(); err != nil {
		return nil, err
	}
	cfg.Host.SetStreamHandler(SessionProtocol, e.handleSession)
	p2p.Serve(cfg.Host, CheckpointProtocol, e.handleCheckpoint)
	return e, nil
}

// Close stops every running attempt (the lease's renter fails over) and
// waits for their final receipts.
func (e *Executor) Close() error {
	e.cfg.Host.RemoveStreamHandler(SessionProtocol)
	e.cfg.Host.RemoveStreamHandler(CheckpointProtocol)
	e.mu.Lock()
	if !e.closed {
		close(e.quit)
	}
	e.closed = true
	runs := make([]*run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	for _, r := range runs {
		r.stop(StateInterrupted, "the supplier node is shutting down")
	}
	e.wg.Wait()
	for _, r := range runs {
		r.log.Close()
	}
	return nil
}

// recover closes attempts that were running when the node last stopped:
// their processes died with it (or are killed now), and the interval since
// their last receipt is not billed.
func (e *Executor) recover() error {
	codec := store.JSONCodec[runRecord]{}
	var stale []runRecord
	err := e.cfg.Store.Iterate(ksRuns, nil, func(_, v []byte) error {
		rec, err := codec.Unmarshal(v)
		if err == nil && !Ended(rec.State) {
			stale = append(stale, rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("executor: read runs: %w", err)
	}
	for _, rec := range stale {
		if rec.Pid > 0 {
			if err := runtime.KillGroup(rec.Pid); err != nil {
				e.log.Warn("kill leftover job", "pid", rec.Pid, "err", err)
			}
		}
		id, err := market.ParseID(rec.LeaseID)
		if err != nil {
			continue
		}
		rec.State, rec.Updated = StateInterrupted, e.cfg.Now().UTC()
		if err := e.saveRecord(id, rec); err != nil {
			return err
		}
		l, err := e.cfg.Leases.Lease(id)
		if err != nil {
			continue
		}
		jobID, _ := hex.DecodeString(rec.JobID)
		m, err := settle.NewMeter(e.cfg.Ledger, e.cfg.Key, settle.TermsOf(l, jobID))
		if err != nil {
			continue
		}
		now := e.cfg.Now()
		if _, err := m.Issue(rec.Attempt, now, now, 0, settle.Usage{}, nil, true, StateInterrupted.String()); err != nil {
			e.log.Warn("final receipt of interrupted job", "lease", id.Short(), "err", err)
		}
		e.release(id)
		e.log.Info("job interrupted by a restart of this node", "lease", id.Short(), "attempt", rec.Attempt)
	}
	return nil
}

func (e *Executor) saveRecord(id market.ID, rec runRecord) error {
	b, err := store.JSONCodec[runRecord]{}.Marshal(rec)
	if err != nil {
		return err
	}
	if err := e.cfg.Store.Put(ksRuns, id[:], b); err != nil {
		return fmt.Errorf("keep job run %s: %w", id.Short(), err)
	}
	return nil
}

// Running is the number of attempts running now.
func (e *Executor) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range e.runs {
		if !Ended(r.State()) {
			n++
		}
	}
	return n
}

// handleSession serves one renter's session stream. Nothing large is read
// from a peer before its Hello is admitted: the Hello is small and must
// come within the header timeout, a peer may have only a few streams
// waiting for that, and only a start its lease admits is asked for its
// spec and checkpoint, in memory reserved with libp2p's resource manager.
func (e *Executor) handleSession(st network.Stream) {
	from := st.Conn().RemotePeer()
	leave, ok := e.gate.enter(from)
	if !ok {
		e.log.Debug("job session refused: too many waiting", "peer", from)
		e.refuse(st, busy("too many sessions are waiting to be admitted"))
		return
	}
	defer leave()
	_ = st.SetReadDeadline(time.Now().Add(e.cfg.HeaderTimeout))
	var h pb.Hello
	if err := p2p.ReadMsg(st, MaxHelloSize, &h); err != nil {
		e.log.Debug("job session: bad hello", "peer", from, "err", err)
		st.Reset()
		return
	}
	var r *run
	var no *pb.Welcome
	if len(h.Lease) == 0 {
		r, no = e.attachTo(from, &h)
	} else {
		var err error
		if r, no, err = e.begin(st, &h, leave); err != nil {
			e.log.Debug("job session: start", "peer", from, "err", err)
			st.Reset()
			return
		}
	}
	leave()
	if no != nil {
		e.log.Info("job session refused", "peer", from, "reason", no.Refused)
		e.refuse(st, no)
		return
	}
	w := &pb.Welcome{State: r.State().String(), Attempt: r.attempt}
	if e.chain != nil {
		w.ChainKey = e.chain.own.Raw
		if ck, err := e.chain.renterKey(from, h.ChainKey); err == nil {
			r.useChain(ck.Address)
		} else if len(h.ChainKey) > 0 {
			e.log.Warn("renter's ChainKey refused; its vouchers count off chain only if the lease is not chain-settled", "peer", from, "err", err)
		}
	}
	_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	if err := p2p.WriteMsg(st, w); err != nil {
		st.Reset()
		return
	}
	if h.Fence != "" {
		r.stop(StateFenced, h.Fence)
	}
	r.attach(st, h.LogOffset)
}

// refuse writes a refusing Welcome, the session's last frame.
func (e *Executor) refuse(st network.Stream, w *pb.Welcome) {
	_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	_ = p2p.WriteMsg(st, w)
	st.Close()
}

// attachTo checks an attach Hello and finds the attempt it names.
func (e *Executor) attachTo(from peer.ID, h *pb.Hello) (*run, *pb.Welcome) {
	id, err := market.ParseID(hex.EncodeToString(h.LeaseId))
	if err != nil {
		return nil, refused("attach: bad lease_id")
	}
	e.mu.Lock()
	r := e.runs[id]
	e.mu.Unlock()
	switch {
	case r == nil:
		return nil, refused("attach: no job runs on lease %s here", id.Short())
	case r.lease.Renter != from:
		return nil, refused("attach: lease belongs to another renter")
	case r.attempt != h.Attempt:
		return nil, refused("attach: attempt %d runs on this lease, not %d", r.attempt, h.Attempt)
	}
	return r, nil
}

// begin admits a start Hello on what it says (the lease, its renter, the
// attempt, the sizes it announces), calls admitted, reserves memory for
// the spec and checkpoint, asks for them, reads them and starts the
// attempt. It returns the attempt or the Welcome that refuses it; an
// error means the stream failed.
func (e *Executor) begin(st network.Stream, h *pb.Hello, admitted func()) (*run, *pb.Welcome, error) {
	l, old, no := e.admitStart(st.Conn().RemotePeer(), h)
	switch {
	case no != nil:
		return nil, no, nil
	case old != nil:
		return old, nil, nil // a repeated start attaches: no body needed
	}
	defer e.endStart(l.ID)
	if no := e.chain.admit(context.Background(), l.Renter, h); no != nil {
		return nil, no, nil
	}
	admitted()
	// The body is held whole (the spec is decoded and the archive served
	// again later): account it where the node's limits apply, at a
	// priority that leaves room for libp2p's own buffers.
	size := int(h.SpecSize) + int(h.CheckpointSize)
	if err := st.Scope().ReserveMemory(size, network.ReservationPriorityHigh); err != nil {
		e.log.Info("job start deferred: no memory for it", "lease", l.ID.Short(), "bytes", size, "err", err)
		return nil, busy("no memory for a start of %d bytes now", size), nil
	}
	defer st.Scope().ReleaseMemory(size)
	_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	if err := p2p.WriteMsg(st, &pb.Welcome{SendBody: true}); err != nil {
		return nil, nil, fmt.Errorf("ask for the body: %w", err)
	}
	_ = st.SetReadDeadline(time.Now().Add(e.cfg.BodyTimeout))
	spec, checkpoint, err := readBody(st, h)
	switch {
	case errors.Is(err, errCheckpointHash):
		return nil, refused("%v", err), nil
	case err != nil:
		return nil, nil, err
	}
	r, no := e.welcome(l, h, spec, checkpoint)
	return r, no, nil
}

// admitStart checks a start Hello before its body is read: the lease
// (S1–S5 of docs/PROTOCOL.md §29.3), the sizes it announces, the
// attempts held on the lease (S12, S13). It marks the lease as starting,
// so that a second start of it waits; old is the attempt a repeated start
// attaches to.
func (e *Executor) admitStart(from peer.ID, h *pb.Hello) (l *market.Lease, old *run, no *pb.Welcome) {
	now := e.cfg.Now()
	sent, err := market.OpenLease(h.Lease, now)
	if err != nil {
		return nil, nil, refused("invalid lease: %v", err)
	}
	l, err = e.cfg.Leases.Lease(sent.ID)
	switch {
	case err != nil:
		return nil, nil, refused("lease %s is not one this supplier confirmed: %v", sent.ID.Short(), err)
	case l.Renter != from:
		return nil, nil, refused("the lease belongs to another renter")
	case !now.Before(l.End()):
		return nil, nil, refused("lease %s ended at %s", l.ID.Short(), l.End().UTC().Format(time.RFC3339))
	case h.Attempt == 0:
		return nil, nil, refused("attempt must be 1 or more")
	}
	if why := checkStartSizes(h); why != "" {
		return nil, nil, refused("%s", why)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old, why := e.heldLocked(l.ID, h.Attempt)
	switch {
	case why != "":
		return nil, nil, refused("%s", why)
	case old != nil:
		return l, old, nil
	case e.starting[l.ID]:
		return nil, nil, busy("a start on lease %s is under way", l.ID.Short())
	}
	e.starting[l.ID] = true
	return l, nil, nil
}

func (e *Executor) endStart(id market.ID) {
	e.mu.Lock()
	delete(e.starting, id)
	e.mu.Unlock()
}

// heldLocked applies S12 and S13 to a start of attempt on lease id: the
// attempt it attaches to, or why it is refused. e.mu is held.
func (e *Executor) heldLocked(id market.ID, attempt uint32) (*run, string) {
	if e.closed {
		return nil, "the supplier is shutting down"
	}
	old := e.runs[id]
	switch {
	case old == nil:
		return nil, ""
	case attempt == old.attempt:
		return old, "" // a repeated start: attach to it
	case attempt < old.attempt:
		return nil, fmt.Sprintf("attempt %d is stale: attempt %d ran on this lease", attempt, old.attempt)
	case len(old.terms.JobSpecHash) == 0 && !Ended(old.State()):
		return nil, fmt.Sprintf("attempt %d runs on this lease; a lease takes one job at a time", old.attempt)
	case len(old.terms.JobSpecHash) == 0:
		return nil, "" // a lease that binds no job spec takes jobs one after another
	default:
		return nil, fmt.Sprintf("attempt %d ran on this lease; every attempt needs a lease of its own", old.attempt)
	}
}

// welcome checks an admitted start's spec against its lease and starts
// the attempt (S6–S14).
func (e *Executor) welcome(l *market.Lease, h *pb.Hello, rawSpec, checkpoint []byte) (*run, *pb.Welcome) {
	spec, err := DecodeSpec(rawSpec)
	if err != nil {
		return nil, refused("%v", err)
	}
	terms := l.Terms()
	switch {
	case len(terms.JobSpecHash) == 32 && [32]byte(terms.JobSpecHash) != spec.Hash:
		// A lease that binds no spec (rented with no job, `gpumesh
		// rent`) runs any job of its renter, who sent it (admitStart).
		return nil, refused("the job spec does not match the lease's job_spec_hash")
	case spec.Gpus != l.Count:
		return nil, refused("the spec asks for %d GPUs, the lease has %d", spec.Gpus, l.Count)
	case e.cfg.Runtimes[runtimeName(spec)] == nil:
		return nil, refused("runtime %s is not available on this supplier", runtimeName(spec))
	}
	// A service's ports are reached inside a network of the job's own;
	// without one, its server would listen on the supplier's network.
	if len(spec.Ports) > 0 {
		if err := runtime.NetworkIsolation(e.cfg.Runtimes[runtimeName(spec)]); err != nil {
			return nil, refused("the job serves ports, and this supplier cannot give it a network of its own: %v", err)
		}
	}
	var cp [32]byte
	if len(checkpoint) > 0 {
		cp = [32]byte(h.CheckpointHash)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, why := e.heldLocked(l.ID, h.Attempt); why != "" || old != nil {
		if why != "" {
			return nil, refused("%s", why)
		}
		return old, nil
	}
	undo, err := e.cfg.Leases.Claim(l.ID)
	if err != nil {
		return nil, refused("%v", err)
	}
	r, err := e.start(l, spec, h, checkpoint, cp)
	if err != nil {
		undo()
		e.log.Warn("job start failed", "lease", l.ID.Short(), "err", err)
		return nil, refused("start: %v", err)
	}
	e.runs[l.ID] = r
	return r, nil
}

// release gives the GPUs of lease id back: its one attempt is over.
func (e *Executor) release(id market.ID) {
	if err := e.cfg.Leases.Release(id); err != nil && !errors.Is(err, market.ErrNoReservation) {
		e.log.Warn("free the GPUs of a lease whose job ended", "lease", id.Short(), "err", err)
	}
}

func runtimeName(s *Spec) string {
	if s.Runtime == "" {
		return "process"
	}
	return s.Runtime
}

// start prepares the attempt's folders and starts its process.
func (e *Executor) start(l *market.Lease, spec *Spec, h *pb.Hello, checkpoint []byte, cpHash [32]byte) (*run, error) {
	attempt := h.Attempt
	limits, disk, err := e.cfg.Limits.resolve(spec.Limits)
	if err != nil {
		return nil, err
	}
	// A cluster member joins its cluster's network before its process
	// exists, so that the other members' connections find it as soon as
	// it listens; it leaves when the attempt ends (finish) or its start
	// fails here.
	var (
		member *cluster.Membership
		cnet   *runtime.ClusterNet
		cenv   []string
	)
	if spec.Cluster != nil {
		mb, m, err := e.joinCluster(l, spec, h.Cluster)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		member, cnet, cenv = mb, clusterNet(m, mb.Connect), clusterEnvOf(m, spec.Cluster)
		defer func() {
			if member != nil {
				member.Leave()
			}
		}()
	}
	var devices []string
	if e.cfg.GPUDevices != nil {
		if devices, err = e.cfg.GPUDevices(l.GpuUuids); err != nil {
			return nil, fmt.Errorf("lease %s: %w", l.ID.Short(), err)
		}
	}
	// The folder is named by the lease, which this supplier confirmed to
	// this renter, not by the job ID, which any renter can pick: a renter
	// must not be able to empty or share another renter's attempt.
	dir := filepath.Join(e.cfg.DataDir, "jobs", l.ID.String(), fmt.Sprint(attempt))
	cpRel := "checkpoint"
	if spec.CheckpointDir != "" {
		cpRel = "work/" + spec.CheckpointDir
	}
	cp, err := prepareAttempt(dir, cpRel, spec, checkpoint, cpHash)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			cp.Close()
		}
	}()
	work, cpDir := filepath.Join(dir, "work"), filepath.Join(dir, filepath.FromSlash(cpRel))
	lf, err := openLog(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	meter, err := settle.NewMeter(e.cfg.Ledger, e.cfg.Key, settle.TermsOf(l, spec.JobId))
	if err != nil {
		lf.Close()
		return nil, err
	}
	r := &run{
		e: e, lease: l, terms: l.Terms(), spec: spec, attempt: attempt, dir: dir, cp: cp,
		log: lf, meter: meter, state: StateStarting, paid: make(chan struct{}, 1), done: make(chan struct{}), cut: make(chan struct{}),
		logger: e.log.With("lease", l.ID.Short(), "job", spec.ID()[:8], "attempt", attempt),
		disk:   disk,
	}
	if len(checkpoint) > 0 {
		r.cpArchive, r.cpHash = checkpoint, cpHash
		if entries, err := listCheckpoint(cp); err == nil {
			r.cpFinger = fingerprint(entries)
		}
	}
	hide := append([]string{filepath.Join(e.cfg.DataDir, "jobs")}, e.cfg.Hide...)
	rs := runtime.Spec{
		JobID: spec.ID(), Attempt: int(attempt), Lease: l.ID.String(), Argv: spec.Argv, Env: append(envList(spec.Env), cenv...),
		WorkDir: work, CheckpointDir: cpDir, OutputDir: filepath.Join(work, outputRel), GPUs: l.GpuUuids, GPUDevices: devices, Limits: limits,
		RunAs: e.cfg.RunAs, Hide: hide, Image: spec.Image, Stdout: lf, Stderr: lf, Cluster: cnet,
	}
	if in := spec.Stdin; in != nil {
		// A shell's job: its output goes to the log as any job's, and to
		// the renter's shell stream once that attaches.
		r.stdio = shell.NewStdio(in.Tty)
		rs.Stdin = r.stdio.Stdin()
		rs.Stdout, rs.Stderr = io.MultiWriter(lf, r.stdio.Stdout()), io.MultiWriter(lf, r.stdio.Stderr())
		if in.Tty { // one writer: the terminal's output
			rs.Stderr = rs.Stdout
			rs.TTY = &runtime.WinSize{Rows: uint16(in.Rows), Cols: uint16(in.Cols)}
		}
	}
	rec := runRecord{
		LeaseID: l.ID.String(), JobID: spec.ID(), Renter: l.Renter.String(), Attempt: attempt,
		State: StateStarting, Dir: dir, Started: e.cfg.Now().UTC(), Updated: e.cfg.Now().UTC(),
	}
	// Keep the record before the process exists, so a crash right after
	// the start still finds (and kills) it.
	if err := e.saveRecord(l.ID, rec); err != nil {
		lf.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proc, err := e.cfg.Runtimes[runtimeName(spec)].Start(ctx, rs)
	if err != nil {
		rec.State, rec.Updated = StateFailed, e.cfg.Now().UTC()
		_ = e.saveRecord(l.ID, rec)
		lf.Close()
		return nil, err
	}
	r.proc, r.started = proc, e.cfg.Now()
	if member != nil {
		if cd, ok := proc.(runtime.ClusterDialer); ok {
			member.Attach(RetryRefused(cd.DialCluster), r.pausedCode)
		}
		r.member, member = member, nil // finish leaves it
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r.reportLinks()
		}()
	}
	rec.Pid, rec.State, rec.Updated = proc.Pid(), StateRunning, e.cfg.Now().UTC()
	if err := e.saveRecord(l.ID, rec); err != nil {
		r.logger.Warn("keep pid", "err", err)
	}
	r.rec = rec
	r.setState(StateRunning, 0, "")
	r.logger.Info("job started", "pid", proc.Pid(), "argv0", spec.Argv[0], "gpus", len(l.GpuUuids))
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		r.meterLoop()
	}()
	if r.stdio != nil {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r.watchShell()
		}()
	}
	if disk > 0 {
		dirs := []string{work}
		if !strings.HasPrefix(cpDir, work+string(filepath.Separator)) {
			dirs = append(dirs, cpDir)
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r.watchDisk(disk, dirs)
		}()
	}
	started = true
	return r, nil
}

// prepareAttempt makes the attempt's folder afresh (work/, the checkpoint
// folder, the input files, the checkpoint it resumes from) and returns the
// checkpoint folder, held open: the node reads checkpoints through that
// descriptor only, never by a path the job could redirect (checkpoint.go).
// Nothing of the job runs yet, but every path below dir is still made one
// component at a time without following symlinks (beneath.go).
func prepareAttempt(dir, cpRel string, spec *Spec, checkpoint []byte, cpHash [32]byte) (*os.File, error) {
	// RemoveAll removes with unlinkat below an open parent and never
	// follows a symlink (Go 1.26 os/removeall_at.go).
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("empty attempt folder: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("attempt folder: %w", err)
	}
	root, err := openDirNoFollow(dir)
	if err != nil {
		return nil, fmt.Errorf("attempt folder: %w", err)
	}
	defer root.Close()
	work, err := mkdirAllBeneath(root, "work", 0o750)
	if err != nil {
		return nil, fmt.Errorf("working folder: %w", err)
	}
	defer work.Close()
	out, err := mkdirAllBeneath(work, outputRel, 0o750)
	if err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	out.Close()
	cp, err := mkdirAllBeneath(root, cpRel, 0o750)
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	if err := writeInputs(work, spec.Files); err != nil {
		cp.Close()
		return nil, err
	}
	if len(checkpoint) > 0 {
		err := checkArchive(checkpoint, cpHash)
		if err == nil {
			err = unpackCheckpoint(checkpoint, cp)
		}
		if err != nil {
			cp.Close()
			return nil, err
		}
	}
	return cp, nil
}

// writeInputs writes the spec's input files below work.
func writeInputs(work *os.File, files []*pb.File) error {
	for _, f := range files {
		mode := f.Mode & 0o777
		if mode == 0 {
			mode = 0o644
		}
		if err := writeBeneath(work, f.Path, f.Data, mode, 0o750); err != nil {
			return fmt.Errorf("input file %s: %w", f.Path, err)
		}
	}
	return nil
}

func envList(vars []*pb.EnvVar) []string {
	out := make([]string, len(vars))
	for i, v := range vars {
		out[i] = v.Name + "=" + v.Value
	}
	return out
}

// handleCheckpoint serves the archive of an attempt's checkpoint folder as
// of its last receipt.
func (e *Executor) handleCheckpoint(st network.Stream) error {
	var req pb.CheckpointRequest
	if err := p2p.ReadMsg(st, 1024, &req); err != nil {
		return err
	}
	id, err := market.ParseID(hex.EncodeToString(req.LeaseId))
	if err != nil {
		return p2p.WriteMsg(st, &pb.CheckpointHeader{Refused: "bad lease_id"})
	}
	e.mu.Lock()
	r := e.runs[id]
	e.mu.Unlock()
	switch {
	case r == nil || r.lease.Renter != st.Conn().RemotePeer():
		return p2p.WriteMsg(st, &pb.CheckpointHeader{Refused: "no job of yours on that lease"})
	case r.attempt != req.Attempt:
		return p2p.WriteMsg(st, &pb.CheckpointHeader{Refused: fmt.Sprintf("attempt %d runs here, not %d", r.attempt, req.Attempt)})
	}
	archive, hash := r.checkpoint()
	if req.Outputs {
		if archive, hash = r.outputs(); len(archive) == 0 {
			return p2p.WriteMsg(st, &pb.CheckpointHeader{Refused: "no outputs"})
		}
		req.Have = nil
	}
	if len(archive) == 0 {
		return p2p.WriteMsg(st, &pb.CheckpointHeader{Refused: "no checkpoint yet"})
	}
	if string(req.Have) == string(hash[:]) {
		return p2p.WriteMsg(st, &pb.CheckpointHeader{Unchanged: true, Hash: hash[:]})
	}
	_ = st.SetWriteDeadline(time.Now().Add(time.Minute))
	if err := p2p.WriteMsg(st, &pb.CheckpointHeader{Hash: hash[:], Size: uint64(len(archive))}); err != nil {
		return err
	}
	return p2p.WriteRaw(st, archive)
}

// RunView is an attempt running (or run) on this supplier.
type RunView struct {
	LeaseID    string       `json:"lease_id"`
	JobID      string       `json:"job_id"`
	Renter     string       `json:"renter"`
	Attempt    uint32       `json:"attempt"`
	State      State        `json:"state"`
	OwedMicros money.Micros `json:"owed_micros"`
}

// Runs lists the attempts this executor holds.
func (e *Executor) Runs() []RunView {
	e.mu.Lock()
	runs := make([]*run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	out := make([]RunView, 0, len(runs))
	for _, r := range runs {
		out = append(out, RunView{LeaseID: r.lease.ID.String(), JobID: r.spec.ID(), Renter: r.lease.Renter.String(), Attempt: r.attempt, State: r.State(), OwedMicros: money.Micros(r.meter.Owed())})
	}
	return out
}
