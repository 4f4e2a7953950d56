package market

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/store"
)

// A lease costs its renter nothing until a job runs on it: receipts, and
// so payment, come from the job. So that GPUs cannot be held for free, a
// supplier tracks each renter's holds — leases with no job started on
// them, pending or confirmed — caps them per renter, and releases a
// confirmed lease on which no job has started within its claim window.
// A job that does start is billed from the lease's start (node/job).

// hold is a lease with no job started on it yet.
type hold struct {
	renter  peer.ID
	model   string
	count   int
	claimBy time.Time // zero while the lease awaits its confirmation
	// idle: a lease that binds no job spec, whose last job ended (at
	// claimBy less its claim window): held for the next job as long as
	// an unclaimed lease is, then released as idle, its renter not barred.
	idle bool
}

// holdOutcome is how the lease exchange for a hold ended.
type holdOutcome uint8

// Hold outcomes.
const (
	holdDropped   holdOutcome = iota // refused before a lease was offered: no trace
	holdLapsed                       // offered but not confirmed: the renter is barred a while
	holdClaimable                    // confirmed: held until claimBy unless a job starts
	holdWithdrawn                    // given up by the renter before confirmation: no bar, within MaxWithdrawals
)

func (o holdOutcome) String() string {
	switch o {
	case holdDropped:
		return "dropped"
	case holdLapsed:
		return "lapsed"
	case holdClaimable:
		return "claimable"
	case holdWithdrawn:
		return "withdrawn"
	}
	return fmt.Sprintf("holdOutcome(%d)", uint8(o))
}

// ClaimWindow is how long after its start the lease is held with no job
// started on it, at a supplier whose claim_window is ceiling: the time
// its credit limit pays for at its price, and at least two receipt
// intervals and MinClaimWindow, but never more than ceiling.
func (l *Lease) ClaimWindow(ceiling time.Duration) time.Duration {
	t := l.Terms()
	w := max(2*t.ReceiptInterval, MinClaimWindow)
	if l.PriceMicros > 0 && l.Count > 0 {
		// A duration, not money: float precision is ample, and the value
		// is bounded before it becomes a Duration.
		credit := float64(t.CreditLimit) / (float64(l.PriceMicros) * float64(l.Count)) * float64(time.Hour)
		if credit >= float64(ceiling) {
			return ceiling
		}
		w = max(w, time.Duration(credit))
	}
	return min(w, ceiling)
}

// admit records a pending hold of p's renter for lease p.ID and returns
// the grant it starts, unless the proposal already made a lease or is being answered, the
// renter holds MaxRenterHolds already or is barred, or the supplier's
// unclaimed holds of the model would pass heldCap; it says why not and
// with which decline (none for a proposal already answered).
func (b *LeaseBook) admit(p *Proposal, now time.Time) (*leaseGrant, Decline, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// A proposal is good for one lease: a re-sent one must not replace
	// the hold of the lease it made, which would then never be released.
	if _, ok := b.holds[p.ID]; ok || b.leaseExists(p.ID) {
		return nil, "", fmt.Sprintf("this proposal already made lease %s", p.ID.Short())
	}
	if until, ok := b.barred[p.Renter]; ok {
		if now.Before(until) {
			return nil, DeclineUnclaimed, fmt.Sprintf("a lease of yours here lapsed unconfirmed or was released unclaimed; proposals are refused until %s", until.UTC().Format(time.RFC3339))
		}
		delete(b.barred, p.Renter)
	}
	n := 0
	for _, h := range b.holds {
		if h.renter == p.Renter {
			n++
		}
	}
	if n >= MaxRenterHolds {
		return nil, DeclineUnclaimed, fmt.Sprintf("%d of your leases here are unconfirmed or have no job started on them (at most %d); start a job on one, release one, or let it be released", n, MaxRenterHolds)
	}
	// Fresh keys pass the per-renter cap: all renters together hold at
	// most heldCap GPUs of a model with no job on them. A lease of more
	// than that is admitted only while nothing else is held, so that a
	// whole machine can still be leased (and its job started at once),
	// while Sybil keys cannot stack holds past half of it.
	if hc := b.heldLocked(p.Model, int(p.Count), now); hc.Over {
		return nil, DeclineBusy, hc.String()
	}
	h := &hold{renter: p.Renter, model: p.Model, count: int(p.Count)}
	b.holds[p.ID] = h
	return &leaseGrant{b: b, p: p, h: h}, "", ""
}

