package market_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
)

// profiles is what a node knows of suppliers, as market.Trust sees it: the
// GPU UUIDs each one's valid profile lists per model, and reputations.
// The node's own Trust (node/trust.go) reads the same from signed
// profiles and attestations; node/trust_test.go runs it end to end.
type profiles struct {
	gpus map[peer.ID]map[string][]string // supplier -> model -> UUIDs
	rep  map[peer.ID]float64
}

func (p *profiles) ProfileHas(s peer.ID, model string, uuids []string, count int) bool {
	have := p.gpus[s][model]
	if len(have) < count || len(have) == 0 {
		return false
	}
	for _, u := range uuids {
		found := false
		for _, h := range have {
			found = found || h == u
		}
		if !found {
			return false
		}
	}
	return true
}

func (p *profiles) Reputation(s peer.ID) (float64, bool) {
	r, ok := p.rep[s]
	if !ok {
		return 0.5, false
	}
	return r, true
}

// tradeOf is the validated trade print of a lease of one GPU of model.
func tradeOf(supplier, renter peer.ID, model, uuid string, price int64, at time.Time, n int) *market.TradePrint {
	l := &pb.Lease{Model: model, Count: 1, PriceMicros: price, GpuUuids: []string{uuid},
		StartMs: at.UnixMilli(), EndMs: at.Add(time.Hour).UnixMilli()}
	return &market.TradePrint{Supplier: supplier, Lease: &market.Lease{Lease: l, ID: testID("lease", supplier, renter, n), Supplier: supplier, Renter: renter}}
}

func TestPriceIndexCountsBelievedPrintsOncePerPair(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	honest, other, third, sybil, shunned := peer.ID("honest"), peer.ID("other"), peer.ID("third"), peer.ID("sybil"), peer.ID("shunned")
	renter := peer.ID("renter")
	tr := &profiles{
		gpus: map[peer.ID]map[string][]string{
			honest:  {"l4": {"GPU-h1"}},
			other:   {"l4": {"GPU-o1"}},
			third:   {"l4": {"GPU-t1"}},
			shunned: {"l4": {"GPU-s1"}},
		},
		rep: map[peer.ID]float64{honest: 0.7, other: 0.6, third: 0.5, shunned: 0.2},
	}
	x := market.NewPriceIndex(clk.Now, 0, market.WithTrust(tr, market.DefaultTrustFloor))
	add := func(tp *market.TradePrint) {
		t.Helper()
		if !x.AddPrint(tp) {
			t.Fatalf("AddPrint(%s at %d) = false", tp.Supplier, tp.Lease.PriceMicros)
		}
	}
	n := 0
	next := func() int { n++; return n }
	// One supplier and renter trading three times within an hour: one
	// trade. A fourth trade an hour later counts.
	for i := range 3 {
		add(tradeOf(honest, renter, "l4", "GPU-h1", 1_000_000, now.Add(-3*time.Hour+time.Duration(i)*time.Minute), next()))
	}
	add(tradeOf(honest, renter, "l4", "GPU-h1", 1_000_000, now.Add(-2*time.Hour), next()))
	// Prints of a key with no profile, of GPUs a profile does not list,
	// and of a supplier below the floor do not count.
	for i := range 15 {
		add(tradeOf(sybil, peer.ID(fmt.Sprint("r", i)), "l4", "GPU-x", 50_000_000, now.Add(-time.Hour), next()))
	}
	add(tradeOf(other, renter, "l4", "GPU-not-mine", 50_000_000, now.Add(-time.Hour), next()))
	add(tradeOf(shunned, renter, "l4", "GPU-s1", 50_000_000, now.Add(-time.Hour), next()))
	pp, ok := x.Get("l4")
	if !ok || pp.Trades != 2 || pp.MedianMicros != 1_000_000 || pp.MaxMicros != 1_000_000 {
		t.Fatalf("Get = %+v, %v; want 2 trades at 1.00", pp, ok)
	}
	if held := x.Held("l4"); held != 21 {
		t.Fatalf("Held = %d, want 21 (every print kept, counted or not)", held)
	}
	// A supplier printing many trades with many renters is one voice:
	// the median is that of the suppliers' medians.
	for i := range 5 {
		add(tradeOf(other, peer.ID(fmt.Sprint("buyer", i)), "l4", "GPU-o1", 9_000_000, now.Add(-30*time.Minute), next()))
	}
	add(tradeOf(third, renter, "l4", "GPU-t1", 2_000_000, now.Add(-30*time.Minute), next()))
	if m := x.Median("l4"); m != 2_000_000 {
		t.Fatalf("Median = %d, want 2000000: the middle of the suppliers' medians 1.00, 2.00, 9.00", m)
	}
	// A print kept aside counts once its supplier's profile lists the GPU
	// and its reputation is known.
	tr.gpus[sybil] = map[string][]string{"l4": {"GPU-x"}}
	tr.rep[sybil] = 0.5
	if pp, _ := x.Get("l4"); pp.Trades != 2+5+1+15 {
		t.Fatalf("after the sybil's profile arrived: %d trades, want 23", pp.Trades)
	}
}

