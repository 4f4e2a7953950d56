package market

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// TestLeaseBookHeldRefusal: with half of the GPUs held by a lease with no
// job on it, a further lease is refused as busy with what is true (how
// many are held, of how many, and when to retry), and the quote's count
// says the same; once the lease is claimed, the refusal is gone.
func TestLeaseBookHeldRefusal(t *testing.T) {
	bt := newBookTest(t)
	l := bt.grant(t, 2)
	claimBy := bt.b.holds[l.ID].claimBy
	g, decline, why := bt.b.admit(bt.propose(t, 1), bt.clk.Now())
	if g != nil {
		g.end()
		t.Fatal("a lease past the held cap was admitted")
	}
	retry := claimBy.Sub(bt.clk.Now()).Round(time.Second)
	want := "2 of 4 h100-sxm GPUs here are held by leases with no job yet (at most 2 may be, 1 more asked); retry in " + retry.String()
	if decline != DeclineBusy || why != want {
		t.Errorf("refusal (%s) %q, want (%s) %q", decline, why, DeclineBusy, want)
	}
	hc := bt.b.overHeldCap("h100-sxm", 1)
	if !hc.Over || hc.Held != 2 || hc.Total != 4 || hc.RetryAfter != claimBy.Sub(bt.clk.Now()) {
		t.Errorf("overHeldCap = %+v, want 2 of 4 held, retry after %s", hc, claimBy.Sub(bt.clk.Now()))
	}
	if _, err := bt.b.Claim(l.ID); err != nil {
		t.Fatal(err)
	}
	if hc := bt.b.overHeldCap("h100-sxm", 2); hc.Over || hc.Held != 0 {
		t.Errorf("after the claim, overHeldCap = %+v, want nothing held", hc)
	}
}

// TestCheckHeld: the held count of a quote is checked as any field a
// peer sends.
func TestCheckHeld(t *testing.T) {
	for _, tt := range []struct {
		name string
		q    *pb.Quote
		ok   bool
	}{
		{"none", &pb.Quote{Decline: string(DeclineBusy)}, true},
		{"busy with holds", &pb.Quote{Decline: string(DeclineBusy), Held: 3, Total: 8, RetryAfterMs: 40_000}, true},
		{"held on a price decline", &pb.Quote{Decline: string(DeclinePrice), Held: 3, Total: 8}, false},
		{"held on an offer", &pb.Quote{Held: 1, Total: 8}, false},
		{"held over total", &pb.Quote{Decline: string(DeclineBusy), Held: 9, Total: 8}, false},
		{"total over the cap", &pb.Quote{Decline: string(DeclineBusy), Held: 3, Total: MaxCount + 1}, false},
		{"negative retry", &pb.Quote{Decline: string(DeclineBusy), Held: 3, Total: 8, RetryAfterMs: -1}, false},
		{"retry past any lease", &pb.Quote{Decline: string(DeclineBusy), Held: 3, Total: 8, RetryAfterMs: MaxDuration.Milliseconds() + 1}, false},
	} {
		if err := checkHeld(tt.q); (err == nil) != tt.ok {
			t.Errorf("%s: checkHeld = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// release opens a release of lease id signed by key, as of the book's
// clock.
func (bt *bookTest) release(t *testing.T, key crypto.PrivKey, id ID) *Release {
	t.Helper()
	raw, err := SealRelease(&pb.LeaseRelease{Supplier: []byte(bt.supplier), LeaseId: id[:], Nonce: bt.nextNonce(), CreatedMs: bt.clk.Now().UnixMilli()}, key)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := OpenRelease(raw, bt.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestLeaseBookRenterRelease: the renter's release ends its lease at
// once (GPUs free, stored as released, no bar), and a release of
// someone else's lease, of one released already, of one whose job runs
// or of one that ended changes nothing.
func TestLeaseBookRenterRelease(t *testing.T) {
	bt := newBookTest(t)
	l := bt.grant(t, 2)
	stranger := newTestKey(t)
	if _, err := bt.b.RenterRelease(bt.release(t, stranger, l.ID)); !errors.Is(err, ErrNotYours) {
		t.Errorf("a stranger's release: %v, want ErrNotYours", err)
	}
	if _, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, IDOf([]byte("no such lease")))); !errors.Is(err, ErrNotYours) {
		t.Errorf("release of an unknown lease: %v, want ErrNotYours", err)
	}
	bt.free(t, 2, "after refused releases")
	bt.clk.Advance(10 * time.Second)
	at, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, l.ID))
	if err != nil || !at.Equal(bt.clk.Now()) {
		t.Fatalf("release = %s, %v; want released now (%s)", at, err, bt.clk.Now())
	}
	bt.free(t, 4, "released")
	if got := bt.state(t, l.ID); got != LeaseReleased {
		t.Errorf("released lease is %s", got)
	}
	if _, held := bt.b.holds[l.ID]; held {
		t.Error("a released lease is still held to its claim window")
	}
	if bt.barred(t) {
		t.Error("a renter that released its lease is barred as for an unclaimed one")
	}
	if _, err := bt.b.Lease(l.ID); err == nil || !strings.Contains(err.Error(), "released by its renter") {
		t.Errorf("the executor's lookup of a released lease: %v", err)
	}
	bt.clk.Advance(time.Second)
	again, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, l.ID))
	if !errors.Is(err, ErrLeaseEnded) || !again.Equal(at.UTC()) {
		t.Errorf("a release sent again = %s, %v; want ErrLeaseEnded at the first release's %s", again, err, at)
	}

	busy := bt.grant(t, 1)
	if _, err := bt.b.Claim(busy.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, busy.ID)); !errors.Is(err, ErrLeaseBusy) {
		t.Errorf("release of a lease whose job runs: %v, want ErrLeaseBusy", err)
	}
	if got := bt.state(t, busy.ID); got != LeaseConfirmed {
		t.Errorf("a busy lease is %s after a refused release", got)
	}
	bt.free(t, 3, "a busy lease's release refused")
	if err := bt.b.Release(busy.ID); err != nil { // its job ended
		t.Fatal(err)
	}
	if _, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, busy.ID)); !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("release of a lease whose job is over: %v, want ErrLeaseEnded", err)
	}
}