// HeldCount is what a supplier says when GPUs held by leases with no job
// on them yet keep it from leasing more (heldCap): how many of the
// model's Total are so Held, and how long until enough of those holds
// end (claimed, released or lapsed) for the lease asked (RetryAfter).
type HeldCount struct {
	Model      string
	Held       int
	Total      int
	Count      int // GPUs asked
	Over       bool
	RetryAfter time.Duration
}

// String is the refusal a renter is shown, e.g. "3 of 8 h100-sxm GPUs
// here are held by leases with no job yet (at most 4 may be, 3 more
// asked); retry in 40s".
func (c HeldCount) String() string {
	return fmt.Sprintf("%d of %d %s GPUs here are held by leases with no job yet (at most %d may be, %d more asked); retry in %s",
		c.Held, c.Total, c.Model, heldCap(c.Total), c.Count, c.RetryAfter.Round(time.Second))
}

// heldLocked counts the GPUs of model held with no job on them, whether
// leasing count more would pass heldCap, and if so when it would not:
// once enough holds, soonest deadline first, have ended. A pending
// hold's deadline is its confirmation's plus the claim window it gets
// once confirmed. b.mu is held.
func (b *LeaseBook) heldLocked(model string, count int, now time.Time) HeldCount {
	c := HeldCount{Model: model, Total: b.ledger.total(model), Count: count}
	type end struct {
		at    time.Time
		count int
	}
	var ends []end
	for _, h := range b.holds {
		if h.model != model {
			continue
		}
		c.Held += h.count
		at := h.claimBy
		if at.IsZero() {
			at = now.Add(ConfirmWindow + b.claimWindow)
		}
		ends = append(ends, end{at, h.count})
	}
	if c.Over = passesHeldCap(c.Held, count, c.Total); !c.Over {
		return c
	}
	slices.SortFunc(ends, func(x, y end) int { return x.at.Compare(y.at) })
	held := c.Held
	for _, e := range ends {
		if held -= e.count; !passesHeldCap(held, count, c.Total) {
			c.RetryAfter = max(e.at.Sub(now), time.Second)
			break
		}
	}
	return c
}

// overHeldCap reports whether leasing count more GPUs of model would pass
// heldCap, as admit would refuse it, and what the supplier then says: a
// supplier declines such a bid (busy, with the held count) rather than
// quote a lease it would then refuse.
func (b *LeaseBook) overHeldCap(model string, count int) HeldCount {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heldLocked(model, count, b.now())
}

// passesHeldCap reports whether holding count more GPUs, with held of
// total already held with no job, would pass heldCap.
func passesHeldCap(held, count, total int) bool {
	return held > 0 && held+count > heldCap(total)
}

// heldCap is how many of total GPUs of a model may be held with no job
// started on them, by all renters together, once anything is held: half,
// rounded up.
func heldCap(total int) int { return (total + 1) / 2 }

// endHold records how the lease exchange for id, admitted as h, ended.
// It touches only h: another hold for id is not its own.
func (b *LeaseBook) endHold(id ID, h *hold, outcome holdOutcome, claimBy, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h == nil || b.holds[id] != h {
		return
	}
	switch outcome {
	case holdClaimable:
		h.claimBy = claimBy
		b.wakeClaims()
		return
	case holdLapsed:
		b.barred[h.renter] = now.Add(b.claimWindow)
	case holdWithdrawn:
		b.noteWithdrawal(h.renter, now)
	}
	delete(b.holds, id)
}

// noteWithdrawal counts a reservation renter gave up before confirming
// it. Such a release costs the renter nothing, as a gang lease's spares
// must not; but reserving and releasing over and over would hold GPUs
// for free, so more than MaxWithdrawals of them within a claim window
// bar the renter as a lapse does. b.mu is held.
func (b *LeaseBook) noteWithdrawal(renter peer.ID, now time.Time) {
	recent := pruneBefore(b.withdrawals[renter], now.Add(-b.claimWindow))
	recent = append(recent, now)
	if len(recent) > MaxWithdrawals {
		b.barred[renter] = now.Add(b.claimWindow)
		delete(b.withdrawals, renter)
		b.log.Info("renter barred: too many reservations released unconfirmed", "renter", renter, "released", len(recent), "within", b.claimWindow)
		return
	}
	b.withdrawals[renter] = recent
}

// pruneBefore drops the times before cut from ts, which is in order.
func pruneBefore(ts []time.Time, cut time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(cut) {
		i++
	}
	return ts[i:]
}

func (b *LeaseBook) wakeClaims() {
	select {
	case b.claimsChanged <- struct{}{}:
	default:
	}
}