// TestPriceIndexIgnoresUnknownSuppliers: fake supplier–renter pairs with
// self-signed profiles and no attestations score the default 0.5, the
// floor, and still do not move the median.
func TestPriceIndexIgnoresUnknownSuppliers(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	honest := peer.ID("honest")
	tr := &profiles{gpus: map[peer.ID]map[string][]string{honest: {"l4": {"GPU-h1"}}}, rep: map[peer.ID]float64{honest: 0.6}}
	x := market.NewPriceIndex(clk.Now, 0, market.WithTrust(tr, market.DefaultTrustFloor))
	x.AddPrint(tradeOf(honest, "renter", "l4", "GPU-h1", 1_000_000, now.Add(-time.Hour), 0))
	for i := range 5 {
		fake := peer.ID(fmt.Sprint("fake", i))
		tr.gpus[fake] = map[string][]string{"l4": {"GPU-f"}}
		x.AddPrint(tradeOf(fake, peer.ID(fmt.Sprint("r", i)), "l4", "GPU-f", 90_000_000, now.Add(-time.Hour), i+1))
	}
	if pp, ok := x.Get("l4"); !ok || pp.Trades != 1 || pp.MedianMicros != 1_000_000 {
		t.Fatalf("Get = %+v, %v; want only the known supplier's trade at 1.00", pp, ok)
	}
}

// TestPriceIndexBoundsPendingAcrossModels: prints nobody believes, spread
// over many made-up models, are held at most MaxPendingPrints in all, the
// oldest dropped first, and Prune drops every model's stale prints.
func TestPriceIndexBoundsPendingAcrossModels(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, time.Hour, market.WithTrust(&profiles{}, market.DefaultTrustFloor))
	const models = 50
	per := market.MaxPendingPrints / models * 2
	for m := range models {
		for i := range per {
			at := now.Add(-50*time.Minute + time.Duration(m*per+i)*time.Millisecond)
			x.AddPrint(tradeOf(peer.ID(fmt.Sprint("s", m)), "r", fmt.Sprint("m", m), "GPU", 1_000_000, at, m*per+i))
		}
	}
	total := 0
	for m := range models {
		total += x.Held(fmt.Sprint("m", m))
	}
	if total != market.MaxPendingPrints {
		t.Fatalf("%d prints held across %d models, want at most %d", total, models, market.MaxPendingPrints)
	}
	if x.Held("m0") != 0 || x.Held(fmt.Sprint("m", models-1)) != per {
		t.Fatalf("held: oldest model %d, newest %d; want the oldest dropped first", x.Held("m0"), x.Held(fmt.Sprint("m", models-1)))
	}
	clk.Advance(time.Hour)
	x.Prune()
	x.AddPrint(tradeOf("s", "r", "fresh", "GPU", 1_000_000, clk.Now(), 1<<20))
	if got := x.HeldAll(); got != 1 {
		t.Fatalf("after Prune: %d prints held, want 1", got)
	}
}

