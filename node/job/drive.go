package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// refusal is a supplier's Welcome refusing a Hello.
type refusal struct{ reason string }

func (r *refusal) Error() string { return "supplier refused: " + r.reason }

// clientSession is the renter's end of a session stream.
type clientSession struct {
	st      network.Stream
	chainTo *chainpay.Address // the supplier's payment address: pay on chain; nil: off chain
	mu      sync.Mutex
	dead    bool
}

func (cs *clientSession) send(f *pb.ClientFrame) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.dead {
		return false
	}
	_ = cs.st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	if err := p2p.WriteMsg(cs.st, f); err != nil {
		cs.dead = true
		cs.st.Reset()
		return false
	}
	return true
}

func (cs *clientSession) close() {
	cs.mu.Lock()
	cs.dead = true
	cs.mu.Unlock()
	cs.st.Reset()
}

// attemptCtx is what following one attempt needs.
type attemptCtx struct {
	attempt uint32
	lease   *market.Lease
	payer   *settle.Payer
	log     *logFile
}

func (c *Controller) current(js *jobState) (*attemptCtx, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	cur := js.rec.cur()
	if cur == nil {
		return nil, errors.New("no attempt")
	}
	l, err := market.OpenLease(cur.Lease, c.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("kept lease: %w", err)
	}
	p, err := settle.NewPayer(c.cfg.Ledger, c.cfg.Key, settle.TermsOf(l, js.spec.JobId))
	if err != nil {
		return nil, err
	}
	lf := js.logs[cur.Attempt]
	if lf == nil {
		if lf, err = openLog(c.logPath(js.rec.ID, cur.Attempt)); err != nil {
			return nil, err
		}
		js.logs[cur.Attempt] = lf
	}
	return &attemptCtx{attempt: cur.Attempt, lease: l, payer: p, log: lf}, nil
}

// connect opens a session to the current attempt's supplier: a start when
// the supplier has not accepted one yet, an attach otherwise.
func (c *Controller) connect(ctx context.Context, js *jobState) error {
	ac, err := c.current(js)
	if err != nil {
		return err
	}
	js.mu.Lock()
	cur := *js.rec.cur()
	stop := js.rec.StopAsked
	js.mu.Unlock()
	h := &pb.Hello{Attempt: ac.attempt}
	if c.chain != nil {
		h.ChainKey = c.chain.own.Raw
	}
	var spec, checkpoint []byte
	if !cur.Started {
		spec = js.spec.Raw
		h.Lease, h.SpecSize = ac.lease.Raw, uint32(len(spec))
		if js.cl != nil {
			if h.Cluster, err = c.clusterHelloOf(js, ac.attempt); err != nil {
				return err
			}
		}
		if cur.Checkpoint != "" {
			if checkpoint, err = os.ReadFile(c.checkpointPath(js.rec.ID, cur.Checkpoint)); err != nil {
				return fmt.Errorf("checkpoint to resume from: %w", err)
			}
			sum := sha256.Sum256(checkpoint)
			h.CheckpointSize, h.CheckpointHash = uint64(len(checkpoint)), sum[:]
		}
	} else {
		h.LeaseId, h.LogOffset = ac.lease.ID[:], uint64(ac.log.Size())
	}
	dctx, cancel := context.WithTimeout(ctx, p2p.StreamTimeout)
	defer cancel()
	if err := c.cfg.Net.Connect(dctx, ac.lease.Supplier); err != nil {
		return fmt.Errorf("reach %s: %w", ac.lease.Supplier, err)
	}
	st, err := c.cfg.Net.NewStream(dctx, ac.lease.Supplier, SessionProtocol)
	if err != nil {
		return fmt.Errorf("open session to %s: %w", ac.lease.Supplier, err)
	}
	_ = st.SetDeadline(time.Now().Add(StartTimeout))
	w, err := Handshake(st, h, spec, checkpoint)
	switch {
	case err != nil:
		st.Reset()
		return err
	case w.Busy:
		// Not a verdict on the attempt: retried like an unreachable
		// supplier.
		st.Close()
		return fmt.Errorf("supplier %s: %s", ac.lease.Supplier, w.Refused)
	case w.Refused != "":
		st.Close()
		return &refusal{w.Refused}
	}
	_ = st.SetDeadline(time.Time{})
	cs := &clientSession{st: st, chainTo: c.chainTo(w, ac.lease)}
	js.mu.Lock()
	if old := js.conn; old != nil {
		old.close()
	}
	js.conn = cs
	started := !js.rec.cur().Started
	if started {
		js.rec.cur().Started, js.rec.cur().RunningAt = true, c.cfg.Now().UTC()
	}
	if js.rec.State == StateStarting || js.rec.State == StateRecovering || js.rec.State == StateRenting {
		js.rec.State = StateRunning
	}
	err = c.save(js)
	js.mu.Unlock()
	if started {
		c.log.Info("job started on supplier", "job", js.rec.ID[:8], "attempt", ac.attempt, "supplier", ac.lease.Supplier)
	}
	if stop != "" {
		cs.send(&pb.ClientFrame{Body: &pb.ClientFrame_Stop{Stop: stop}})
	}
	return err
}

