package market

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/store"
)

// Tests of the LeaseBook's sequences over a real in-memory store, with
// the records of the fixture (a supplier with 4 h100-sxm GPUs).

// flakyPuts is a store whose plain Puts (lease records, not the ledger's
// reservations) fail while fail is set.
type flakyPuts struct {
	store.Store
	fail atomic.Bool
}

func (s *flakyPuts) Put(ks store.Keyspace, key, value []byte) error {
	if s.fail.Load() {
		return errors.New("disk full")
	}
	return s.Store.Put(ks, key, value)
}

type bookTest struct {
	*fixture
	clk     *manualClock
	st      *flakyPuts
	b       *LeaseBook
	changed int // capacity changes the book announced
}

func newBookTest(t *testing.T) *bookTest {
	t.Helper()
	bt := &bookTest{fixture: newFixture(t), clk: &manualClock{t: testNow}}
	bt.st = &flakyPuts{Store: store.NewMemory(store.WithClock(bt.clk.Now))}
	t.Cleanup(func() { bt.st.Close() })
	b, err := newLeaseBook(SupplierConfig{
		Store: bt.st, GPUs: map[string][]string{"h100-sxm": {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}},
		Clock: clock.Real(), Now: bt.clk.Now, ClaimWindow: DefaultClaimWindow, Log: quietLog(),
	}, func() { bt.changed++ })
	if err != nil {
		t.Fatal(err)
	}
	bt.b = b
	return bt
}

// propose returns a fresh proposal of count GPUs for an hour, bound to a
// job spec as `gpumesh run` binds it.
func (bt *bookTest) propose(t *testing.T, count uint32) *Proposal {
	t.Helper()
	return bt.proposeFor(t, count, make([]byte, 32))
}

