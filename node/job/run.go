package job

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/cluster"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/shell"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// run is one attempt on the supplier.
type run struct {
	e       *Executor
	lease   *market.Lease
	terms   market.Terms
	spec    *Spec
	attempt uint32
	dir     string
	// cp is the checkpoint folder, opened before the job started: the
	// node reads checkpoints through it only, so whatever the job renames
	// or replaces with a symlink on the way to it, the node reads that
	// folder and nothing else. Only the meter loop uses it; finish closes
	// it.
	cp      *os.File
	log     *logFile
	meter   *settle.Meter
	proc    runtime.Process
	started time.Time
	logger  *slog.Logger
	paid    chan struct{} // a voucher came in
	// chainRenter is the renter's payment address once the lease is
	// settled on chain (useChain); nil before.
	chainRenter *chainpay.Address
	done        chan struct{} // closed after the final receipt

	mu         sync.Mutex
	rec        runRecord
	state      State
	exitCode   int
	message    string
	endState   State // set by stop: the state the attempt ends in
	sess       *session
	paused     bool
	pausedAt   time.Time     // start of the unbilled paused time not yet metered
	haltedAt   time.Time     // when the current pause began
	pausedFor  time.Duration // paused time inside the current interval
	settled    bool
	cpArchive  []byte
	cpHash     [32]byte
	cpFinger   [32]byte
	disk       int64  // the job's disk limit (0: none)
	outArchive []byte // a succeeded attempt's outputs (outputs.go), until settled or OutputRetention
	outHash    [32]byte
	cut        chan struct{} // closed to cut the open tunnels (cutTunnels)
	usage      usageAcc      // GPU usage sampled since the last receipt
	// stdio is a shell's standard streams (the spec's stdin), nil for
	// other jobs.
	stdio *shell.Stdio
	// member is a cluster member's place in its cluster network (nil for
	// other jobs), left at finish.
	member *cluster.Membership
}

// State is the attempt's state now.
func (r *run) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *run) setState(s State, code int, msg string) {
	r.mu.Lock()
	r.state, r.exitCode, r.message = s, code, msg
	sess := r.sess
	r.mu.Unlock()
	if Ended(s) || s == StateRunning || s == StateHalted {
		r.rec.State, r.rec.ExitCode, r.rec.Updated = s, code, r.e.cfg.Now().UTC()
		if err := r.e.saveRecord(r.lease.ID, r.rec); err != nil {
			r.logger.Warn("keep job state", "err", err)
		}
	}
	if sess != nil {
		sess.send(r.status())
	}
}

func (r *run) status() *pb.ServerFrame {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &pb.ServerFrame{Body: &pb.ServerFrame_Status{Status: &pb.Status{
		Attempt: r.attempt, State: r.state.String(), ExitCode: int32(r.exitCode), Message: r.message, TimeMs: r.e.cfg.Now().UnixMilli(),
	}}}
}

// stop ends a running attempt in state end (stopped, fenced, interrupted,
// expired, or halted for lack of payment).
func (r *run) stop(end State, why string) {
	r.mu.Lock()
	if r.endState != "" || Ended(r.state) {
		r.mu.Unlock()
		return
	}
	r.endState, r.message = end, why
	r.mu.Unlock()
	r.cutTunnels()
	r.logger.Info("stopping job", "as", end, "why", why)
	go func() { _ = r.proc.Stop(r.e.cfg.StopGrace) }()
}

// checkpoint is the archive and hash announced in the last receipt.
func (r *run) checkpoint() ([]byte, [32]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cpArchive, r.cpHash
}

// refreshCheckpoint re-archives the checkpoint folder when it changed.
func (r *run) refreshCheckpoint() []byte {
	var f [32]byte
	entries, err := listCheckpoint(r.cp)
	if err == nil {
		f = fingerprint(entries)
	}
	r.mu.Lock()
	same, hash := f == r.cpFinger, r.cpHash
	r.mu.Unlock()
	switch {
	case err != nil:
		r.logger.Warn("checkpoint not archived", "err", err)
	case !same:
		archive, h, err := packCheckpoint(r.cp, entries)
		if err != nil {
			r.logger.Warn("checkpoint not archived", "err", err)
		} else {
			r.mu.Lock()
			r.cpArchive, r.cpHash, r.cpFinger, hash = archive, h, f, h
			r.mu.Unlock()
		}
	}
	if hash == ([32]byte{}) {
		return nil
	}
	return hash[:]
}

