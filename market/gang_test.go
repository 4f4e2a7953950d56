package market

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// Tests of the gang lease and the release of a reservation before its
// confirmation, over real libp2p hosts on loopback.

// gangNet is n suppliers answering bids straight, each with gpus GPUs,
// and the asks a renter's book lists for them.
type gangNet struct {
	sups []*testSupplier
	book func() *Book
}

func newGangNet(t *testing.T, n, gpus int) *gangNet {
	t.Helper()
	now := time.Now
	g := &gangNet{}
	var asks []*Ask
	for range n {
		s := newTestSupplier(t, now, func(c *SupplierConfig) {
			c.GPUs = map[string][]string{"h100-sxm": []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}[:gpus]}
		})
		serveBidsInline(t, s)
		g.sups = append(g.sups, s)
		asks = append(asks, s.ask(t, now()))
	}
	g.book = func() *Book {
		b := NewBook(now)
		for _, a := range asks {
			b.AddAsk(a)
		}
		return b
	}
	return g
}

// renter is a fresh renter whose book lists the net's asks, keeping its
// leases in a store of its own.
func (g *gangNet) renter(t *testing.T) (*Renter, store.Store) {
	t.Helper()
	return g.renterCounted(t, nil)
}

// renterCounted is renter, counting into m.
func (g *gangNet) renterCounted(t *testing.T, m *metrics.Market) (*Renter, store.Store) {
	t.Helper()
	rp := newTestPeer(t, time.Now)
	st := store.NewMemory()
	t.Cleanup(func() { st.Close() })
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: g.book(), Store: st, Now: time.Now, Log: quietLog(), Metrics: m})
	t.Cleanup(r.Close)
	return r, st
}

func (g *gangNet) byID(id peer.ID) *testSupplier {
	for _, s := range g.sups {
		if s.net.Host.ID() == id {
			return s
		}
	}
	return nil
}

func gangReq(nodes int) GangRequest {
	return GangRequest{Nodes: nodes, RentRequest: RentRequest{AllowSimulated: true, AllowUnproven: true,
		Filter: Filter{}, Count: 1, Duration: time.Hour, MaxPrice: 3_000_000, Wait: 20 * time.Second}}
}

// barred reports whether the book refuses renter's proposals now.
func (b *LeaseBook) isBarred(renter peer.ID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.barred[renter]
	return ok && time.Now().Before(until)
}

