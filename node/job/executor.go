package job

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

var ksRuns = store.MustKeyspace("job-runs") // lease ID -> runRecord (JSON)

// runRecord is the supplier's durable note of an attempt, so that a
// restarted node can kill what is left of it and say what became of it.
type runRecord struct {
	LeaseID  string    `json:"lease_id"`
	JobID    string    `json:"job_id"`
	Renter   string    `json:"renter"`
	Attempt  uint32    `json:"attempt"`
	State    string    `json:"state"`
	Pid      int       `json:"pid"`
	Dir      string    `json:"dir"`
	ExitCode int       `json:"exit_code"`
	Started  time.Time `json:"started"`
	Updated  time.Time `json:"updated"`
}

// ExecutorConfig configures an Executor. Fields without a default note are
// required.
type ExecutorConfig struct {
	Host   host.Host
	Key    crypto.PrivKey
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
	// Lease gives a lease the market confirmed, by ID.
	Lease func(id market.ID) (*market.Lease, error)
	// Release gives a lease's GPUs back once its job is over (optional).
	Release func(id market.ID)
	// HaltGrace is how long a job stays paused for payment before it is
	// stopped (default 2 min).
	HaltGrace time.Duration
	// StopGrace is how long a stopped job has between SIGTERM and SIGKILL
	// (default 5 s).
	StopGrace time.Duration
	Now       func() time.Time
	Log       *slog.Logger
}

// Executor is the supplier side of jobs: it serves SessionProtocol and
// CheckpointProtocol, runs attempts and meters them.
type Executor struct {
	cfg ExecutorConfig
	log *slog.Logger

	mu     sync.Mutex
	runs   map[market.ID]*run
	closed bool
	wg     sync.WaitGroup
}

// NewExecutor installs the job protocols. Attempts a previous run of the
// node left behind are killed and closed with a final receipt.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.HaltGrace == 0 {
		cfg.HaltGrace = 2 * time.Minute
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.Runtimes["process"] == nil {
		return nil, errors.New("executor: no process runtime")
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	e := &Executor{cfg: cfg, log: cfg.Log.With("sub", "jobs"), runs: map[market.ID]*run{}}
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
		l, err := e.cfg.Lease(id)
		if err != nil {
			continue
		}
		jobID, _ := hex.DecodeString(rec.JobID)
		m, err := settle.NewMeter(e.cfg.Ledger, e.cfg.Key, settle.TermsOf(l, jobID))
		if err != nil {
			continue
		}
		now := e.cfg.Now()
		if _, err := m.Issue(rec.Attempt, now, now, 0, 0, nil, true, StateInterrupted); err != nil {
			e.log.Warn("final receipt of interrupted job", "lease", id.Short(), "err", err)
		}
		if e.cfg.Release != nil {
			e.cfg.Release(id)
		}
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

// handleSession serves one renter's session stream.
func (e *Executor) handleSession(st network.Stream) {
	_ = st.SetReadDeadline(time.Now().Add(HelloTimeout))
	var h pb.Hello
	if err := p2p.ReadMsg(st, MaxHelloSize, &h); err != nil {
		e.log.Debug("job session: bad hello", "peer", st.Conn().RemotePeer(), "err", err)
		st.Reset()
		return
	}
	r, refused := e.welcome(st.Conn().RemotePeer(), &h)
	_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	if refused != "" {
		e.log.Info("job session refused", "peer", st.Conn().RemotePeer(), "reason", refused)
		_ = p2p.WriteMsg(st, &pb.Welcome{Refused: refused})
		st.Close()
		return
	}
	if err := p2p.WriteMsg(st, &pb.Welcome{State: r.State(), Attempt: r.attempt}); err != nil {
		st.Reset()
		return
	}
	if h.Fence != "" {
		r.stop(StateFenced, h.Fence)
	}
	r.attach(st, h.LogOffset)
}

// welcome checks a Hello and finds or starts the attempt it names.
func (e *Executor) welcome(from peer.ID, h *pb.Hello) (*run, string) {
	if len(h.Lease) == 0 {
		id, err := market.ParseID(hex.EncodeToString(h.LeaseId))
		if err != nil {
			return nil, "attach: bad lease_id"
		}
		e.mu.Lock()
		r := e.runs[id]
		e.mu.Unlock()
		switch {
		case r == nil:
			return nil, fmt.Sprintf("attach: no job runs on lease %s here", id.Short())
		case r.lease.Renter != from:
			return nil, "attach: lease belongs to another renter"
		case r.attempt != h.Attempt:
			return nil, fmt.Sprintf("attach: attempt %d runs on this lease, not %d", r.attempt, h.Attempt)
		}
		return r, ""
	}
	now := e.cfg.Now()
	sent, err := market.OpenLease(h.Lease, now)
	if err != nil {
		return nil, fmt.Sprintf("invalid lease: %v", err)
	}
	l, err := e.cfg.Lease(sent.ID)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("lease %s is not one this supplier confirmed: %v", sent.ID.Short(), err)
	case l.Renter != from:
		return nil, "the lease belongs to another renter"
	case !now.Before(l.End()):
		return nil, fmt.Sprintf("lease %s ended at %s", l.ID.Short(), l.End().UTC().Format(time.RFC3339))
	case h.Attempt == 0:
		return nil, "attempt must be 1 or more"
	}
	spec, err := DecodeSpec(h.Spec)
	if err != nil {
		return nil, err.Error()
	}
	terms := l.Terms()
	switch {
	case len(terms.JobSpecHash) != 32:
		return nil, "the lease binds no job spec"
	case [32]byte(terms.JobSpecHash) != spec.Hash:
		return nil, "the job spec does not match the lease's job_spec_hash"
	case spec.Gpus != l.Count:
		return nil, fmt.Sprintf("the spec asks for %d GPUs, the lease has %d", spec.Gpus, l.Count)
	case e.cfg.Runtimes[runtimeName(spec)] == nil:
		return nil, fmt.Sprintf("runtime %s is not available on this supplier", runtimeName(spec))
	}
	var cp [32]byte
	if len(h.Checkpoint) > 0 {
		if len(h.CheckpointHash) != 32 {
			return nil, "checkpoint without a 32-byte hash"
		}
		cp = [32]byte(h.CheckpointHash)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, "the supplier is shutting down"
	}
	if old := e.runs[l.ID]; old != nil {
		switch {
		case h.Attempt == old.attempt:
			return old, "" // a repeated start: attach to it
		case h.Attempt < old.attempt:
			return nil, fmt.Sprintf("attempt %d is stale: attempt %d ran on this lease", h.Attempt, old.attempt)
		default:
			return nil, fmt.Sprintf("attempt %d ran on this lease; every attempt needs a lease of its own", old.attempt)
		}
	}
	r, err := e.start(l, spec, h.Attempt, h.Checkpoint, cp)
	if err != nil {
		e.log.Warn("job start failed", "lease", l.ID.Short(), "err", err)
		return nil, "start: " + err.Error()
	}
	e.runs[l.ID] = r
	return r, ""
}