// drive follows a job to its end: attempt after attempt, through
// failovers and restarts.
func (c *Controller) drive(ctx context.Context, js *jobState) {
	backoff := time.Second
	var lostSince, rentFailing time.Time
	for ctx.Err() == nil {
		js.mu.Lock()
		done := js.rec.finished() && (c.allSettled(&js.rec) || c.settleGaveUp(&js.rec))
		needLease := js.rec.cur() == nil || js.rec.cur().Outcome != "" && (js.rec.State == StateRecovering || js.cl != nil)
		js.mu.Unlock()
		if js.cl != nil {
			// A cluster member's next attempt is its cluster's to lease
			// (coordinate); it is done only once the cluster is over.
			if done && js.cl.over() {
				return
			}
			if needLease || done {
				c.memberWait(ctx, js)
				continue
			}
		} else if done {
			return
		}
		if needLease {
			err := c.recover(ctx, js)
			if err == nil {
				rentFailing = time.Time{}
				continue
			}
			c.log.Warn("no new lease yet", "job", js.rec.ID[:8], "err", err)
			if rentFailing.IsZero() {
				rentFailing = c.cfg.Now()
			}
			if c.cfg.Now().Sub(rentFailing) >= RentFor {
				js.mu.Lock()
				js.rec.State, js.rec.Message = StateFailed, fmt.Sprintf("no supplier to continue on for %s: %v", RentFor, err)
				js.rec.FinishedAt = c.cfg.Now().UTC()
				_ = c.save(js)
				js.mu.Unlock()
				return
			}
			sleep(ctx, 5*time.Second)
			continue
		}
		js.mu.Lock()
		conn := js.conn
		js.mu.Unlock()
		if conn == nil {
			if err := c.connect(ctx, js); err != nil {
				var ref *refusal
				if errors.As(err, &ref) {
					c.attemptOver(ctx, js, StateInterrupted, ref.reason)
					sleep(ctx, backoff) // an ended attempt that cannot settle is retried until SettleFor
					backoff = min(backoff*2, 5*time.Second)
					continue
				}
				if lostSince.IsZero() {
					lostSince = c.cfg.Now()
				}
				if c.cfg.Now().Sub(lostSince) >= c.lostAfter(js) {
					c.maybeFailover(ctx, js, err)
					lostSince = time.Time{}
					continue
				}
				sleep(ctx, backoff)
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
		}
		lostSince, backoff = time.Time{}, time.Second
		final, err := c.follow(ctx, js)
		js.mu.Lock()
		if js.conn != nil {
			js.conn.close()
			js.conn = nil
		}
		js.mu.Unlock()
		if final != "" {
			c.attemptOver(ctx, js, final, "")
			continue
		}
		if why := js.takeGiveUp(); why != "" {
			// The health checks gave the attempt up (health.go): a
			// failover, as from a lost supplier.
			c.attemptOver(ctx, js, StateLost, why)
			continue
		}
		if errors.Is(err, settle.ErrEvidence) {
			// A supplier caught signing conflicting or inflated receipts
			// is not waited for.
			c.attemptOver(ctx, js, StateLost, "evidence against the supplier: "+err.Error())
			continue
		}
		if ctx.Err() == nil {
			c.log.Info("lost the session with the supplier", "job", js.rec.ID[:8], "err", err)
			lostSince = c.cfg.Now()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (c *Controller) lostAfter(js *jobState) time.Duration {
	if c.cfg.LostAfter > 0 {
		return c.cfg.LostAfter
	}
	js.mu.Lock()
	iv := time.Duration(js.rec.Interval) * time.Millisecond
	js.mu.Unlock()
	if iv == 0 {
		iv = market.DefaultReceiptInterval
	}
	return max(3*iv, 3*time.Second)
}

// maybeFailover gives up the current supplier, unless it is this node
// that lost the network.
func (c *Controller) maybeFailover(ctx context.Context, js *jobState, cause error) {
	ac, err := c.current(js)
	if err != nil {
		return
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	online := c.cfg.Net.Online(octx, ac.lease.Supplier)
	cancel()
	if !online {
		c.log.Warn("supplier unreachable but so is the rest of the network; waiting", "job", js.rec.ID[:8])
		return
	}
	c.log.Warn("supplier lost; failing over", "job", js.rec.ID[:8], "supplier", ac.lease.Supplier, "cause", cause)
	c.attemptOver(ctx, js, StateLost, cause.Error())
}

// follow reads the session until the attempt ends (its final state) or
// the session breaks (error).
func (c *Controller) follow(ctx context.Context, js *jobState) (State, error) {
	ac, err := c.current(js)
	if err != nil {
		return "", err
	}
	js.mu.Lock()
	cs := js.conn
	every := time.Duration(js.spec.CheckpointEveryS) * time.Second
	js.mu.Unlock()
	if cs == nil {
		return "", errors.New("not attached")
	}
	if every == 0 {
		every = DefaultCheckpointEvery
	}
	stop := context.AfterFunc(ctx, cs.close)
	defer stop()
	silence := c.lostAfter(js)
	var (
		final   State
		finalAt time.Time
		settled bool
		outputs *pb.Outputs // the attempt's announced outputs
		// unfetched: the succeeded attempt's outputs could not be
		// fetched; it ends interrupted, to run again.
		unfetched bool
		// A job on a lease that binds no spec settles alone (no
		// statement): it waits for the status that ends the attempt,
		// which follows the final receipt, before it returns.
		local, ended bool
	)
	// outcome is the attempt's end as the renter judges it: a succeeded
	// attempt whose outputs could not be fetched ran for nothing.
	outcome := func() State {
		if unfetched && final == StateSucceeded {
			return StateInterrupted
		}
		return final
	}
	for {
		_ = cs.st.SetReadDeadline(time.Now().Add(silence))
		var f pb.ServerFrame
		if err := p2p.ReadMsg(cs.st, MaxFrameSize, &f); err != nil {
			if final != "" {
				return outcome(), nil
			}
			return "", err
		}
		switch b := f.Body.(type) {
		case *pb.ServerFrame_Status:
			c.onStatus(js, ac, b.Status)
			ended = ended || Ended(State(b.Status.State)) && b.Status.Attempt == ac.attempt
			// Reattached to an attempt that ended while this node was
			// away, its final receipt already paid: state the bill again.
			if last := ac.payer.Last(); Ended(State(b.Status.State)) && final == "" && last != nil && last.Final && b.Status.Attempt == ac.attempt {
				final, finalAt = State(last.State), c.cfg.Now()
				if final == StateSucceeded && outputs != nil {
					unfetched = c.takeOutputsOrNote(ctx, js, ac, outputs)
				}
				settled = c.sendStatement(js, ac, cs, final)
				local = settled
			}
		case *pb.ServerFrame_Log:
			if b.Log.Attempt == ac.attempt {
				appendLog(ac.log, b.Log)
				js.mu.Lock()
				js.notify()
				js.mu.Unlock()
			}
		case *pb.ServerFrame_Outputs:
			if b.Outputs.Attempt == ac.attempt {
				outputs = b.Outputs
			}
		case *pb.ServerFrame_Receipt:
			r, done, err := c.onReceipt(ctx, js, ac, cs, b.Receipt, every)
			if err != nil {
				if errors.Is(err, settle.ErrEvidence) {
					return "", err // a cheating supplier: fail over
				}
				continue
			}
			if done && State(r.State) == StateSucceeded && outputs != nil {
				// Before the attempt is stated: the outputs are what
				// the renter paid for.
				unfetched = c.takeOutputsOrNote(ctx, js, ac, outputs)
			}
			if done {
				final, finalAt = State(r.State), c.cfg.Now()
				settled = c.sendStatement(js, ac, cs, final)
				local = settled
			}
		case *pb.ServerFrame_ClusterLinks:
			js.onLinks(ac.attempt, b.ClusterLinks)
		case *pb.ServerFrame_Settlement:
			if err := ac.payer.Settle(b.Settlement); err != nil {
				c.log.Warn("settlement refused", "job", js.rec.ID[:8], "err", err)
				continue
			}
			settled = true
			js.mu.Lock()
			js.rec.cur().Settled = true
			_ = c.save(js)
			js.mu.Unlock()
		}
		if final != "" && (settled && (!local || ended) || c.cfg.Now().Sub(finalAt) > p2p.StreamTimeout) {
			return outcome(), nil
		}
	}
}

func appendLog(lf *logFile, l *pb.Log) {
	size := lf.Size()
	data := l.Data
	switch off := int64(l.Offset); {
	case off+int64(len(data)) <= size:
		return // already have it
	case off > size:
		return // a gap (never sent by a conforming supplier): the next attach resends from size
	case off < size:
		data = data[size-off:]
	}
	_, _ = lf.Write(data)
}

func (c *Controller) onStatus(js *jobState, ac *attemptCtx, s *pb.Status) {
	if s.Attempt != ac.attempt {
		return
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	switch state := State(s.State); state {
	case StateRunning, StateHalted:
		if js.rec.State != state && !js.rec.finished() {
			js.rec.State = state
			_ = c.save(js)
		}
	}
	if Ended(State(s.State)) {
		js.rec.ExitCode, js.rec.Message = int(s.ExitCode), s.Message
		_ = c.save(js)
	}
}

// onReceipt checks, keeps and pays a receipt, then pulls a new checkpoint
// when the receipt announces one. done is true for the attempt's final
// receipt.
func (c *Controller) onReceipt(ctx context.Context, js *jobState, ac *attemptCtx, cs *clientSession, raw []byte, every time.Duration) (*settle.Receipt, bool, error) {
	voucher, err := ac.payer.Accept(raw, ac.attempt, c.cfg.Now())
	if err != nil {
		c.log.Warn("receipt refused", "job", js.rec.ID[:8], "attempt", ac.attempt, "err", err)
		return nil, false, err
	}
	r, err := settle.OpenReceipt(raw)
	if err != nil {
		return nil, false, err
	}
	f := &pb.ClientFrame{Body: &pb.ClientFrame_Voucher{Voucher: voucher}}
	if cs.chainTo != nil {
		if f, err = c.chain.voucherFrame(voucher, *cs.chainTo); err != nil {
			return nil, false, fmt.Errorf("chain voucher: %w", err)
		}
	}
	cs.send(f)
	if len(r.CheckpointHash) == 32 {
		h := hex.EncodeToString(r.CheckpointHash)
		js.mu.Lock()
		due := h != js.rec.Checkpoint && (r.Final || c.cfg.Now().Sub(js.rec.CheckAt) >= every)
		js.mu.Unlock()
		if due {
			if err := c.pullCheckpoint(ctx, js, ac); err != nil {
				c.log.Warn("checkpoint not pulled", "job", js.rec.ID[:8], "err", err)
			}
		}
	}
	return r, r.Final, nil
}

// pullCheckpoint fetches the attempt's checkpoint archive and keeps it
// durably; the job's record then names it as the one to resume from.
func (c *Controller) pullCheckpoint(ctx context.Context, js *jobState, ac *attemptCtx) error {
	js.mu.Lock()
	have, _ := hex.DecodeString(js.rec.Checkpoint)
	js.mu.Unlock()
	archive, err := c.fetchArchive(ctx, ac, &pb.CheckpointRequest{LeaseId: ac.lease.ID[:], Attempt: ac.attempt, Have: have}, MaxCheckpointSize)
	if err != nil || archive == nil {
		return err
	}
	sum := sha256.Sum256(archive)
	hash := hex.EncodeToString(sum[:])
	if err := writeFileSync(c.checkpointPath(js.rec.ID, hash), archive); err != nil {
		return fmt.Errorf("keep checkpoint: %w", err)
	}
	js.mu.Lock()
	old := js.rec.Checkpoint
	js.rec.Checkpoint, js.rec.CheckAt = hash, c.cfg.Now().UTC()
	err = c.save(js)
	js.mu.Unlock()
	if err == nil && old != "" && old != hash {
		if !c.checkpointInUse(js, old) {
			_ = os.Remove(c.checkpointPath(js.rec.ID, old))
		}
	}
	c.log.Info("checkpoint pulled", "job", js.rec.ID[:8], "attempt", ac.attempt, "bytes", len(archive), "hash", hash[:12])
	return err
}

func (c *Controller) checkpointInUse(js *jobState, hash string) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, a := range js.rec.Attempts {
		if a.Checkpoint == hash && !a.Started {
			return true
		}
	}
	return false
}

// sendStatement signs and sends the statement of a finished attempt. A
// job on a lease that binds no job spec is not stated: the lease takes
// further jobs on the same meter, and a statement would close it. Its
// final receipt paid, the attempt counts as settled, which it reports.
func (c *Controller) sendStatement(js *jobState, ac *attemptCtx, cs *clientSession, outcome State) (settled bool) {
	if len(ac.lease.Terms().JobSpecHash) == 0 {
		js.mu.Lock()
		js.rec.cur().Settled = true
		_ = c.save(js)
		js.mu.Unlock()
		return true
	}
	raw, err := ac.payer.Statement(outcome.String(), c.cfg.Now())
	if err != nil {
		c.log.Warn("statement", "job", js.rec.ID[:8], "err", err)
		return false
	}
	cs.send(&pb.ClientFrame{Body: &pb.ClientFrame_Statement{Statement: raw}})
	return false
}

// attemptOver records how the current attempt ended and decides what
// comes next: the job is over, restarts under its policy, or moves to
// another supplier.
func (c *Controller) attemptOver(ctx context.Context, js *jobState, outcome State, why string) {
	if js.cl != nil {
		c.memberOver(js, outcome, why)
		return
	}
	js.mu.Lock()
	cur := js.rec.cur()
	if cur == nil || cur.Outcome != "" {
		js.mu.Unlock()
		return
	}
	cur.Outcome = outcome
	code := js.rec.ExitCode
	stopAsked := js.rec.StopAsked != ""
	switch {
	case outcome == StateSucceeded:
		js.rec.State = StateSucceeded
	case stopAsked:
		js.rec.State, js.rec.Message = StateStopped, js.rec.StopAsked
	case outcome == StateFailed:
		if js.spec.Retries(code, js.rec.Restarts) {
			js.rec.Restarts++
			js.rec.State = StateRecovering
		} else {
			js.rec.State = StateFailed
		}
	default:
		// Infrastructure: lost, interrupted, expired, halted or stopped
		// by the supplier. Retried within the budget.
		js.rec.Failovers++
		if js.rec.Failovers > c.cfg.RetryBudget {
			js.rec.State = StateFailed
			js.rec.Message = fmt.Sprintf("gave up after %d failovers: %s %s", c.cfg.RetryBudget, outcome, why)
		} else {
			js.rec.State = StateRecovering
			if why != "" {
				js.rec.Message = outcome.String() + ": " + why
			}
		}
	}
	if js.rec.OnLease && js.rec.State == StateRecovering {
		// Its lease was given, not rented for it: there is no other.
		js.rec.State = StateFailed
		js.rec.Message = strings.TrimPrefix(js.rec.Message+"; ", "; ") + "it ran on the lease it was given, and has no other attempt"
	}
	if js.rec.finished() && js.rec.FinishedAt.IsZero() {
		js.rec.FinishedAt = c.cfg.Now().UTC()
	}
	_ = c.save(js)
	state := js.rec.State
	js.mu.Unlock()
	c.log.Info("attempt over", "job", js.rec.ID[:8], "outcome", outcome, "job_state", state)
	if outcome == StateLost {
		c.lostAttempt(js)
	}
}

// lostAttempt states the current attempt, given up on its lost
// supplier, and fences that supplier's copy.
func (c *Controller) lostAttempt(js *jobState) {
	ac, err := c.current(js)
	if err != nil {
		return
	}
	if _, err := ac.payer.Statement("failed-over", c.cfg.Now()); err != nil {
		c.log.Debug("statement of a lost attempt", "err", err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.fence(c.ctx, ac.lease, ac.attempt)
	}()
}

// recover leases GPUs for the next attempt, excluding the suppliers lost
// before (a job's own failure does not exclude its supplier). Every
// attempt has a lease of its own, settled when the attempt ends.
func (c *Controller) recover(ctx context.Context, js *jobState) error {
	js.mu.Lock()
	var exclude []peer.ID
	for _, a := range js.rec.Attempts {
		if a.Outcome != StateFailed && a.Outcome != StateSucceeded {
			if id, err := peer.Decode(a.Supplier); err == nil {
				exclude = append(exclude, id)
			}
		}
	}
	js.mu.Unlock()
	return c.rentAttempt(ctx, js, exclude)
}

// fence tells a supplier given up on to stop its copy of the attempt, if
// it comes back while its lease lasts.
func (c *Controller) fence(ctx context.Context, l *market.Lease, attempt uint32) {
	giveUp := c.cfg.Now().Add(FenceFor)
	for ctx.Err() == nil && c.cfg.Now().Before(l.End()) && c.cfg.Now().Before(giveUp) {
		dctx, cancel := context.WithTimeout(ctx, p2p.StreamTimeout)
		err := c.cfg.Net.Connect(dctx, l.Supplier)
		var st network.Stream
		if err == nil {
			st, err = c.cfg.Net.NewStream(dctx, l.Supplier, SessionProtocol)
		}
		cancel()
		if err == nil {
			_ = st.SetDeadline(time.Now().Add(p2p.StreamTimeout))
			var w *pb.Welcome
			w, err = Handshake(st, &pb.Hello{LeaseId: l.ID[:], Attempt: attempt, Fence: "the job moved to another supplier"}, nil, nil)
			st.Reset()
			if err == nil && w.Busy {
				err = errors.New(w.Refused)
			}
			if err == nil {
				c.log.Info("fenced the lost supplier's attempt", "lease", l.ID.Short(), "attempt", attempt, "answer", w.State+w.Refused)
				return
			}
		}
		sleep(ctx, 10*time.Second)
	}
}