// meterLoop issues a receipt every interval until the attempt ends, and
// enforces the lease: its end time and its credit limit.
func (r *run) meterLoop() {
	interval := r.terms.ReceiptInterval
	clk := r.e.cfg.Clock
	t := clk.NewTicker(interval)
	defer t.Stop()
	go r.sampleLoop()
	// A lease is paid for from its start, whatever ran on it: the time
	// the renter held the GPUs before the job started is billed at once;
	// on a lease that takes jobs one after another, the time since the
	// last job's last receipt.
	last := r.lease.Start()
	if prev := r.meter.Last(); prev != nil {
		last = maxTime(last, prev.End())
	}
	if r.started.After(last) && r.receipt(last, r.started, false, StateRunning) {
		last = r.started
	}
	expire := clk.NewTimer(r.lease.End().Sub(clk.Now()))
	defer expire.Stop()
	for {
		select {
		case <-r.proc.Done():
			r.finish(last)
			return
		case <-expire.C():
			r.stop(StateExpired, "the lease ended")
		case <-r.paid:
			r.mu.Lock()
			resume := r.paused && !r.meter.OverCredit() && r.endState == ""
			if resume {
				r.paused = false
				r.pausedFor += r.e.cfg.Now().Sub(r.pausedAt)
			}
			r.mu.Unlock()
			if resume {
				if err := r.proc.Resume(); err != nil {
					r.logger.Warn("resume", "err", err)
				}
				r.logger.Info("payment caught up; job resumed")
				r.setState(StateRunning, 0, "")
			}
		case <-t.C():
			now := r.e.cfg.Now()
			r.receipt(last, now, false, StateRunning)
			last = now
			r.enforceCredit(now)
		}
	}
}

// gpuMs is the time of [from, to] not spent paused, times the leased GPUs.
func (r *run) gpuMs(from, to time.Time) int64 {
	r.mu.Lock()
	paused := r.pausedFor
	if r.paused {
		paused += to.Sub(maxTime(r.pausedAt, from))
		r.pausedAt = to
	}
	r.pausedFor = 0
	r.mu.Unlock()
	active := to.Sub(from) - paused
	if active < 0 {
		active = 0
	}
	return int64(active/time.Millisecond) * int64(r.lease.Count)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// receipt issues (durably) and sends the receipt of [from, to]; nothing
// past the lease's end is billed. It reports whether one was issued.
func (r *run) receipt(from, to time.Time, final bool, state State) bool {
	if end := r.lease.End(); to.After(end) {
		to = end
	}
	if from.After(to) {
		from = to
	}
	cp := r.refreshCheckpoint()
	r.sampleUsage()
	rc, err := r.meter.Issue(r.attempt, from, to, r.gpuMs(from, to), r.usage.take(), cp, final, state.String())
	if err != nil {
		r.logger.Error("receipt not issued", "err", err)
		return false
	}
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess != nil {
		sess.send(&pb.ServerFrame{Body: &pb.ServerFrame_Receipt{Receipt: rc.Raw}})
	}
	return true
}

// UsageEvery is how often a job's GPUs are sampled between receipts,
// unless ExecutorConfig.UsageEvery says otherwise.
const UsageEvery = 5 * time.Second

// usageTimeout bounds one sample.
const usageTimeout = 2 * time.Second

// sampleUsage reads the lease's GPUs once into r.usage. A lease of no GPU
// the reader can measure (simulated ones, no reader) counts as not
// measured.
func (r *run) sampleUsage() {
	rd := r.e.cfg.Usage
	if rd == nil || len(r.lease.GpuUuids) == 0 {
		r.usage.add(nil, inventory.ErrNotMeasured)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
	defer cancel()
	readings, err := rd.Usage(ctx, r.lease.GpuUuids)
	if err != nil && !errors.Is(err, inventory.ErrNotMeasured) {
		r.logger.Warn("gpu usage not measured", "err", err)
	}
	r.usage.add(readings, err)
}

// sampleLoop samples the GPUs every UsageEvery until the attempt ends.
func (r *run) sampleLoop() {
	if r.e.cfg.Usage == nil {
		return
	}
	every := r.e.cfg.UsageEvery
	if every <= 0 {
		every = UsageEvery
	}
	t := r.e.cfg.Clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.proc.Done():
			return
		case <-t.C():
			r.sampleUsage()
		}
	}
}

