package market

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/store"
)

// LeaseBook is the one owner of a supplier's leases. A lease lives in
// three places: the capacity ledger's reservation of its GPUs, its stored
// LeaseRecord, and its renter's hold until a job claims it (claims.go).
// Every change to a lease goes through the book, whose methods keep the
// three consistent:
//
//   - a lease is granted as one leaseGrant (admit, reserve, offer,
//     confirm), and leaseGrant.end is the one place that undoes what a
//     grant left unfinished;
//   - Claim and its undo write the record and the hold under one mutex;
//   - Release frees a lease's GPUs and has its capacity advertised again;
//   - a confirmed lease on which no job starts is released by RunClaims;
//   - Lease is the executor's lookup: only a lease confirmed here.
//
// A lease's natural end needs no call: its reservation lapses then.
type LeaseBook struct {
	store       store.Store
	ledger      *Ledger
	now         func() time.Time
	clock       clock.Clock
	claimWindow time.Duration
	changed     func() // capacity was taken or freed: asks are re-posted
	log         *slog.Logger
	metrics     *metrics.Market

	// mu guards the renters' holds; it is held across the lease-record
	// writes that change them.
	mu            sync.Mutex
	holds         map[ID]*hold            // leases with no job started on them
	running       map[ID]bool             // leases a job runs on now (Claim until Release)
	barred        map[peer.ID]time.Time   // renters refused until then
	withdrawals   map[peer.ID][]time.Time // when each renter gave reservations up unconfirmed, within a claim window
	claimsChanged chan struct{}           // a claim deadline was added
}

// newLeaseBook opens the ledger of cfg's GPUs in cfg.Store and loads the
// holds of the confirmed leases a restart left unclaimed. cfg has its
// defaults filled (NewSupplier); changed is called whenever capacity is
// taken or freed outside a lease's natural end.
func newLeaseBook(cfg SupplierConfig, changed func()) (*LeaseBook, error) {
	led, err := OpenLedger(cfg.Store, cfg.GPUs, cfg.Now)
	if err != nil {
		return nil, err
	}
	b := &LeaseBook{
		store: cfg.Store, ledger: led, now: cfg.Now, clock: cfg.Clock, claimWindow: cfg.ClaimWindow,
		changed: changed, log: cfg.Log.With("sub", "supplier"), metrics: cfg.Metrics,
		holds: map[ID]*hold{}, running: map[ID]bool{}, barred: map[peer.ID]time.Time{}, withdrawals: map[peer.ID][]time.Time{}, claimsChanged: make(chan struct{}, 1),
	}
	if err := b.loadHolds(); err != nil {
		return nil, fmt.Errorf("load leases: %w", err)
	}
	return b, nil
}

// Ledger is the capacity ledger the book reserves GPUs in; read it, do
// not change it behind the book.
func (b *LeaseBook) Ledger() *Ledger { return b.ledger }

// Lease returns the lease id for a job to run on: kept here as confirmed
// and made by this supplier. Otherwise it says why not: unknown (wrapping
// store.ErrNotFound), a lease this node rented, or one pending, lapsed or
// released (with the reason it was released).
func (b *LeaseBook) Lease(id ID) (*Lease, error) {
	sl, err := GetLease(b.store, id, b.now())
	switch {
	case err != nil:
		return nil, err
	case sl.Role != RoleSupplier:
		return nil, fmt.Errorf("lease %s was not made by this supplier", id.Short())
	case sl.State != LeaseConfirmed && sl.Reason != "":
		return nil, fmt.Errorf("lease %s is %s, not confirmed: %s", id.Short(), sl.State, sl.Reason)
	case sl.State != LeaseConfirmed:
		return nil, fmt.Errorf("lease %s is %s, not confirmed", id.Short(), sl.State)
	}
	return sl.Lease, nil
}

// Claim marks the confirmed lease id as having a job started on it, so
// that it is held to its end, and as running a job until Release. It
// fails when the lease is not confirmed here (released unclaimed or by
// its renter, lapsed, unknown). Claiming a claimed lease again (the next
// job on a lease that binds none) keeps its claim. The function it
// returns undoes the claim, for a job that then failed to start.
func (b *LeaseBook) Claim(id ID) (undo func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec, err := getLeaseRecord(b.store, id)
	switch {
	case err != nil:
		return nil, err
	case rec.State != LeaseConfirmed:
		return nil, fmt.Errorf("lease %s is %s%s", id.Short(), rec.State, reasonSuffix(rec.Reason))
	case !rec.Claimed.IsZero():
		b.running[id] = true
		return func() { b.jobOver(id) }, nil
	}
	b.running[id] = true
	rec.Claimed, rec.Idle = b.now().UTC(), false
	if err := putLeaseRecord(b.store, id, rec); err != nil {
		return nil, fmt.Errorf("lease %s: keep its claim: %w", id.Short(), err)
	}
	h := b.holds[id]
	delete(b.holds, id)
	return func() { b.unclaim(id, h) }, nil
}