func TestPriceIndexWithoutTrustCountsEveryPrint(t *testing.T) {
	clk := newManualClock()
	x := market.NewPriceIndex(clk.Now, 0)
	for i := range 3 {
		x.AddPrint(tradeOf("s", "r", "l4", "GPU-1", 1_000_000, clk.Now().Add(-time.Duration(i)*2*time.Hour), i))
	}
	if pp, _ := x.Get("l4"); pp.Trades != 3 {
		t.Fatalf("Trades = %d, want 3", pp.Trades)
	}
}

// relayBids adds n bids from distinct renters through relay, created at
// base + i ms, and fails on any refusal.
func relayBids(t *testing.T, b *market.Book, relay peer.ID, n int, base time.Time) {
	t.Helper()
	for i := range n {
		x := mkBid(t, peer.ID(fmt.Sprint(relay, "-renter-", i)), "model=l4", base.Add(time.Duration(i)*time.Millisecond), time.Hour)
		if err := b.AddBidFrom(x, relay); err != nil {
			t.Fatalf("bid %d via %s: %v", i, relay, err)
		}
	}
}

func TestBookCapsBidsPerRelayAuthorAndInAll(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	// One renter: at most MaxBidsPerRenter live bids.
	for i := range market.MaxBidsPerRenter {
		if err := b.AddBidFrom(mkBid(t, "flooder", fmt.Sprint("model=l4 count>=", i+1), now, time.Hour), "r0"); err != nil {
			t.Fatal(err)
		}
	}
	// The relay that delivered all of them floods; another relay may
	// merely have heard the bid by another path.
	if err := b.AddBidFrom(mkBid(t, "flooder", "model=t4", now, time.Hour), "r0"); !errors.Is(err, market.ErrRelayFlood) {
		t.Fatalf("bid over the renter's cap from the relay of all its bids: %v, want ErrRelayFlood", err)
	}
	if err := b.AddBidFrom(mkBid(t, "flooder", "model=t4 count>=2", now, time.Hour), "r1"); !errors.Is(err, market.ErrAuthorCap) || errors.Is(err, market.ErrRelayFlood) {
		t.Fatalf("bid over the renter's cap from another relay: %v, want ErrAuthorCap only", err)
	}
	// One relay: at most MaxBidsPerRelay.
	relayBids(t, b, "a", market.MaxBidsPerRelay, now)
	if err := b.AddBidFrom(mkBid(t, "one-more", "model=l4", now, time.Hour), "a"); !errors.Is(err, market.ErrBookFull) {
		t.Fatalf("bid over the relay's cap: %v, want ErrBookFull", err)
	}
	// Fill the book: b and c hold fewer than a.
	relayBids(t, b, "b", market.MaxBidsPerRelay-1, now)
	relayBids(t, b, "c", market.MaxBidsPerRelay-1, now)
	relayBids(t, b, "d", market.MaxBids-market.MaxBidsPerRenter-market.MaxBidsPerRelay-2*(market.MaxBidsPerRelay-1), now)
	if _, bids := b.Held(); bids != market.MaxBids {
		t.Fatalf("book holds %d bids, want it full at %d", bids, market.MaxBids)
	}
	// A new bid from another relay evicts the oldest of the largest.
	if err := b.AddBidFrom(mkBid(t, "honest", "model=l4", now, time.Hour), "e"); err != nil {
		t.Fatalf("bid of a new source into a full book: %v", err)
	}
	if _, fromA := b.HeldFrom("a"); fromA != market.MaxBidsPerRelay-1 {
		t.Fatalf("the largest source holds %d bids after an eviction, want %d", fromA, market.MaxBidsPerRelay-1)
	}
	if _, bids := b.Held(); bids != market.MaxBids {
		t.Fatalf("book holds %d bids, want %d", bids, market.MaxBids)
	}
	// The largest source cannot evict its own. d, small, evicts from a,
	// then from b (tied with c, the smaller ID goes first): c is then the
	// largest alone, and refused.
	for i := range 2 {
		if err := b.AddBidFrom(mkBid(t, peer.ID(fmt.Sprint("d-more-", i)), "model=l4", now, time.Hour), "d"); err != nil {
			t.Fatalf("bid of a small source into a full book: %v", err)
		}
	}
	for r, want := range map[peer.ID]int{"a": market.MaxBidsPerRelay - 2, "b": market.MaxBidsPerRelay - 2, "c": market.MaxBidsPerRelay - 1} {
		if _, n := b.HeldFrom(r); n != want {
			t.Fatalf("relay %s holds %d bids, want %d", r, n, want)
		}
	}
	largest := peer.ID("c")
	if err := b.AddBidFrom(mkBid(t, "largest-more", "model=l4", now, time.Hour), largest); !errors.Is(err, market.ErrBookFull) {
		t.Fatalf("bid of the largest source into a full book: %v, want ErrBookFull", err)
	}
	// Expired bids make room again.
	clk.Advance(2 * time.Hour)
	if err := b.AddBidFrom(mkBid(t, "later", "model=l4", clk.Now(), time.Hour), largest); err != nil {
		t.Fatalf("bid after the others expired: %v", err)
	}
}