func runtimeName(s *Spec) string {
	if s.Runtime == "" {
		return "process"
	}
	return s.Runtime
}

// start prepares the attempt's folders and starts its process.
func (e *Executor) start(l *market.Lease, spec *Spec, attempt uint32, checkpoint []byte, cpHash [32]byte) (*run, error) {
	limits, disk, err := e.cfg.Limits.resolve(spec.Limits)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.cfg.DataDir, "jobs", spec.ID(), fmt.Sprint(attempt))
	work, cpDir := filepath.Join(dir, "work"), filepath.Join(dir, "checkpoint")
	if spec.CheckpointDir != "" {
		cpDir = filepath.Join(work, filepath.FromSlash(spec.CheckpointDir))
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{work, cpDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		p := filepath.Join(work, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return nil, err
		}
		mode := os.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(p, f.Data, mode); err != nil {
			return nil, fmt.Errorf("input file %s: %w", f.Path, err)
		}
	}
	if len(checkpoint) > 0 {
		if err := UnpackCheckpoint(checkpoint, cpHash, cpDir); err != nil {
			return nil, err
		}
	}
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
		e: e, lease: l, terms: l.Terms(), spec: spec, attempt: attempt, dir: dir, cpDir: cpDir,
		log: lf, meter: meter, state: StateStarting, paid: make(chan struct{}, 1), done: make(chan struct{}),
		logger: e.log.With("lease", l.ID.Short(), "job", spec.ID()[:8], "attempt", attempt),
	}
	if len(checkpoint) > 0 {
		r.cpArchive, r.cpHash, r.cpFinger = checkpoint, cpHash, fingerprint(cpDir)
	}
	hide := append([]string{filepath.Join(e.cfg.DataDir, "jobs")}, e.cfg.Hide...)
	rs := runtime.Spec{
		JobID: spec.ID(), Attempt: int(attempt), Argv: spec.Argv, Env: envList(spec.Env),
		WorkDir: work, CheckpointDir: cpDir, GPUs: l.GpuUuids, Limits: limits,
		RunAs: e.cfg.RunAs, Hide: hide, Image: spec.Image, Stdout: lf, Stderr: lf,
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
	return r, nil
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
	LeaseID    string `json:"lease_id"`
	JobID      string `json:"job_id"`
	Renter     string `json:"renter"`
	Attempt    uint32 `json:"attempt"`
	State      string `json:"state"`
	OwedMicros int64  `json:"owed_micros"`
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
		out = append(out, RunView{LeaseID: r.lease.ID.String(), JobID: r.spec.ID(), Renter: r.lease.Renter.String(), Attempt: r.attempt, State: r.State(), OwedMicros: r.meter.Owed()})
	}
	return out
}