// TestRenterReleaseOverTheWire: a renter takes an ask and releases the
// lease over LeaseReleaseProtocol between real libp2p hosts; the supplier
// frees its GPUs and the renter keeps the lease as released. A release
// sent again, one signed by another key, and one relayed by another peer
// change nothing.
func TestRenterReleaseOverTheWire(t *testing.T) {
	now := time.Now
	s := newTestSupplier(t, now)
	serveBidsInline(t, s)
	rp := newTestPeer(t, now)
	book := NewBook(now)
	book.AddAsk(s.ask(t, now()))
	rst := store.NewMemory()
	t.Cleanup(func() { rst.Close() })
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Store: rst, Now: now, Log: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := r.Rent(ctx, RentRequest{AllowSimulated: true, AllowUnproven: true,
		Filter: mustParseFilter(t, "model=h100-sxm"), Count: 2, Duration: time.Hour,
		MaxPrice: 3_000_000, Wait: 30 * time.Second, Enough: 1})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if free := s.sup.Ledger().Free("h100-sxm"); free != 2 {
		t.Fatalf("%d free after the lease, want 2", free)
	}

	// Another peer relays the renter's own signed release: refused.
	other := newTestPeer(t, now)
	other.connect(t, s.testPeer)
	raw, err := SealRelease(&pb.LeaseRelease{Supplier: []byte(l.Supplier), LeaseId: l.ID[:], Nonce: 1, CreatedMs: now().UnixMilli()}, rp.key)
	if err != nil {
		t.Fatal(err)
	}
	if got := sendRelease(t, other, l, raw); !strings.Contains(got.Refused, "sent by") {
		t.Errorf("a relayed release: %+v, want refused as sent by another peer", got)
	}
	// Another key's release of the lease, sent by its own peer: refused,
	// not its lease; a renter does not even send one for a lease of
	// another's.
	raw, err = SealRelease(&pb.LeaseRelease{Supplier: []byte(l.Supplier), LeaseId: l.ID[:], Nonce: 2, CreatedMs: now().UnixMilli()}, other.key)
	if err != nil {
		t.Fatal(err)
	}
	if got := sendRelease(t, other, l, raw); !strings.Contains(got.Refused, ErrNotYours.Error()) {
		t.Errorf("a stranger's release: %+v, want refused: %v", got, ErrNotYours)
	}
	stranger := NewRenter(RenterConfig{Net: other.net, Key: other.key, Orders: other.orders, Book: NewBook(now), Now: now, Log: quietLog()})
	if _, err := stranger.Release(ctx, l); !errors.Is(err, ErrNotYours) {
		t.Errorf("a renter releasing another's lease: %v, want ErrNotYours", err)
	}
	var refused *ReleaseRefused
	if free := s.sup.Ledger().Free("h100-sxm"); free != 2 {
		t.Fatalf("%d free after refused releases, want 2", free)
	}

	at, err := r.Release(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if at.IsZero() || at.Before(l.Start()) {
		t.Errorf("released at %s, before the lease's start %s", at, l.Start())
	}
	if free := s.sup.Ledger().Free("h100-sxm"); free != 4 {
		t.Errorf("%d free after the release, want 4", free)
	}
	sl, err := GetLease(rst, l.ID, now())
	if err != nil || sl.State != LeaseReleased {
		t.Errorf("the renter keeps its lease as %v (%v), want released", sl.State, err)
	}
	again, err := r.Release(ctx, l)
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, ErrLeaseEnded.Error()) || again.UnixMilli() != at.UnixMilli() {
		t.Errorf("a release sent again: %s, %v; want refused as ended at %s", again, err, at)
	}
}