// RunClaims releases confirmed leases on which no job started within
// their claim window, until ctx ends.
func (b *LeaseBook) RunClaims(ctx context.Context) {
	for {
		wait := time.Minute
		if next := b.releaseUnclaimed(); !next.IsZero() {
			wait = max(next.Sub(b.now()), 10*time.Millisecond)
		}
		t := b.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-b.claimsChanged:
		case <-t.C():
		}
		t.Stop()
	}
}

// releaseUnclaimed releases every confirmed lease past its claim window
// with no job on it, and returns the next claim deadline (zero: none).
func (b *LeaseBook) releaseUnclaimed() (next time.Time) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	freed := false
	for id, h := range b.holds {
		switch {
		case h.claimBy.IsZero():
			// Pending: the lease exchange ends it.
		case now.Before(h.claimBy):
			if next.IsZero() || h.claimBy.Before(next) {
				next = h.claimBy
			}
		default:
			done, f := b.releaseHold(id, h, now)
			if done {
				delete(b.holds, id)
			} else if next.IsZero() || now.Add(time.Second).Before(next) {
				next = now.Add(time.Second) // retry a failed write soon
			}
			freed = freed || f
		}
	}
	for renter, until := range b.barred {
		if !now.Before(until) {
			delete(b.barred, renter) // so that fresh identities cannot grow it forever
		}
	}
	for renter, ts := range b.withdrawals {
		if ts = pruneBefore(ts, now.Add(-b.claimWindow)); len(ts) == 0 {
			delete(b.withdrawals, renter)
		} else {
			b.withdrawals[renter] = ts
		}
	}
	if freed {
		b.changed()
	}
	return next
}

// releaseHold releases the unclaimed lease id: stored as released with
// its reason first, so that no job can start on it, then its GPUs. It
// reports whether the hold is done with and whether GPUs were freed; the
// caller holds b.mu.
func (b *LeaseBook) releaseHold(id ID, h *hold, now time.Time) (done, freed bool) {
	rec, err := getLeaseRecord(b.store, id)
	if err != nil || rec.State != LeaseConfirmed || !rec.Claimed.IsZero() {
		return true, false
	}
	if !b.ledger.Holds(id) {
		return true, false // its reservation ended otherwise (a restart's recovery)
	}
	rec.State, rec.Saved = LeaseReleased, now.UTC()
	rec.Reason = fmt.Sprintf("unclaimed: no job started on it by %s", h.claimBy.UTC().Format(time.RFC3339))
	if h.idle || rec.Idle {
		rec.Reason = fmt.Sprintf("idle: no further job started on it by %s", h.claimBy.UTC().Format(time.RFC3339))
	}
	if err := putLeaseRecord(b.store, id, rec); err != nil {
		b.log.Warn("release an unclaimed lease", "lease", id.Short(), "err", err)
		return false, false
	}
	if err := b.ledger.Release(id); err != nil && !errors.Is(err, ErrNoReservation) {
		b.log.Warn("free the GPUs of an unclaimed lease", "lease", id.Short(), "err", err)
	}
	if !h.idle && !rec.Idle {
		b.barred[h.renter] = now.Add(b.claimWindow) // it ran jobs, if idle: not barred
	}
	b.metrics.Lease(metrics.Supplier, metrics.LeaseReleased)
	b.log.Info("lease released: no job started on it", "lease", id.Short(), "renter", h.renter, "claim_by", h.claimBy.UTC().Format(time.RFC3339))
	return true, true
}

// loadHolds finds, after a restart, the confirmed leases that still hold
// GPUs and have no job claimed on them: they are held until their claim
// deadline (now plus the claim window for records that have none).
func (b *LeaseBook) loadHolds() error {
	now := b.now()
	codec := store.JSONCodec[LeaseRecord]{}
	return b.store.Iterate(ksLeases, nil, func(k, v []byte) error {
		rec, err := codec.Unmarshal(v)
		if err != nil || rec.Role != RoleSupplier || rec.State != LeaseConfirmed || !rec.Claimed.IsZero() || len(k) != len(ID{}) {
			return nil
		}
		id := ID(k)
		if !b.ledger.Holds(id) {
			return nil
		}
		l, err := OpenLease(rec.Envelope, now)
		if err != nil {
			return nil
		}
		by := rec.ClaimBy
		if by.IsZero() {
			by = now.Add(b.claimWindow)
		}
		b.holds[id] = &hold{renter: l.Renter, model: l.Model, count: int(l.Count), claimBy: by, idle: rec.Idle}
		return nil
	})
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