// usageAcc averages the samples of one receipt interval.
type usageAcc struct {
	mu     sync.Mutex
	n      int
	util   float64 // sum over samples of the GPUs' mean utilisation, %
	mem    float64 // sum over samples of the GPUs' mean memory in use
	failed bool    // a sample failed: the interval is not measured
}

// add counts one sample: readings of every leased GPU, or err.
func (u *usageAcc) add(readings []inventory.Reading, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil || len(readings) == 0 {
		u.failed = true
		return
	}
	var util, mem float64
	for _, g := range readings {
		util += float64(g.UtilPct)
		mem += float64(g.MemUsedBytes)
	}
	u.util += util / float64(len(readings))
	u.mem += mem / float64(len(readings))
	u.n++
}

// take returns the interval's usage and starts the next interval.
func (u *usageAcc) take() settle.Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out settle.Usage
	if !u.failed && u.n > 0 {
		out = settle.Usage{
			Measured:     true,
			UtilPermille: uint32(min(math.Round(u.util/float64(u.n)*10), 1000)),
			MemUsedBytes: uint64(math.Round(u.mem / float64(u.n))),
		}
	}
	u.n, u.util, u.mem, u.failed = 0, 0, 0, false
	return out
}

// enforceCredit pauses the job while the renter owes more than the credit
// limit, and stops it when the pause outlasts the halt grace.
func (r *run) enforceCredit(now time.Time) {
	over := r.meter.OverCredit()
	r.mu.Lock()
	paused, since := r.paused, r.haltedAt
	if over && !paused && r.endState == "" {
		r.paused, r.pausedAt, r.haltedAt = true, now, now
	}
	r.mu.Unlock()
	switch {
	case over && !paused:
		r.cutTunnels()
		if r.member != nil {
			r.member.Cut() // and refuses new ones, unpaid (pausedCode)
		}
		if err := r.proc.Pause(); err != nil {
			r.logger.Warn("pause", "err", err)
		}
		r.logger.Info("renter behind on payment; job paused", "owed", r.meter.Owed(), "credit_limit", r.terms.CreditLimit)
		r.setState(StateHalted, 0, "waiting for payment")
	case paused && now.Sub(since) >= r.e.cfg.HaltGrace:
		r.stop(StateStopped, "the renter stopped paying")
	}
}

// finish issues the final receipt once the process is gone.
func (r *run) finish(last time.Time) {
	r.cutTunnels()
	if r.member != nil {
		r.member.Leave()
	}
	res := r.proc.Result()
	r.mu.Lock()
	end := r.endState
	if r.paused {
		r.paused = false
	}
	r.mu.Unlock()
	state, msg := StateSucceeded, ""
	switch {
	case end != "":
		state = end
		r.mu.Lock()
		msg = r.message
		r.mu.Unlock()
	case res.Err != nil:
		state, msg = StateFailed, res.Err.Error()
	case res.ExitCode != 0:
		state, msg = StateFailed, "exit code "+strconv.Itoa(res.ExitCode)
		if res.Signal != "" {
			msg = "killed by signal " + res.Signal
		}
	}
	r.endShell(end, msg, res)
	if state == StateSucceeded {
		r.packOutputs()
	}
	r.receipt(last, r.e.cfg.Now(), true, state)
	r.cp.Close() // the final receipt holds the last checkpoint
	// The attempt's files are the supplier's disk: the last checkpoint is
	// archived in memory and the log stays, the rest goes (RemoveAll
	// never follows a symlink the job left).
	for _, d := range []string{filepath.Join(r.dir, "work"), filepath.Join(r.dir, "checkpoint")} {
		if err := os.RemoveAll(d); err != nil {
			r.logger.Warn("remove the attempt's files", "dir", d, "err", err)
		}
	}
	r.setState(state, res.ExitCode, msg)
	r.logger.Info("job ended", "state", state, "exit_code", res.ExitCode, "cpu", res.CPUTime)
	close(r.done)
	// The job is over: a lease bound to it frees its GPUs whether or not
	// the renter comes back to settle; one that binds no job keeps them
	// for the next (market.LeaseBook.Release).
	r.e.release(r.lease.ID)
}