// proposeFor is propose binding the job spec hash spec (none when nil, as
// `gpumesh rent` proposes).
func (bt *bookTest) proposeFor(t *testing.T, count uint32, spec []byte) *Proposal {
	t.Helper()
	bt.fixture.now = bt.clk.Now()
	raw := bt.proposal(t, bt.quote(t, bt.bid(t), func(q *pb.Quote) { q.Count = count }), func(p *pb.LeaseProposal) { p.JobSpecHash = spec })
	p, err := OpenProposal(raw, bt.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// countersign seals the lease p makes on gpus, as the supplier does.
func (bt *bookTest) countersign(t *testing.T, p *Proposal, gpus []string) *Lease {
	t.Helper()
	bt.fixture.now = bt.clk.Now()
	raw := bt.lease(t, p.Raw, func(l *pb.Lease) { l.GpuUuids = gpus })
	l, err := OpenLease(raw, bt.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admit starts the grant of p, failing the test if the book refuses it.
func (bt *bookTest) admit(t *testing.T, p *Proposal) *leaseGrant {
	t.Helper()
	g, decline, why := bt.b.admit(p, bt.clk.Now())
	if g == nil {
		t.Fatalf("admit: refused (%s): %s", decline, why)
	}
	return g
}

// offer takes g as far as a grant goes before the renter confirms:
// reserved, countersigned and offered. It returns the offered lease.
func (bt *bookTest) offer(t *testing.T, g *leaseGrant) *Lease {
	t.Helper()
	gpus, err := g.reserve(bt.clk.Now().Add(ConfirmWindow))
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	l := bt.countersign(t, g.p, gpus)
	if err := g.offer(l.Raw, bt.clk.Now()); err != nil {
		t.Fatalf("offer: %v", err)
	}
	return l
}

// grant runs a whole successful grant of count GPUs and returns the
// confirmed lease.
func (bt *bookTest) grant(t *testing.T, count uint32) *Lease {
	t.Helper()
	return bt.grantProposal(t, bt.propose(t, count))
}

// grantProposal runs a whole successful grant of p and returns the
// confirmed lease.
func (bt *bookTest) grantProposal(t *testing.T, p *Proposal) *Lease {
	t.Helper()
	g := bt.admit(t, p)
	l := bt.offer(t, g)
	if _, err := g.confirm(l); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	if got := g.end(); got != holdClaimable {
		t.Fatalf("end of a confirmed grant = %s, want %s", got, holdClaimable)
	}
	return l
}

func (bt *bookTest) state(t *testing.T, id ID) LeaseState {
	t.Helper()
	sl, err := GetLease(bt.st, id, bt.clk.Now())
	if err != nil {
		t.Fatalf("GetLease: %v", err)
	}
	return sl.State
}

func (bt *bookTest) free(t *testing.T, want int, when string) {
	t.Helper()
	if got := bt.b.Ledger().Free("h100-sxm"); got != want {
		t.Errorf("%s: %d GPUs free, want %d", when, got, want)
	}
}

// barred reports whether the fixture's renter is refused a new lease.
func (bt *bookTest) barred(t *testing.T) bool {
	t.Helper()
	g, decline, _ := bt.b.admit(bt.propose(t, 1), bt.clk.Now())
	if g != nil {
		g.end()
	}
	return g == nil && decline == DeclineUnclaimed
}

// TestLeaseBookLifecycle: reserve, offer, confirm, claim, release, and a
// lease's end, each leaving the ledger, the record and the hold in step.
func TestLeaseBookLifecycle(t *testing.T) {
	bt := newBookTest(t)
	p := bt.propose(t, 2)
	g := bt.admit(t, p)
	gpus, err := g.reserve(bt.clk.Now().Add(ConfirmWindow))
	if err != nil || len(gpus) != 2 {
		t.Fatalf("reserve = %v, %v; want 2 GPUs", gpus, err)
	}
	bt.free(t, 2, "reserved")
	l := bt.countersign(t, p, gpus)
	if err := g.offer(l.Raw, bt.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if got := bt.state(t, l.ID); got != LeasePending {
		t.Errorf("offered lease is %s, want %s", got, LeasePending)
	}
	if _, err := bt.b.Lease(l.ID); err == nil || err.Error() != "lease "+l.ID.Short()+" is pending, not confirmed" {
		t.Errorf("lookup of a pending lease: %v", err)
	}
	claimBy, err := g.confirm(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := l.Start().Add(l.ClaimWindow(DefaultClaimWindow)); !claimBy.Equal(want) {
		t.Errorf("claim by %s, want %s", claimBy, want)
	}
	if got := g.end(); got != holdClaimable {
		t.Errorf("end = %s, want %s", got, holdClaimable)
	}
	if bt.changed != 1 {
		t.Errorf("confirm announced %d capacity changes, want 1", bt.changed)
	}
	if got, err := bt.b.Lease(l.ID); err != nil || got.ID != l.ID {
		t.Fatalf("lookup of the confirmed lease = %v, %v", got, err)
	}
	if _, held := bt.b.holds[l.ID]; !held {
		t.Error("a confirmed lease with no job is not held to its claim window")
	}

	undo, err := bt.b.Claim(l.ID)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if _, held := bt.b.holds[l.ID]; held {
		t.Error("a claimed lease is still held to its claim window")
	}
	// A second claim changes nothing, and its undo leaves the first.
	undo2, err := bt.b.Claim(l.ID)
	if err != nil {
		t.Fatalf("second claim: %v", err)
	}
	undo2()
	if rec, _ := getLeaseRecord(bt.st, l.ID); rec.Claimed.IsZero() {
		t.Error("undoing a second claim unclaimed the lease")
	}
	undo()
	if rec, _ := getLeaseRecord(bt.st, l.ID); !rec.Claimed.IsZero() {
		t.Error("undo left the lease claimed")
	}
	if _, held := bt.b.holds[l.ID]; !held {
		t.Error("an unclaimed lease is not held to its claim window again")
	}
	if _, err := bt.b.Claim(l.ID); err != nil {
		t.Fatalf("claim again: %v", err)
	}

	// The job ended early: its GPUs are free and advertised again.
	if err := bt.b.Release(l.ID); err != nil {
		t.Fatalf("release: %v", err)
	}
	bt.free(t, 4, "released")
	if bt.changed != 2 {
		t.Errorf("release announced %d capacity changes in all, want 2", bt.changed)
	}
	if err := bt.b.Release(l.ID); !errors.Is(err, ErrNoReservation) {
		t.Errorf("second release: %v, want ErrNoReservation", err)
	}
	if bt.changed != 2 {
		t.Error("a release that freed nothing announced a capacity change")
	}

	// A lease whose job runs to its end frees its GPUs then, unasked.
	l2 := bt.grant(t, 3)
	if _, err := bt.b.Claim(l2.ID); err != nil {
		t.Fatal(err)
	}
	bt.free(t, 1, "a second lease confirmed")
	bt.clk.Advance(time.Hour)
	bt.free(t, 4, "the second lease ended")
	if err := bt.b.Release(l2.ID); !errors.Is(err, ErrNoReservation) {
		t.Errorf("release after the end: %v, want ErrNoReservation", err)
	}
}

// TestLeaseGrantEndUndoes: whichever step a grant stops at, its end
// leaves the ledger, the record and the renter's standing as the exchange
// deserves.
func TestLeaseGrantEndUndoes(t *testing.T) {
	tests := []struct {
		name string
		// run takes g as far as the case goes and returns the lease ID.
		run        func(t *testing.T, bt *bookTest, g *leaseGrant) ID
		outcome    holdOutcome
		free       int        // GPUs free once it ended
		state      LeaseState // the record kept ("": none)
		barred     bool       // the renter is refused a while
		freeLapsed int        // GPUs free after the confirm window
	}{
		{
			name: "too few free GPUs",
			run: func(t *testing.T, bt *bookTest, g *leaseGrant) ID {
				g.p.Count = 5
				if _, err := g.reserve(bt.clk.Now().Add(ConfirmWindow)); !errors.Is(err, ErrInsufficientCapacity) {
					t.Fatalf("reserve 5 of 4: %v, want ErrInsufficientCapacity", err)
				}
				return g.p.ID
			},
			outcome: holdDropped, free: 4, freeLapsed: 4,
		},
		{
			name: "reserved, never offered (the seal or the pending record failed)",
			run: func(t *testing.T, bt *bookTest, g *leaseGrant) ID {
				gpus, err := g.reserve(bt.clk.Now().Add(ConfirmWindow))
				if err != nil {
					t.Fatal(err)
				}
				bt.st.fail.Store(true)
				defer bt.st.fail.Store(false)
				if err := g.offer(bt.countersign(t, g.p, gpus).Raw, bt.clk.Now()); err == nil {
					t.Fatal("offer stored a lease on a failing store")
				}
				return g.p.ID
			},
			outcome: holdDropped, free: 4, freeLapsed: 4,
		},
		{
			name: "offered, never confirmed",
			run: func(t *testing.T, bt *bookTest, g *leaseGrant) ID {
				return bt.offer(t, g).ID
			},
			outcome: holdLapsed, free: 2, state: LeaseLapsed, barred: true, freeLapsed: 4,
		},
		{
			name: "confirmed after the reservation lapsed",
			run: func(t *testing.T, bt *bookTest, g *leaseGrant) ID {
				l := bt.offer(t, g)
				bt.clk.Advance(ConfirmWindow)
				if _, err := g.confirm(l); !errors.Is(err, ErrNoReservation) {
					t.Fatalf("late confirm: %v, want ErrNoReservation", err)
				}
				return g.p.ID
			},
			outcome: holdLapsed, free: 4, state: LeaseLapsed, barred: true, freeLapsed: 4,
		},
		{
			name: "confirmed, but its record could not be kept",
			run: func(t *testing.T, bt *bookTest, g *leaseGrant) ID {
				l := bt.offer(t, g)
				bt.st.fail.Store(true)
				defer bt.st.fail.Store(false)
				if _, err := g.confirm(l); !errors.Is(err, errUnkept) {
					t.Fatalf("confirm on a failing store: %v, want errUnkept", err)
				}
				return g.p.ID
			},
			// Not the renter's fault: not barred. The pending record
			// reads as lapsed once its confirm window is over.
			outcome: holdDropped, free: 4, state: LeasePending, freeLapsed: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bt := newBookTest(t)
			g := bt.admit(t, bt.propose(t, 2))
			id := tt.run(t, bt, g)
			if got := g.end(); got != tt.outcome {
				t.Errorf("end = %s, want %s", got, tt.outcome)
			}
			if _, held := bt.b.holds[id]; held {
				t.Error("the hold outlived its grant")
			}
			bt.free(t, tt.free, "ended")
			rec, err := getLeaseRecord(bt.st, id)
			switch {
			case tt.state == "" && !errors.Is(err, store.ErrNotFound):
				t.Errorf("record kept: %+v, %v; want none", rec, err)
			case tt.state != "" && (err != nil || rec.State != tt.state):
				t.Errorf("record %q, %v; want %q", rec.State, err, tt.state)
			}
			if got := bt.barred(t); got != tt.barred {
				t.Errorf("renter barred: %v, want %v", got, tt.barred)
			}
			if _, err := bt.b.Lease(id); err == nil {
				t.Error("the executor finds a lease that was not granted")
			}
			if _, err := bt.b.Claim(id); err == nil {
				t.Error("a lease that was not granted can be claimed")
			}
			bt.clk.Advance(ConfirmWindow)
			bt.free(t, tt.freeLapsed, "after the confirm window")
		})
	}
}

// TestLeaseBookUnclaimed: a confirmed lease with no job started on it by
// its claim deadline is released: stored so, with the reason the
// executor's lookup and a claim then give, its GPUs freed, its renter
// barred.
func TestLeaseBookUnclaimed(t *testing.T) {
	bt := newBookTest(t)
	l := bt.grant(t, 2)
	claimBy := bt.b.holds[l.ID].claimBy
	if next := bt.b.releaseUnclaimed(); !next.Equal(claimBy) {
		t.Errorf("next claim deadline %s, want %s", next, claimBy)
	}
	bt.free(t, 2, "before the claim deadline")
	bt.clk.Advance(claimBy.Sub(bt.clk.Now()))
	bt.b.releaseUnclaimed()
	bt.free(t, 4, "after the claim deadline")
	if got := bt.state(t, l.ID); got != LeaseReleased {
		t.Errorf("unclaimed lease is %s, want %s", got, LeaseReleased)
	}
	reason := "unclaimed: no job started on it by " + claimBy.UTC().Format(time.RFC3339)
	if _, err := bt.b.Lease(l.ID); err == nil || err.Error() != "lease "+l.ID.Short()+" is released, not confirmed: "+reason {
		t.Errorf("lookup of the released lease: %v", err)
	}
	if _, err := bt.b.Claim(l.ID); err == nil || err.Error() != "lease "+l.ID.Short()+" is released ("+reason+")" {
		t.Errorf("claim of the released lease: %v", err)
	}
	if !bt.barred(t) {
		t.Error("the renter of an unclaimed lease is not barred")
	}
}

// TestLeaseBookLookupRefusals: the executor's lookup runs jobs only on
// leases this supplier confirmed, and says why not.
func TestLeaseBookLookupRefusals(t *testing.T) {
	bt := newBookTest(t)
	l := bt.countersign(t, bt.propose(t, 1), []string{"GPU-0"})
	tests := []struct {
		name  string
		state LeaseState
		role  Role
		want  string // the error ("": found)
	}{
		{"confirmed here", LeaseConfirmed, RoleSupplier, ""},
		{"rented by this node", LeaseConfirmed, RoleRenter, "lease " + l.ID.Short() + " was not made by this supplier"},
		{"pending", LeasePending, RoleSupplier, "lease " + l.ID.Short() + " is pending, not confirmed"},
		{"lapsed", LeaseLapsed, RoleSupplier, "lease " + l.ID.Short() + " is lapsed, not confirmed"},
	}
	for _, tt := range tests {
		if err := saveLease(bt.st, l.ID, l.Raw, tt.state, tt.role, bt.clk.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := bt.b.Lease(l.ID)
		switch {
		case tt.want == "" && (err != nil || got.ID != l.ID):
			t.Errorf("%s: Lease = %v, %v; want the lease", tt.name, got, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%s: Lease error %v, want %q", tt.name, err, tt.want)
		}
	}
	var unknown ID
	unknown[0] = 1
	if _, err := bt.b.Lease(unknown); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown lease: %v, want store.ErrNotFound", err)
	}
	if _, err := bt.b.Claim(unknown); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("claim of an unknown lease: %v, want store.ErrNotFound", err)
	}
	if err := bt.b.Release(unknown); !errors.Is(err, ErrNoReservation) {
		t.Errorf("release of an unknown lease: %v, want ErrNoReservation", err)
	}
}

func TestHoldOutcomeString(t *testing.T) {
	for o, want := range map[holdOutcome]string{
		holdDropped: "dropped", holdLapsed: "lapsed", holdClaimable: "claimable", 7: "holdOutcome(7)",
	} {
		if got := o.String(); got != want {
			t.Errorf("holdOutcome(%d).String() = %q, want %q", uint8(o), got, want)
		}
	}
}