// sendRelease sends raw from p to l's supplier and returns the answer.
func sendRelease(t *testing.T, p *testPeer, l *Lease, raw []byte) *pb.LeaseReleased {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := p.net.Host.NewStream(ctx, l.Supplier, LeaseReleaseProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := p2p.WriteRaw(st, raw); err != nil {
		t.Fatal(err)
	}
	var resp pb.LeaseReleased
	if err := p2p.ReadMsg(st, 4096, &resp); err != nil {
		t.Fatal(err)
	}
	return &resp
}

// FuzzOpenRelease: whatever bytes a peer sends as a release, OpenRelease
// accepts only one signed by the renter it names, recent, naming a
// supplier and a lease.
func FuzzOpenRelease(f *testing.F) {
	fx := newFixture(f)
	good := func() *pb.LeaseRelease {
		id := IDOf([]byte("lease"))
		return &pb.LeaseRelease{Supplier: []byte(fx.supplier), LeaseId: id[:], Nonce: 7, CreatedMs: fx.now.UnixMilli()}
	}
	raw, err := SealRelease(good(), fx.renterKey)
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, ReleaseType, func() *pb.LeaseRelease { return &pb.LeaseRelease{} }, raw)
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		r, data := fuzzOpen(t, data, resign, &pb.LeaseRelease{}, func(m *pb.LeaseRelease) ([]byte, error) { return SealRelease(m, fx.renterKey) },
			func(d []byte, _ time.Time) (*Release, error) { return OpenRelease(d, fx.now) })
		if r == nil {
			return
		}
		switch {
		case len(data) > MaxReleaseSize, peer.ID(r.LeaseRelease.Renter) != r.Renter, r.Supplier == "":
			t.Fatal("accepted release does not carry its signer and supplier")
		case r.Version != p2p.RecordVersion, r.Nonce == 0, r.CreatedMs <= 0, r.LeaseID == (ID{}) && len(r.LeaseId) != len(ID{}):
			t.Fatalf("accepted release with bad fields: %+v", r.LeaseRelease)
		}
	})
}

// TestLeaseBookJobsOneAfterAnother: a lease that binds no job spec (as
// `gpumesh rent` makes) takes jobs one after another: the end of a job
// keeps its GPUs for the next, which claims it again within the claim
// window; its renter may release it between jobs but not while one
// runs; left idle past the claim window it is released as idle, its
// renter not barred.
func TestLeaseBookJobsOneAfterAnother(t *testing.T) {
	bt := newBookTest(t)
	l := bt.grantProposal(t, bt.proposeFor(t, 2, nil))
	window := l.ClaimWindow(DefaultClaimWindow)
	for job := 1; job <= 2; job++ {
		if _, err := bt.b.Claim(l.ID); err != nil {
			t.Fatalf("job %d: claim: %v", job, err)
		}
		if _, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, l.ID)); !errors.Is(err, ErrLeaseBusy) {
			t.Errorf("job %d: release while it runs: %v, want ErrLeaseBusy", job, err)
		}
		bt.clk.Advance(2 * window) // a long job: claimed, never released as unclaimed
		bt.b.releaseUnclaimed()
		if err := bt.b.Release(l.ID); err != nil {
			t.Fatalf("job %d over: %v", job, err)
		}
		bt.free(t, 2, "between jobs")
		bt.clk.Advance(window / 2)
		bt.b.releaseUnclaimed()
		if got := bt.state(t, l.ID); got != LeaseConfirmed {
			t.Fatalf("job %d over, within the claim window: the lease is %s, want confirmed", job, got)
		}
	}
	// A job whose start failed (undo) leaves it idle, not running.
	undo, err := bt.b.Claim(l.ID)
	if err != nil {
		t.Fatal(err)
	}
	undo()
	if _, err := bt.b.RenterRelease(bt.release(t, bt.renterKey, l.ID)); err != nil {
		t.Fatalf("release between jobs: %v", err)
	}
	bt.free(t, 4, "released between jobs")
	if bt.barred(t) {
		t.Error("the renter is barred after releasing a lease")
	}
	if _, err := bt.b.Claim(l.ID); err == nil {
		t.Error("a job could claim a released lease")
	}

	// Idle past the claim window after its job: released as idle.
	l2 := bt.grantProposal(t, bt.proposeFor(t, 1, nil))
	if _, err := bt.b.Claim(l2.ID); err != nil {
		t.Fatal(err)
	}
	if err := bt.b.Release(l2.ID); err != nil {
		t.Fatal(err)
	}
	bt.clk.Advance(l2.ClaimWindow(DefaultClaimWindow) + time.Second)
	bt.b.releaseUnclaimed()
	sl, err := GetLease(bt.st, l2.ID, bt.clk.Now())
	if err != nil || sl.State != LeaseReleased || !strings.HasPrefix(sl.Reason, "idle: no further job started on it by ") {
		t.Fatalf("an idle lease past its window: %v (%s), %v; want released as idle", sl.State, sl.Reason, err)
	}
	bt.free(t, 4, "the idle lease released")
	if bt.barred(t) {
		t.Error("the renter of a lease released idle after its jobs is barred")
	}
}