// TestBookCapsAsksAcrossModels: model names are free, so one relay
// spreading asks over made-up models is held to MaxAsksPerRelayAll, and
// the book to MaxAsks in all; a new relay's asks then evict the oldest of
// the largest relaying source.
func TestBookCapsAsksAcrossModels(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	n := 0
	add := func(relay peer.ID) error {
		n++
		a := mkAsk(askSpec{supplier: peer.ID(fmt.Sprint("s", n)), model: fmt.Sprint("model-", n), price: 100_000, created: now.Add(time.Duration(n) * time.Millisecond)})
		return b.AddAskFrom(a, relay)
	}
	for i := range market.MaxAsksPerRelayAll {
		if err := add("relay-0"); err != nil {
			t.Fatalf("ask %d of relay-0: %v", i, err)
		}
	}
	if err := add("relay-0"); !errors.Is(err, market.ErrBookFull) {
		t.Fatalf("ask past relay-0's cap across models: %v, want ErrBookFull", err)
	}
	// Four more relays: the book fills up, and then each new ask evicts
	// the oldest of the largest source, until the sources are even.
	for r := 1; r <= 4; r++ {
		relay := peer.ID(fmt.Sprint("relay-", r))
		for range market.MaxAsksPerRelayAll {
			if err := add(relay); err != nil && !errors.Is(err, market.ErrBookFull) {
				t.Fatalf("ask of %s: %v", relay, err)
			}
		}
	}
	if asks, _ := b.Held(); asks != market.MaxAsks {
		t.Fatalf("book holds %d asks, want %d", asks, market.MaxAsks)
	}
	for r := range 5 {
		if got, _ := b.HeldFrom(peer.ID(fmt.Sprint("relay-", r))); got < market.MaxAsks/5-1 || got > market.MaxAsks/5+1 {
			t.Fatalf("relay-%d holds %d asks, want %d±1: the largest source gives way", r, got, market.MaxAsks/5)
		}
	}
}