// attach makes st the attempt's session: it resends the receipts not yet
// paid, the log from logOffset and the status, then serves the renter's
// frames until the stream ends.
func (r *run) attach(st network.Stream, logOffset uint64) {
	s := newSession(st)
	r.mu.Lock()
	old := r.sess
	r.sess = s
	r.mu.Unlock()
	if old != nil {
		old.close()
	}
	_ = st.SetReadDeadline(time.Time{})
	if f := r.outputsFrame(); f != nil {
		s.send(f) // before the status: a renter that finds the attempt ended takes them first
	}
	s.send(r.status())
	for _, rc := range r.meter.Unacked() {
		s.send(&pb.ServerFrame{Body: &pb.ServerFrame_Receipt{Receipt: rc.Raw}})
	}
	go r.pumpLogs(s, int64(logOffset))
	defer func() {
		r.mu.Lock()
		if r.sess == s {
			r.sess = nil
		}
		r.mu.Unlock()
		s.close()
	}()
	for {
		var f pb.ClientFrame
		if err := p2p.ReadMsg(st, MaxFrameSize, &f); err != nil {
			return
		}
		switch b := f.Body.(type) {
		case *pb.ClientFrame_Voucher:
			_, err := r.meter.Accept(b.Voucher, r.e.cfg.Now())
			if !r.voucherIn(err) {
				return
			}
		case *pb.ClientFrame_ChainVoucher:
			if !r.voucherIn(r.acceptChainVoucher(b.ChainVoucher)) {
				return
			}
		case *pb.ClientFrame_Stop:
			r.stop(StateStopped, "the renter stopped it: "+b.Stop)
		case *pb.ClientFrame_Statement:
			r.countersign(s, b.Statement)
		}
	}
}

// voucherIn follows a voucher's acceptance: a paused attempt is told it
// was paid, a refusal is logged. It returns false when the session must
// end (the voucher was evidence of the renter's misbehaviour).
func (r *run) voucherIn(err error) bool {
	if err != nil {
		r.logger.Warn("voucher refused", "err", err)
		return !errors.Is(err, settle.ErrEvidence)
	}
	select {
	case r.paid <- struct{}{}:
	default:
	}
	return true
}

// countersign answers the renter's statement once the attempt is over.
func (r *run) countersign(s *session, stmt []byte) {
	// The final receipt goes out just before the attempt is marked done:
	// a statement may overtake that by a moment.
	select {
	case <-r.done:
	case <-time.After(p2p.StreamTimeout):
		r.logger.Warn("statement for a job that has not ended; ignored")
		return
	}
	raw, err := r.meter.Countersign(stmt, r.e.cfg.Now())
	if err != nil {
		r.logger.Warn("statement refused", "err", err)
		return
	}
	s.send(&pb.ServerFrame{Body: &pb.ServerFrame_Settlement{Settlement: raw}})
	r.mu.Lock()
	first := !r.settled
	r.settled = true
	r.mu.Unlock()
	if first {
		r.dropOutputs(OutputKeep)
	}
	if first {
		r.logger.Info("settled")
	}
}

// pumpLogs sends the log from off as it grows, until the session ends.
func (r *run) pumpLogs(s *session, off int64) {
	for {
		b, changed, err := r.log.ReadAt(off, LogChunk)
		if err != nil {
			return
		}
		if len(b) > 0 {
			if !s.send(&pb.ServerFrame{Body: &pb.ServerFrame_Log{Log: &pb.Log{Attempt: r.attempt, Offset: uint64(off), Data: b}}}) {
				return
			}
			off += int64(len(b))
			continue
		}
		select {
		case <-changed:
		case <-s.closed:
			return
		}
	}
}

// session is the renter's stream while it is attached: one writer at a
// time, each write bounded.
type session struct {
	st     network.Stream
	mu     sync.Mutex
	dead   bool
	closed chan struct{}
	once   sync.Once
}

func newSession(st network.Stream) *session {
	return &session{st: st, closed: make(chan struct{})}
}

func (s *session) send(f *pb.ServerFrame) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return false
	}
	_ = s.st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	if err := p2p.WriteMsg(s.st, f); err != nil {
		s.dead = true
		s.st.Reset()
		s.once.Do(func() { close(s.closed) })
		return false
	}
	return true
}

func (s *session) close() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	s.once.Do(func() { close(s.closed) })
	_ = s.st.Close()
}