// unclaim undoes a claim: the lease is held again only until its claim
// window ends.
func (b *LeaseBook) unclaim(id ID, h *hold) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.running, id)
	rec, err := getLeaseRecord(b.store, id)
	if err != nil || rec.State != LeaseConfirmed {
		return
	}
	rec.Claimed, rec.Idle = time.Time{}, h != nil && h.idle
	if err := putLeaseRecord(b.store, id, rec); err != nil {
		b.log.Warn("undo the claim of a lease", "lease", id.Short(), "err", err)
	}
	if h != nil {
		b.holds[id] = h
		b.wakeClaims()
	}
}

// Release is told that the job on lease id is over. A lease that binds
// a job spec took its one job: its GPUs are freed before its end and
// advertised again. A lease that binds none keeps its GPUs for its
// renter's next job, for as long as an unclaimed lease is held (idle),
// or until its renter releases it (RenterRelease). It fails, wrapping ErrNoReservation, when
// the lease holds no GPUs (unknown, released already, or lapsed).
func (b *LeaseBook) Release(id ID) error {
	b.jobOver(id)
	if sl, err := GetLease(b.store, id, b.now()); err == nil && len(sl.Terms().JobSpecHash) == 0 {
		if !b.ledger.Holds(id) {
			return fmt.Errorf("lease %s: %w", id.Short(), ErrNoReservation)
		}
		return b.idle(id, sl.Lease)
	}
	if err := b.ledger.Release(id); err != nil {
		return err
	}
	b.changed()
	return nil
}

// idle holds lease l, which binds no job spec and whose job is over, for
// its renter's next job as an unclaimed lease is held: for its claim
// window (the time its credit limit pays for, which bounds what the
// supplier gives away, as the time after a lease's last receipt is
// billed to no one). A job that starts claims it again; else
// RunClaims releases it as idle.
func (b *LeaseBook) idle(id ID, l *Lease) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec, err := getLeaseRecord(b.store, id)
	if err != nil || rec.State != LeaseConfirmed || b.running[id] {
		return err
	}
	by := b.now().Add(l.ClaimWindow(b.claimWindow)).UTC()
	rec.Claimed, rec.ClaimBy, rec.Idle = time.Time{}, by, true
	if err := putLeaseRecord(b.store, id, rec); err != nil {
		return fmt.Errorf("lease %s: keep it idle: %w", id.Short(), err)
	}
	b.holds[id] = &hold{renter: l.Renter, model: l.Model, count: int(l.Count), claimBy: by, idle: true}
	b.wakeClaims()
	return nil
}

// jobOver notes that no job runs on lease id any more.
func (b *LeaseBook) jobOver(id ID) {
	b.mu.Lock()
	delete(b.running, id)
	b.mu.Unlock()
}

// leaseExists reports whether a lease with this ID was already made and
// confirmed (and maybe released since): a proposal is good for one lease
// only.
func (b *LeaseBook) leaseExists(id ID) bool {
	rec, err := getLeaseRecord(b.store, id)
	return err == nil && (rec.State == LeaseConfirmed || rec.State == LeaseReleased)
}

// errUnkept is wrapped by leaseGrant.confirm when the confirmed lease
// could not be stored: the supplier's failure, not the renter's.
var errUnkept = errors.New("the supplier could not keep the lease")

// A leaseGrant is one lease being granted, from its renter's admission
// (LeaseBook.admit) to the end of the exchange: reserve, offer and
// confirm, in that order, each only after the one before succeeded; then
// end, once, whatever happened.
type leaseGrant struct {
	b *LeaseBook
	p *Proposal
	h *hold // the renter's hold, taken by admit

	reserved  bool   // the ledger holds the lease's GPUs
	offered   []byte // the countersigned lease, stored as pending
	unkept    bool   // confirmed in the ledger, but its record failed
	confirmed bool   // stored as confirmed
	withdrawn bool   // given up by its renter before confirmation, its GPUs freed
	ended     bool   // end was called
	outcome   holdOutcome
	claimBy   time.Time // when a confirmed lease is released unless claimed
}

// reserve holds the proposal's GPUs until confirmBy and returns their
// UUIDs. It fails, wrapping ErrInsufficientCapacity, when too few are
// free.
func (g *leaseGrant) reserve(confirmBy time.Time) ([]string, error) {
	res, err := g.b.ledger.Reserve(g.p.ID, g.p.Model, int(g.p.Count), confirmBy)
	if err != nil {
		return nil, err
	}
	g.reserved = true
	return res.GPUs, nil
}