func TestBookListsOnlyProfiledAsksAndEvictsUnlistedFirst(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	tr := &profiles{gpus: map[peer.ID]map[string][]string{"real": {"l4": make([]string, 8)}}}
	b := market.NewBook(clk.Now, market.WithBookTrust(tr))
	// Fill the model with asks of keys without a profile, from four relays.
	for i := range market.MaxAsksPerModel {
		a := mkAsk(askSpec{supplier: peer.ID(fmt.Sprint("sybil-", i)), model: "l4", price: 100_000, created: now.Add(time.Duration(i) * time.Millisecond)})
		if err := b.AddAskFrom(a, peer.ID(fmt.Sprint("relay-", i%4))); err != nil {
			t.Fatalf("ask %d: %v", i, err)
		}
	}
	if got := b.Asks("l4"); len(got) != 0 {
		t.Fatalf("%d asks of keys without a profile are listed", len(got))
	}
	if asks, _ := b.Len(); asks != 0 {
		t.Fatalf("Len counts %d unlisted asks", asks)
	}
	// A profiled supplier's ask takes the place of the oldest unlisted one.
	real := mkAsk(askSpec{supplier: "real", model: "l4", price: 2_000_000, created: now.Add(time.Second)})
	if err := b.AddAskFrom(real, "relay-9"); err != nil {
		t.Fatalf("profiled ask into a full model: %v", err)
	}
	if got := b.Asks("l4"); len(got) != 1 || got[0].Supplier != "real" {
		t.Fatalf("listed asks = %v, want only the profiled supplier's", askIDs(got))
	}
	if _, ok := b.Ask(mkAsk(askSpec{supplier: "sybil-0", model: "l4", price: 100_000, created: now}).ID); ok {
		t.Fatal("the oldest unlisted ask was not the one evicted")
	}
	if asks, _ := b.Held(); asks != market.MaxAsksPerModel {
		t.Fatalf("book holds %d asks, want %d", asks, market.MaxAsksPerModel)
	}
	// An ask more than the profile has GPUs for is not listed either.
	big := mkAsk(askSpec{supplier: "real", model: "l4", price: 1_000_000, created: now.Add(2 * time.Second)})
	big.Count = 9
	if err := b.AddAskFrom(big, "relay-9"); err != nil {
		t.Fatal(err)
	}
	if got := b.Asks("l4"); len(got) != 0 {
		t.Fatalf("an ask of 9 GPUs by a supplier with 8 is listed")
	}
}

// TestPriceIndexPrints: Prints lists the prints that count (a believed
// supplier's, once per pair and hour), oldest first, with the signed
// print kept; an unknown supplier's print is not listed until it is
// believed.
func TestPriceIndexPrints(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	honest, unknown := peer.ID("honest"), peer.ID("unknown")
	tr := &profiles{gpus: map[peer.ID]map[string][]string{honest: {"l4": {"GPU-h1"}}, unknown: {"a100": {"GPU-u1"}}},
		rep: map[peer.ID]float64{honest: 0.7}}
	x := market.NewPriceIndex(clk.Now, 0, market.WithTrust(tr, market.DefaultTrustFloor))
	late := tradeOf(honest, "r1", "l4", "GPU-h1", 2_000_000, now.Add(-10*time.Minute), 1)
	late.Raw = []byte("signed print 1")
	early := tradeOf(honest, "r2", "l4", "GPU-h1", 1_000_000, now.Add(-20*time.Minute), 2)
	same := tradeOf(honest, "r2", "l4", "GPU-h1", 1_500_000, now.Add(-15*time.Minute), 3) // same pair within the hour
	for _, tp := range []*market.TradePrint{late, early, same, tradeOf(unknown, "r3", "a100", "GPU-u1", 9_000_000, now.Add(-5*time.Minute), 4)} {
		x.AddPrint(tp)
	}
	ps := x.Prints("")
	if len(ps) != 2 || ps[0].PriceMicros != 1_000_000 || ps[1].PriceMicros != 2_000_000 || string(ps[1].Raw) != "signed print 1" ||
		ps[1].Supplier != honest || ps[1].Model != "l4" || ps[1].LeaseID != late.Lease.ID || ps[1].GPUHours != 1 {
		t.Fatalf("Prints = %+v, want the two counted prints oldest first", ps)
	}
	if ps := x.Prints("a100"); len(ps) != 0 {
		t.Fatalf("Prints(a100) = %+v before its supplier is believed", ps)
	}
	tr.rep[unknown] = 0.6
	if ps := x.Prints("a100"); len(ps) != 1 || ps[0].Supplier != unknown {
		t.Fatalf("Prints(a100) = %+v once believed", ps)
	}
}