// supplierRecords counts the supplier's lease records by state and
// reason.
func supplierRecords(t *testing.T, s *testSupplier) map[string]int {
	t.Helper()
	out := map[string]int{}
	codec := store.JSONCodec[LeaseRecord]{}
	err := s.sup.leases.store.Iterate(ksLeases, nil, func(k, v []byte) error {
		rec, err := codec.Unmarshal(v)
		if err != nil {
			return err
		}
		out[string(rec.State)+"|"+rec.Reason]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRentGang: N=3 of 4 suppliers gives 3 leases on distinct suppliers,
// each kept in the renter's store; the spare's reservation is released
// explicitly, its GPUs free at once, and the renter is not barred there:
// it leases there again at once.
func TestRentGang(t *testing.T) {
	g := newGangNet(t, 4, 4)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, rst := g.renterCounted(t, m.Market)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leases, err := r.RentGang(ctx, gangReq(3))
	if err != nil {
		t.Fatalf("gang: %v", err)
	}
	if len(leases) != 3 {
		t.Fatalf("%d leases, want 3", len(leases))
	}
	members := map[peer.ID]bool{}
	for _, l := range leases {
		if members[l.Supplier] {
			t.Errorf("two members on supplier %s", l.Supplier)
		}
		members[l.Supplier] = true
		if sl, err := GetLease(rst, l.ID, time.Now()); err != nil || sl.State != LeaseConfirmed {
			t.Errorf("lease %s kept as %v (%v), want confirmed", l.ID.Short(), sl.State, err)
		}
		if free := g.byID(l.Supplier).sup.Ledger().Free("h100-sxm"); free != 3 {
			t.Errorf("member %s has %d free, want 3", l.Supplier, free)
		}
	}
	var spare *testSupplier
	for _, s := range g.sups {
		if !members[s.net.Host.ID()] {
			spare = s
		}
	}
	// The spare was released before RentGang returned: no waiting for
	// its confirm deadline.
	if free := spare.sup.Ledger().Free("h100-sxm"); free != 4 {
		t.Errorf("the spare has %d free after the gang, want 4", free)
	}
	if got := supplierRecords(t, spare)[string(LeaseReleased)+"|"+ReleasedBeforeConfirmation]; got != 1 {
		t.Errorf("the spare keeps %d leases released before confirmation, want 1: %v", got, supplierRecords(t, spare))
	}
	if spare.sup.Leases().isBarred(r.self) {
		t.Error("the renter is barred at the spare")
	}
	one := gangReq(1)
	one.Prefer = []peer.ID{spare.net.Host.ID()}
	again, err := r.RentGang(ctx, one)
	if err != nil || again[0].Supplier != spare.net.Host.ID() {
		t.Fatalf("lease again at the spare: %v, %v", again, err)
	}

	if n := counter(t, reg, "gpumesh_market_gangs_total", "outcome", "leased"); n != 2 {
		t.Errorf("%v gangs counted leased, want 2", n)
	}
	if n := counter(t, reg, "gpumesh_market_leases_total", "outcome", "withdrawn"); n < 1 {
		t.Errorf("%v reservations counted withdrawn, want the spares", n)
	}

	// ReleaseLeases gives the members back without penalty.
	if err := r.ReleaseLeases(ctx, leases); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		s := g.byID(l.Supplier)
		if free := s.sup.Ledger().Free("h100-sxm"); free != 4 {
			t.Errorf("member %s has %d free after its release, want 4", l.Supplier, free)
		}
		if s.sup.Leases().isBarred(r.self) {
			t.Errorf("renter barred at %s after releasing", l.Supplier)
		}
	}
	if err := r.ReleaseLeases(ctx, leases); err != nil {
		t.Errorf("releasing released leases again: %v, want nil", err)
	}
}

// counter sums the counter name's series whose label is value.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, p := range s.GetLabel() {
				if p.GetName() == label && p.GetValue() == value {
					sum += s.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestRentGangRefused: one of the three suppliers a gang of 3 needs
// refuses its reservation (its GPUs went to another between its quote
// and the proposal): every reservation is released at once, well before
// its confirm deadline, the renter is barred nowhere, and the error names
// the refuser and why.
func TestRentGangRefused(t *testing.T) {
	g := newGangNet(t, 3, 1)
	r, _ := g.renter(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim := g.sups[2]
	taker := ID{1}
	var once sync.Once
	var placed time.Time
	req := gangReq(3)
	req.Spares = -1
	req.RentFor = 2 * time.Second
	req.Wait = 500 * time.Millisecond
	req.Placement = func(qs []*Quote) []*Quote {
		once.Do(func() {
			placed = time.Now()
			if _, err := victim.sup.Ledger().Reserve(taker, "h100-sxm", 1, time.Now().Add(time.Hour)); err != nil {
				t.Error(err)
			}
		})
		return qs
	}
	_, err := r.RentGang(ctx, req)
	var gerr *GangError
	if !errors.As(err, &gerr) {
		t.Fatalf("gang: %v, want a *GangError", err)
	}
	if !strings.Contains(err.Error(), victim.net.Host.ID().String()) || !strings.Contains(err.Error(), string(DeclineBusy)) {
		t.Errorf("error %q does not name the refuser and why", err)
	}
	if gerr.Eligible > 2 || gerr.Nodes != 3 || gerr.Tries < 1 {
		t.Errorf("gang error %+v", gerr)
	}
	// Explicitly released (the records below say so, not lapsed), and
	// so free at once.
	t.Logf("the gang gave up %s after its first placement", time.Since(placed))
	for _, s := range g.sups[:2] {
		if free := s.sup.Ledger().Free("h100-sxm"); free != 1 {
			t.Errorf("%s has %d free after a failed gang, want 1", s.net.Host.ID(), free)
		}
		if s.sup.Leases().isBarred(r.self) {
			t.Errorf("renter barred at %s", s.net.Host.ID())
		}
		if got := supplierRecords(t, s)[string(LeaseReleased)+"|"+ReleasedBeforeConfirmation]; got != 1 {
			t.Errorf("%s: records %v, want one released before confirmation", s.net.Host.ID(), supplierRecords(t, s))
		}
	}
	// The renter can lease there again at once.
	if err := victim.sup.Ledger().Release(taker); err != nil {
		t.Fatal(err)
	}
	req.Placement, req.RentFor = nil, 0
	leases, err := r.RentGang(ctx, req)
	if err != nil || len(leases) != 3 {
		t.Fatalf("gang again: %v, %v", leases, err)
	}
}

// failConfirmed is a store whose writes of a confirmed lease record fail
// while fail is above zero, once each.
type failConfirmed struct {
	store.Store
	fail atomic.Int32
}

func (s *failConfirmed) Put(ks store.Keyspace, key, value []byte) error {
	if ks == ksLeases && bytes.Contains(value, []byte(`"state":"confirmed"`)) && s.fail.Add(-1) >= 0 {
		return errors.New("disk full")
	}
	return s.Store.Put(ks, key, value)
}

// TestRentGangConfirmFails: a member's supplier cannot keep its
// confirmed lease after the others confirmed theirs: those are released
// (the signed release, no bar) and the gang is tried again, and made.
func TestRentGangConfirmFails(t *testing.T) {
	g := &gangNet{}
	now := time.Now
	var asks []*Ask
	flaky := &failConfirmed{Store: store.NewMemory()}
	for i := range 3 {
		s := newTestSupplier(t, now, func(c *SupplierConfig) {
			if i == 2 {
				c.Store = flaky
			}
		})
		serveBidsInline(t, s)
		g.sups = append(g.sups, s)
		asks = append(asks, s.ask(t, now()))
	}
	g.book = func() *Book {
		b := NewBook(now)
		for _, a := range asks {
			b.AddAsk(a)
		}
		return b
	}
	r, rst := g.renter(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	flaky.fail.Store(1)
	req := gangReq(3)
	req.Spares = -1
	leases, err := r.RentGang(ctx, req)
	if err != nil || len(leases) != 3 {
		t.Fatalf("gang: %v, %v", leases, err)
	}
	if flaky.fail.Load() >= 0 {
		t.Fatal("the confirmation never failed")
	}
	for _, s := range g.sups {
		// One GPU for the gang's member, none left held by the first try.
		if free := s.sup.Ledger().Free("h100-sxm"); free != 3 {
			t.Errorf("%s: %d free, want 3", s.net.Host.ID(), free)
		}
		if s.sup.Leases().isBarred(r.self) {
			t.Errorf("renter barred at %s", s.net.Host.ID())
		}
	}
	released := 0
	for _, sl := range mustLeases(t, rst) {
		if sl.State == LeaseReleased {
			released++
		}
	}
	if released != 2 {
		t.Errorf("the renter keeps %d leases released, want the 2 of the first try", released)
	}
}

// mustLeases lists the leases kept in st.
func mustLeases(t *testing.T, st store.Store) []StoredLease {
	t.Helper()
	ls, err := Leases(st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestRentGangContention: two renters each want a gang of two on the
// same two one-GPU suppliers. At most one gets a whole gang; every other
// reservation is released, so no GPU is held but by the winner's leases.
func TestRentGangContention(t *testing.T) {
	g := newGangNet(t, 2, 1)
	r1, _ := g.renter(t)
	r2, _ := g.renter(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		leases []*Lease
		err    error
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, r := range []*Renter{r1, r2} {
		wg.Go(func() {
			req := gangReq(2)
			req.RentFor = 4 * time.Second
			req.Wait = time.Second
			l, err := r.RentGang(ctx, req)
			results[i] = result{l, err}
		})
	}
	wg.Wait()
	winners := 0
	var won []*Lease
	for i, res := range results {
		if res.err == nil {
			winners++
			won = res.leases
			continue
		}
		var gerr *GangError
		if !errors.As(res.err, &gerr) {
			t.Errorf("renter %d: %v, want a *GangError", i, res.err)
		}
	}
	if winners > 1 {
		t.Fatalf("%d complete gangs on two one-GPU suppliers", winners)
	}
	held := map[peer.ID]bool{}
	for _, l := range won {
		held[l.Supplier] = true
	}
	// What a loser reserved is released (or lapses at its confirm deadline
	// if the answer was lost): wait that long at most.
	for _, s := range g.sups {
		want := 1
		if held[s.net.Host.ID()] {
			want = 0
		}
		eventually(t, 2*ConfirmWindow, "no GPU held but by the winner", func() bool {
			return s.sup.Ledger().Free("h100-sxm") == want
		})
	}
	t.Logf("winners: %d (%v, %v)", winners, results[0].err, results[1].err)
}

// reserveQuoted bids for one GPU with r and reserves the first offer.
func reserveQuoted(t *testing.T, ctx context.Context, r *Renter) *reservation {
	t.Helper()
	req := gangReq(1).RentRequest.withDefaults()
	req.Enough = 1
	offers, _, err := r.gangOffers(ctx, req, 1, nil)
	if err != nil || len(offers) == 0 {
		t.Fatalf("no offer: %v", err)
	}
	v, refused, err := r.reserve(ctx, offers[0].Supplier, r.quoteProposal(offers[0], Terms{}))
	if err != nil || refused != "" {
		t.Fatalf("reserve: %v %s", err, refused)
	}
	return v
}

// answerConfirm sends c on v's stream and returns the supplier's answer
// ("" and false when it closed the stream without one).
func answerConfirm(t *testing.T, v *reservation, c *pb.LeaseConfirm) (string, bool) {
	t.Helper()
	defer v.cancel()
	defer v.st.Close()
	if err := p2p.WriteMsg(v.st, c); err != nil {
		t.Fatal(err)
	}
	_ = v.st.CloseWrite()
	var ans pb.LeaseConfirmed
	if err := p2p.ReadMsg(v.st, 1024, &ans); err != nil {
		return "", false
	}
	return ans.Refused, true
}

// TestLeaseConfirmFields: release_id frees the reservation and is
// answered "released before confirmation" without a bar; a LeaseConfirm
// with neither field, both, or another lease's ID lapses as an older
// supplier's would (no answer, the lease lapsed, the renter barred).
func TestLeaseConfirmFields(t *testing.T) {
	cases := []struct {
		name   string
		msg    func(id ID) *pb.LeaseConfirm
		lapses bool
	}{
		{"release_id", func(id ID) *pb.LeaseConfirm { return &pb.LeaseConfirm{ReleaseId: id[:]} }, false},
		{"neither", func(ID) *pb.LeaseConfirm { return &pb.LeaseConfirm{} }, true},
		{"both", func(id ID) *pb.LeaseConfirm { return &pb.LeaseConfirm{LeaseId: id[:], ReleaseId: id[:]} }, true},
		{"another release_id", func(ID) *pb.LeaseConfirm { return &pb.LeaseConfirm{ReleaseId: make([]byte, len(ID{}))} }, true},
		{"malformed release_id", func(ID) *pb.LeaseConfirm { return &pb.LeaseConfirm{ReleaseId: []byte{1, 2, 3}} }, true},
		{"malformed lease_id", func(ID) *pb.LeaseConfirm { return &pb.LeaseConfirm{LeaseId: []byte{1}} }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGangNet(t, 1, 4)
			s := g.sups[0]
			r, _ := g.renter(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			v := reserveQuoted(t, ctx, r)
			id := v.lease.ID
			if free := s.sup.Ledger().Free("h100-sxm"); free != 3 {
				t.Fatalf("%d free while reserved, want 3", free)
			}
			word, answered := answerConfirm(t, v, c.msg(id))
			if c.lapses {
				if answered {
					t.Errorf("answered %q, want no answer", word)
				}
				eventually(t, 20*time.Second, "the renter barred", func() bool { return s.sup.Leases().isBarred(r.self) })
				sl, err := GetLease(s.sup.leases.store, id, time.Now())
				if err != nil || sl.State != LeaseLapsed {
					t.Errorf("the lease is %v (%v), want lapsed", sl.State, err)
				}
				return
			}
			if !answered || word != ReleasedUnconfirmed {
				t.Fatalf("answer %q (%v), want %q", word, answered, ReleasedUnconfirmed)
			}
			if free := s.sup.Ledger().Free("h100-sxm"); free != 4 {
				t.Errorf("%d free after the release, want 4", free)
			}
			if s.sup.Leases().isBarred(r.self) {
				t.Error("renter barred after a release")
			}
			sl, err := GetLease(s.sup.leases.store, id, time.Now())
			if err != nil || sl.State != LeaseReleased || sl.Reason != ReleasedBeforeConfirmation {
				t.Errorf("the lease is %v %q (%v), want released before confirmation", sl.State, sl.Reason, err)
			}
			if _, err := s.sup.Leases().Lease(id); err == nil {
				t.Error("a released reservation is a lease a job may run on")
			}
		})
	}
}

// TestWithdrawalCap: four reservations released within a claim window
// cost the renter nothing; the fifth bars it as a lapse does.
func TestWithdrawalCap(t *testing.T) {
	g := newGangNet(t, 1, 4)
	s := g.sups[0]
	r, _ := g.renter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 1; i <= MaxWithdrawals+1; i++ {
		v := reserveQuoted(t, ctx, r)
		if err := v.release(); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		if barred := s.sup.Leases().isBarred(r.self); barred != (i > MaxWithdrawals) {
			t.Fatalf("after %d releases barred=%v", i, barred)
		}
	}
	if free := s.sup.Ledger().Free("h100-sxm"); free != 4 {
		t.Errorf("%d free, want 4", free)
	}
	_, err := r.RentGang(ctx, func() GangRequest {
		q := gangReq(1)
		q.RentFor = time.Second
		q.Wait = 500 * time.Millisecond
		return q
	}())
	if err == nil || !strings.Contains(err.Error(), string(DeclineUnclaimed)) && !strings.Contains(err.Error(), "refused until") {
		t.Errorf("a barred renter's gang: %v, want refused as barred", err)
	}
}

// TestRentGangReach: with ReachOf known, relay-only and unknown suppliers
// are not eligible, and the error says why.
func TestRentGangReach(t *testing.T) {
	g := newGangNet(t, 3, 1)
	r, _ := g.renter(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reach := map[peer.ID]p2p.Reach{
		g.sups[0].net.Host.ID(): p2p.ReachPunchable,
		g.sups[1].net.Host.ID(): p2p.ReachRelayOnly,
		g.sups[2].net.Host.ID(): p2p.ReachUnknown,
	}
	req := gangReq(2)
	req.ReachOf = func(p peer.ID) p2p.Reach { return reach[p] }
	req.RentFor = time.Second
	req.Wait = 500 * time.Millisecond
	_, err := r.RentGang(ctx, req)
	var gerr *GangError
	if !errors.As(err, &gerr) || gerr.Eligible != 1 || !strings.Contains(err.Error(), "relay-only") {
		t.Fatalf("gang: %v, want a GangError with 1 eligible, naming relay-only", err)
	}
	reach[g.sups[2].net.Host.ID()] = p2p.ReachPublic
	req.RentFor = 0
	leases, err := r.RentGang(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Public before punchable.
	if leases[0].Supplier != g.sups[2].net.Host.ID() {
		t.Errorf("first member %s, want the public supplier", leases[0].Supplier)
	}
}

func TestRentGangBadRequest(t *testing.T) {
	g := newGangNet(t, 1, 1)
	r, _ := g.renter(t)
	for _, n := range []int{0, -1, MaxGangNodes + 1} {
		if _, err := r.RentGang(context.Background(), gangReq(n)); err == nil {
			t.Errorf("%d nodes: no error", n)
		}
	}
}