// offer stores raw, the countersigned lease sent to the renter, as
// pending: from now on a grant that ends unconfirmed leaves it lapsed.
func (g *leaseGrant) offer(raw []byte, now time.Time) error {
	if err := saveLease(g.b.store, g.p.ID, raw, LeasePending, RoleSupplier, now); err != nil {
		return err
	}
	g.offered = raw
	return nil
}

// confirm holds the offered lease l's GPUs until its end and stores it as
// confirmed, to be released at the returned claim deadline unless a job
// starts on it. It fails when the reservation lapsed first, or wrapping
// errUnkept when the record could not be stored.
func (g *leaseGrant) confirm(l *Lease) (claimBy time.Time, err error) {
	id := g.p.ID
	if _, err := g.b.ledger.Confirm(id, l.End()); err != nil {
		return time.Time{}, err
	}
	claimBy = l.Start().Add(l.ClaimWindow(g.b.claimWindow))
	rec := LeaseRecord{Envelope: g.offered, State: LeaseConfirmed, Role: RoleSupplier, Saved: g.b.now().UTC(), ClaimBy: claimBy.UTC()}
	if err := putLeaseRecord(g.b.store, id, rec); err != nil {
		g.unkept = true
		return time.Time{}, fmt.Errorf("lease %s: %w: %w", id.Short(), errUnkept, err)
	}
	g.confirmed, g.claimBy = true, claimBy
	g.b.changed()
	return claimBy, nil
}

// withdraw gives the offered lease up at its renter's word, before
// confirmation (LeaseConfirm.release_id): its GPUs are freed at once and
// it is stored as released, ReleasedBeforeConfirmation; end then drops
// the renter's hold without barring it (see LeaseBook.noteWithdrawal for
// the cap). A record that cannot be written is reported, but the GPUs
// are freed and the renter not barred all the same: the lease was never
// confirmed, so its pending record reads as lapsed.
func (g *leaseGrant) withdraw() error {
	b, id, now := g.b, g.p.ID, g.b.now()
	if err := b.ledger.Release(id); err != nil && !errors.Is(err, ErrNoReservation) {
		return fmt.Errorf("lease %s: free its GPUs: %w", id.Short(), err)
	}
	g.withdrawn = true
	b.changed()
	rec := LeaseRecord{Envelope: g.offered, State: LeaseReleased, Role: RoleSupplier, Saved: now.UTC(), Reason: ReleasedBeforeConfirmation}
	if err := putLeaseRecord(b.store, id, rec); err != nil {
		return fmt.Errorf("lease %s: keep its release: %w", id.Short(), err)
	}
	return nil
}

// ReleasedBeforeConfirmation is the reason kept with a lease its renter
// gave up before confirming it (LeaseConfirm.release_id).
const ReleasedBeforeConfirmation = "released by the renter before confirmation"

// end ends the exchange and returns how it ended. It is the one place
// that undoes what a grant left unfinished: the GPUs of a lease never
// offered, or whose confirmed record could not be kept, are freed at
// once; an offered lease left unconfirmed is stored as lapsed, and its
// GPUs lapse at its confirm deadline (its renter is barred a while). It
// then ends the renter's hold and counts the lease. Calls after the
// first change nothing and return the first's outcome.
func (g *leaseGrant) end() holdOutcome {
	if g.ended {
		return g.outcome
	}
	g.ended = true
	b, id, now := g.b, g.p.ID, g.b.now()
	outcome := holdDropped
	switch {
	case g.confirmed:
		outcome = holdClaimable
		b.metrics.Lease(metrics.Supplier, metrics.LeaseConfirmed)
	case g.withdrawn:
		outcome = holdWithdrawn
		b.metrics.Lease(metrics.Supplier, metrics.LeaseWithdrawn)
	case g.offered != nil && !g.unkept:
		outcome = holdLapsed
		if err := saveLease(b.store, id, g.offered, LeaseLapsed, RoleSupplier, now); err != nil {
			b.log.Warn("keep a lease as lapsed", "lease", id.Short(), "err", err)
		}
		b.metrics.Lease(metrics.Supplier, metrics.LeaseLapsed)
	case g.reserved:
		if err := b.ledger.Release(id); err != nil && !errors.Is(err, ErrNoReservation) {
			b.log.Warn("free the GPUs of a lease not granted", "lease", id.Short(), "err", err)
		}
		if g.unkept {
			b.metrics.Lease(metrics.Supplier, metrics.LeaseRefused)
		}
	}
	b.endHold(id, g.h, outcome, g.claimBy, now)
	b.log.Debug("lease exchange ended", "lease", id.Short(), "outcome", outcome)
	g.outcome = outcome
	return outcome
}
