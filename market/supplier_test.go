package market

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/p2ptest"
	"github.com/gpumesh/gpumesh/store"
)

// Tests of the supplier and renter over real libp2p hosts on loopback.

// manualClock is a clock that moves only when told, so that a token
// bucket's refill is exact whatever the machine's load.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testPeer is a libp2p host with GossipSub and the orders topic joined.
type testPeer struct {
	key    crypto.PrivKey
	net    *p2p.Network
	orders *p2p.Topic[Order]
}

func newTestPeer(t *testing.T, now func() time.Time) *testPeer {
	t.Helper()
	key := newTestKey(t)
	n, err := p2p.New(p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PubSub: true, Now: now, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	orders, err := p2p.JoinTopic(n.PubSub, n.Host.ID(), OrdersTopic, NewOrderValidator(now, 100, 200).Check, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orders.Close() })
	return &testPeer{key: key, net: n, orders: orders}
}

func (p *testPeer) info() peer.AddrInfo {
	return peer.AddrInfo{ID: p.net.Host.ID(), Addrs: p.net.Host.Addrs()}
}

func (p *testPeer) connect(t *testing.T, to *testPeer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.net.Host.Connect(ctx, to.info()); err != nil {
		t.Fatal(err)
	}
}

// testSupplier sells four simulated h100-sxm at 2.00 a GPU-hour.
type testSupplier struct {
	*testPeer
	sup *Supplier
}

func newTestSupplier(t *testing.T, now func() time.Time, opts ...func(*SupplierConfig)) *testSupplier {
	t.Helper()
	p := newTestPeer(t, now)
	trades, err := p2p.JoinTopic(p.net.PubSub, p.net.Host.ID(), TradesTopic, NewTradeValidator(now, 100, 200).Check, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trades.Close() })
	cfg := SupplierConfig{
		Net: p.net, Key: p.key, Store: store.NewMemory(), Orders: p.orders, Trades: trades,
		Book: NewBook(now), Index: NewPriceIndex(now, time.Hour),
		Pricer: Pricer{Mode: Fixed, List: map[string]money.Micros{"h100-sxm": 2_000_000}},
		GPUs:   map[string][]string{"h100-sxm": {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}},
		Describe: func(m string) Offer {
			return Offer{PeerID: p.net.Host.ID().String(), Model: m, Region: "eu-west", Simulated: true}
		},
		Region: "eu-west", Now: now, Log: quietLog(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	sup, err := NewSupplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testSupplier{testPeer: p, sup: sup}
}

// answerBids hands the bids gossiped to s to HandleBid, as a node does.
func (s *testSupplier) answerBids(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			msg, err := s.orders.Next(ctx)
			if err != nil {
				return
			}
			if b, ok := msg.Value.(*Bid); ok {
				go s.sup.HandleBid(ctx, b)
			}
		}
	}()
}

// ask is p's signed ask for four h100-sxm at 2.00, fixed, listing its
// own addresses.
func (p *testPeer) ask(t *testing.T, now time.Time) *Ask {
	t.Helper()
	return p.askIn(t, now, Fixed)
}

// askIn is p's ask as ask makes it, in the pricing mode given.
func (p *testPeer) askIn(t *testing.T, now time.Time, mode PricingMode) *Ask {
	t.Helper()
	a := &pb.Ask{
		Nonce: nonce(), CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(10 * time.Minute).UnixMilli(),
		Model: "h100-sxm", Count: 4, PriceMicros: 2_000_000, Region: "eu-west",
		MinDurationS: 60, MaxDurationS: 30 * 24 * 3600, Pricing: string(mode), Simulated: true,
	}
	for _, addr := range p.net.Host.Addrs() {
		a.Addrs = append(a.Addrs, addr.Bytes())
	}
	raw := mustSeal(t)(SealAsk(a, p.key))
	ask, err := OpenAsk(raw, now)
	if err != nil {
		t.Fatal(err)
	}
	return ask
}

// testBid is a valid bid by key for one h100-sxm for an hour at up to
// 3.00, listing addrs as where to deliver quotes.
func testBid(t *testing.T, key crypto.PrivKey, now time.Time, addrs ...ma.Multiaddr) *Bid {
	t.Helper()
	b := &pb.Bid{
		Nonce: nonce(), CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
		Filter: "model=h100-sxm", Count: 1, DurationS: 3600, MaxPriceMicros: 3_000_000,
	}
	for _, a := range addrs {
		b.Addrs = append(b.Addrs, a.Bytes())
	}
	bid, err := OpenBid(mustSeal(t)(SealBid(b, key)), now)
	if err != nil {
		t.Fatal(err)
	}
	return bid
}

// quoteCounter receives quotes on a host, as a renter does, and counts
// them by bid.
type quoteCounter struct {
	mu    sync.Mutex
	byBid map[ID]int
	total int
}

func countQuotes(t *testing.T, p *testPeer, now func() time.Time) *quoteCounter {
	t.Helper()
	c := &quoteCounter{byBid: map[ID]int{}}
	p2p.Serve(p.net.Host, QuoteProtocol, func(st network.Stream) error {
		raw, err := p2p.ReadRaw(st, QuoteType.MaxSize)
		if err != nil {
			return err
		}
		q, err := OpenQuote(raw, now())
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.byBid[q.BidID]++
		c.total++
		c.mu.Unlock()
		return nil
	})
	return c
}

func (c *quoteCounter) forBid(bid ID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byBid[bid]
}

func (c *quoteCounter) all() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// TestQuotesAreNotReflected: 100 bids signed by attacker keys with no
// connection to the suppliers list a third party's TCP listener as where
// to deliver quotes. Three suppliers answer none of them and never connect
// to the listener, while a bidder connected to them gets its quotes.
func TestQuotesAreNotReflected(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	victim := p2ptest.Listen(t)
	var sups []*testSupplier
	for range 3 {
		sups = append(sups, newTestSupplier(t, clk.Now))
	}
	honest := newTestPeer(t, clk.Now)
	got := countQuotes(t, honest, clk.Now)
	for _, s := range sups {
		honest.connect(t, s.testPeer)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range 100 {
		// A fresh key per bid, or a supplier's dial backoff for the one
		// attacker peer would hide how many connections it makes.
		bid := testBid(t, newTestKey(t), clk.Now(), victim.Multiaddr())
		for _, s := range sups {
			wg.Add(1)
			go func() { defer wg.Done(); s.sup.HandleBid(ctx, bid) }()
		}
	}
	// The honest bidder lists the victim too: a bid's addresses are never
	// dialled, even those of a bidder that is connected.
	bid := testBid(t, honest.key, clk.Now(), victim.Multiaddr())
	for _, s := range sups {
		wg.Add(1)
		go func() { defer wg.Done(); s.sup.HandleBid(ctx, bid) }()
	}
	wg.Wait()
	if n := victim.Others(t); n != 0 {
		t.Fatalf("the suppliers opened %d connections to the address the bids listed, want 0", n)
	}
	eventually(t, 30*time.Second, "the connected bidder's three quotes", func() bool {
		return got.forBid(bid.ID) == len(sups)
	})
}

// TestBidWaitsForItsAuthorsConnection: a bid that comes round by gossip
// before the supplier's side of its author's connection is up waits for
// the connection (BidderConnectGrace), and its quote goes back over it.
func TestBidWaitsForItsAuthorsConnection(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	s := newTestSupplier(t, clk.Now)
	bidder := newTestPeer(t, clk.Now)
	got := countQuotes(t, bidder, clk.Now)
	bid := testBid(t, bidder.key, clk.Now(), bidder.net.Host.Addrs()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	handled := make(chan struct{})
	go func() { defer close(handled); s.sup.HandleBid(ctx, bid) }()
	time.Sleep(BidderConnectGrace / 4) // the bid is in before the connection
	bidder.connect(t, s.testPeer)
	<-handled
	eventually(t, 30*time.Second, "the quote over the connection that came after the bid", func() bool {
		return got.forBid(bid.ID) == 1
	})
}

// TestQuotesCappedPerBidder: a connected bidder that publishes 100 bids
// gets QuotesPerBidder answers, then one more per QuoteRefill.
func TestQuotesCappedPerBidder(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	s := newTestSupplier(t, clk.Now)
	bidder := newTestPeer(t, clk.Now)
	got := countQuotes(t, bidder, clk.Now)
	bidder.connect(t, s.testPeer)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One after the other, so that the bidder's streams stay within the
	// resource manager's limits per peer and protocol.
	for range 100 {
		s.sup.HandleBid(ctx, testBid(t, bidder.key, clk.Now(), bidder.net.Host.Addrs()...))
	}
	eventually(t, 30*time.Second, fmt.Sprintf("%d quotes", QuotesPerBidder), func() bool {
		return got.all() >= QuotesPerBidder
	})
	// One refill later, one more bid is answered: once its quote is in,
	// every quote sent before it is in too (same connection, sent first).
	clk.Advance(QuoteRefill)
	last := testBid(t, bidder.key, clk.Now(), bidder.net.Host.Addrs()...)
	s.sup.HandleBid(ctx, last)
	eventually(t, 30*time.Second, "the quote after a refill", func() bool {
		return got.forBid(last.ID) == 1
	})
	if total := got.all(); total != QuotesPerBidder+1 {
		t.Fatalf("the bidder got %d quotes for 101 bids, want %d", total, QuotesPerBidder+1)
	}
}

// gossipRelay starts a bare libp2p host that relays the market topics and
// speaks no DHT, so that the peers connected to it learn of each other
// only through gossip.
func gossipRelay(t *testing.T) *testPeer {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); h.Close() })
	// A node of this release: it signs nothing and reads unsigned
	// messages (docs/PROTOCOL.md §7).
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithMessageSigning(false), pubsub.WithStrictSignatureVerification(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{OrdersTopic, TradesTopic} {
		topic, err := ps.Join(name, pubsub.WithTopicMessageIdFn(p2p.ContentMsgID))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topic.Subscribe(); err != nil {
			t.Fatal(err)
		}
	}
	return &testPeer{net: &p2p.Network{Host: h}}
}

// waitGossipPath publishes asks from until one reaches to: GossipSub
// forwards only to the mesh of the moment, and a relay that has not yet
// grafted a peer would drop a message for it.
func waitGossipPath(t *testing.T, from, to *testPeer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := from.orders.Publish(ctx, from.ask(t, time.Now()).Raw)
		for err == nil {
			var msg p2p.Message[Order]
			if msg, err = to.orders.Next(ctx); err == nil && msg.Author == from.net.Host.ID() {
				cancel()
				return
			}
		}
		cancel()
	}
	t.Fatal("timed out waiting for gossip to go from the renter through the relay to the supplier")
}

// TestRentConnectsBeforeBidding: a renter and a supplier share a gossip
// relay but no connection. The renter, which has the supplier's ask in its
// book, connects to it before publishing its bid, so that the supplier's
// quote comes back over that connection and the lease is made.
func TestRentConnectsBeforeBidding(t *testing.T) {
	now := time.Now
	s := newTestSupplier(t, now)
	rp := newTestPeer(t, now)
	relay := gossipRelay(t)
	s.connect(t, relay)
	rp.connect(t, relay)
	waitGossipPath(t, rp, s.testPeer)
	s.answerBids(t)
	if rp.net.Host.Network().Connectedness(s.net.Host.ID()) == network.Connected {
		t.Fatal("renter connected to the supplier before renting")
	}
	book := NewBook(now)
	book.AddAsk(s.ask(t, now()))
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	l := rentH100(t, r)
	if l.Supplier != s.net.Host.ID() || l.PriceMicros != 2_000_000 {
		t.Fatalf("lease from %s at %d, want %s at 2000000", l.Supplier, l.PriceMicros, s.net.Host.ID())
	}
}

// TestRentAsksAuctionSupplierAboveMax: an auction supplier's ask shows
// its list price, above the renter's maximum, but it quotes down to its
// floor; so the renter connects to it and leases at its maximum, while a
// fixed-price supplier asking the same is priced out and not dialled.
func TestRentAsksAuctionSupplierAboveMax(t *testing.T) {
	now := time.Now
	relay := gossipRelay(t)
	auction := newTestSupplier(t, now, func(c *SupplierConfig) {
		c.Pricer = Pricer{Mode: Auction, List: map[string]money.Micros{"h100-sxm": 2_000_000}, Floor: map[string]money.Micros{"h100-sxm": 1_400_000}}
	})
	fixed := newTestSupplier(t, now)
	rp := newTestPeer(t, now)
	for _, p := range []*testPeer{auction.testPeer, fixed.testPeer, rp} {
		p.connect(t, relay)
	}
	waitGossipPath(t, rp, auction.testPeer)
	auction.answerBids(t)
	fixed.answerBids(t)
	book := NewBook(now)
	book.AddAsk(auction.askIn(t, now(), Auction))
	book.AddAsk(fixed.ask(t, now()))
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	l := rentH100At(t, r, 1_500_000)
	if l.Supplier != auction.net.Host.ID() || l.PriceMicros != 1_500_000 {
		t.Fatalf("lease from %s at %d, want the auction supplier %s at 1500000", l.Supplier, l.PriceMicros, auction.net.Host.ID())
	}
	if c := rp.net.Host.Network().Connectedness(fixed.net.Host.ID()); c == network.Connected {
		t.Fatal("the renter dialled the fixed-price supplier whose ask is above its maximum")
	}
}

// rentH100 rents one h100-sxm for an hour at up to 3.00 through r, from
// unproven suppliers too, collecting quotes up to 30 s; it fails the
// test when no lease is made.
func rentH100(t *testing.T, r *Renter) *Lease {
	t.Helper()
	return rentH100At(t, r, 3_000_000)
}

// rentH100At is rentH100 at up to maxPrice micros a GPU-hour.
func rentH100At(t *testing.T, r *Renter, maxPrice money.Micros) *Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := r.Rent(ctx, RentRequest{AllowSimulated: true, AllowUnproven: true,
		Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
		MaxPrice: maxPrice, Wait: 30 * time.Second, Enough: 1,
	})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	return l
}

// TestCheapUnprovenAsksDoNotCrowdOutProvenSupplier: 40 asks of fresh
// keys, cheaper than a proven supplier's, listing many addresses, do not
// take the connection slots before bidding: the renter connects to the
// proven supplier whether or not it allows unproven ones.
func TestCheapUnprovenAsksDoNotCrowdOutProvenSupplier(t *testing.T) {
	now := time.Now
	s := newTestSupplier(t, now)
	var asks []*Ask
	for i := range 40 {
		key := newTestKey(t)
		a := &pb.Ask{
			Nonce: nonce(), CreatedMs: now().UnixMilli(), ExpiresMs: now().Add(10 * time.Minute).UnixMilli(),
			Model: "h100-sxm", Count: 4, PriceMicros: 100_000 + int64(i), Region: "eu-west",
			MinDurationS: 60, MaxDurationS: 3600 * 24, Pricing: string(Fixed),
		}
		for p := range 16 {
			a.Addrs = append(a.Addrs, ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 1+p)).Bytes())
		}
		ask, err := OpenAsk(mustSeal(t)(SealAsk(a, key)), now())
		if err != nil {
			t.Fatal(err)
		}
		asks = append(asks, ask)
	}
	asks = append(asks, s.ask(t, now()))
	supplier := s.net.Host.ID()
	for _, allow := range []bool{false, true} {
		// A renter of its own per case: one that closed its connection
		// in the case before could meet that connection's teardown.
		rp := newTestPeer(t, now)
		r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Now: now, Log: quietLog()})
		r.connectSuppliers(context.Background(), asks, RentRequest{AllowSimulated: true,
			Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour, MaxPrice: 3_000_000,
			Proven: func(p peer.ID) bool { return p == supplier }, AllowUnproven: allow,
		})
		if rp.net.Host.Network().Connectedness(supplier) != network.Connected {
			t.Fatalf("AllowUnproven %v: the renter did not connect to the proven supplier", allow)
		}
		if n := len(rp.net.Host.Peerstore().Addrs(asks[0].Supplier)); n > maxDialAddrs {
			t.Fatalf("AllowUnproven %v: %d addresses of a fresh key's ask dialled, want at most %d", allow, n, maxDialAddrs)
		}
	}
}

func mustParseFilter(t *testing.T, s string) Filter {
	t.Helper()
	f, err := ParseFilter(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// twoListedSuppliers is a renter and two answering suppliers that share
// a gossip relay, with the suppliers' asks in the renter's book.
func twoListedSuppliers(t *testing.T, now func() time.Time) (*testPeer, *Book, []*testSupplier) {
	t.Helper()
	relay := gossipRelay(t)
	rp := newTestPeer(t, now)
	rp.connect(t, relay)
	book := NewBook(now)
	var sups []*testSupplier
	for range 2 {
		s := newTestSupplier(t, now)
		s.connect(t, relay)
		waitGossipPath(t, rp, s.testPeer)
		s.answerBids(t)
		book.AddAsk(s.ask(t, now()))
		sups = append(sups, s)
	}
	return rp, book, sups
}

// TestRentStopsOnceListedSuppliersAnswered: a rent whose book lists two
// suppliers, asking for more quotes than there are (Enough 3) with a
// quote wait far longer than the test's deadline, leases as soon as both
// have answered: one quotes, the other declines (busy). Waiting out the
// quote wait would run past the deadline and fail the rent.
func TestRentStopsOnceListedSuppliersAnswered(t *testing.T) {
	now := time.Now
	rp, book, sups := twoListedSuppliers(t, now)
	// The second has all its GPUs taken: it declines as busy.
	if _, err := sups[1].sup.Ledger().Reserve(ID{1}, "h100-sxm", 4, now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := r.Rent(ctx, RentRequest{AllowSimulated: true, AllowUnproven: true,
		Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
		MaxPrice: 3_000_000, Wait: 10 * time.Minute, Enough: 3,
	})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if l.Supplier != sups[0].net.Host.ID() {
		t.Fatalf("lease from %s, want the supplier with free GPUs, %s", l.Supplier, sups[0].net.Host.ID())
	}
}

// TestRentCutsSilentSuppliers: a rent whose book lists two suppliers, one
// of which never answers bids (it advertises what it does not serve),
// leases from the other soon after its quote, instead of waiting out a
// quote wait far longer than the test's deadline for the silent one.
func TestRentCutsSilentSuppliers(t *testing.T) {
	now := time.Now
	relay := gossipRelay(t)
	rp := newTestPeer(t, now)
	rp.connect(t, relay)
	book := NewBook(now)
	var sups []*testSupplier
	for i := range 2 {
		s := newTestSupplier(t, now)
		s.connect(t, relay)
		waitGossipPath(t, rp, s.testPeer)
		if i == 0 {
			s.answerBids(t)
		}
		book.AddAsk(s.ask(t, now()))
		sups = append(sups, s)
	}
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := r.Rent(ctx, RentRequest{AllowSimulated: true, AllowUnproven: true,
		Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
		MaxPrice: 3_000_000, Wait: 10 * time.Minute, Enough: 3,
	})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if l.Supplier != sups[0].net.Host.ID() {
		t.Fatalf("lease from %s, want the supplier that answers, %s", l.Supplier, sups[0].net.Host.ID())
	}
}

// TestRentExplainsFromOwnBook: a renter with an order book of its own
// that leases nothing explains it from that book's asks: the supplier
// listed there did not answer, not "no ask in the order book".
func TestRentExplainsFromOwnBook(t *testing.T) {
	now := time.Now
	relay := gossipRelay(t)
	rp := newTestPeer(t, now)
	rp.connect(t, relay)
	book := NewBook(now)
	s := newTestSupplier(t, now)
	s.connect(t, relay)
	book.AddAsk(s.ask(t, now())) // it never answers bids
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	_, err := r.Rent(context.Background(), RentRequest{AllowSimulated: true, AllowUnproven: true,
		Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
		MaxPrice: 3_000_000, Wait: 300 * time.Millisecond,
	})
	var nm *NoMatch
	if !errors.As(err, &nm) {
		t.Fatalf("rent: %v, want a NoMatch", err)
	}
	if want := "1 supplier has h100-sxm; 1 did not answer within 300ms"; !slices.Contains(nm.Reasons, want) {
		t.Fatalf("reasons %q, want %q", nm.Reasons, want)
	}
}

// TestLeaseAcrossSkewedClocks: a supplier whose clock is as far off as the
// network tolerates (p2p.ClockSkew, ahead or behind) still quotes, leases
// and keeps the lease it countersigned: the quote, proposal and bid live
// long enough for either side's clock, and the wait for the renter's
// confirmation is real time, not the supplier's clock.
func TestLeaseAcrossSkewedClocks(t *testing.T) {
	for _, skew := range []time.Duration{-p2p.ClockSkew, p2p.ClockSkew} {
		t.Run(skew.String(), func(t *testing.T) {
			real := time.Now
			skewed := func() time.Time { return time.Now().Add(skew) }
			relay := gossipRelay(t)
			rp := newTestPeer(t, real)
			rp.connect(t, relay)
			book := NewBook(real)
			s := newTestSupplier(t, skewed)
			s.connect(t, relay)
			waitGossipPath(t, rp, s.testPeer)
			s.answerBids(t)
			book.AddAsk(s.ask(t, skewed()))
			r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: real, Log: quietLog()})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := r.Rent(ctx, RentRequest{AllowSimulated: true, AllowUnproven: true,
				Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour, MaxPrice: 3_000_000,
				// The one supplier's answer ends the wait; the ceiling is
				// for a loaded machine, where the default 2 s can pass
				// before the bid has gone round the relay.
				Wait: 20 * time.Second,
			})
			if err != nil {
				t.Fatalf("rent from a supplier %s off: %v", skew, err)
			}
			if got, err := GetLease(s.sup.cfg.Store, l.ID, skewed()); err != nil || got.State != LeaseConfirmed {
				t.Fatalf("the supplier keeps the lease as %v (%v), want confirmed", got.State, err)
			}
		})
	}
}

// TestRentTriesLaterQuotesWhenTheFirstRefuses: taking the first
// acceptable quote (Enough 1), a renter whose first offer is refused (the
// supplier bars it) goes on collecting and leases from the other
// supplier, instead of failing with answers still to come.
func TestRentTriesLaterQuotesWhenTheFirstRefuses(t *testing.T) {
	now := time.Now
	rp, book, sups := twoListedSuppliers(t, now)
	// The first quotes as usual, then refuses the proposal.
	sups[0].sup.leases.mu.Lock()
	sups[0].sup.leases.barred[rp.net.Host.ID()] = now().Add(time.Hour)
	sups[0].sup.leases.mu.Unlock()
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Twice: two leases with no job is all the second may hold of its 4.
	for i := range 2 {
		l, err := r.Rent(ctx, RentRequest{AllowSimulated: true, AllowUnproven: true,
			Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
			MaxPrice: 3_000_000, Wait: 10 * time.Minute, Enough: 1,
		})
		if err != nil {
			t.Fatalf("rent %d: %v", i, err)
		}
		if l.Supplier != sups[1].net.Host.ID() {
			t.Fatalf("rent %d: lease from %s, want the supplier that does not bar the renter, %s", i, l.Supplier, sups[1].net.Host.ID())
		}
	}
}

// TestRentLeavesSimulatedOut: against a supplier of simulated GPUs only,
// a rent whose filter says nothing of simulated GPUs fails, naming them,
// and does not dial the supplier; with AllowSimulated, or simulated=true
// in the filter, it leases.
func TestRentLeavesSimulatedOut(t *testing.T) {
	now := time.Now
	relay := gossipRelay(t)
	s := newTestSupplier(t, now)
	rp := newTestPeer(t, now)
	for _, p := range []*testPeer{s.testPeer, rp} {
		p.connect(t, relay)
	}
	waitGossipPath(t, rp, s.testPeer)
	s.answerBids(t)
	book := NewBook(now)
	book.AddAsk(s.ask(t, now()))
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := RentRequest{AllowUnproven: true, Filter: mustParseFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
		MaxPrice: 3_000_000, Wait: 2 * time.Second, Enough: 1}
	_, err := r.Rent(ctx, req)
	var nm *NoMatch
	if !errors.As(err, &nm) || !strings.Contains(nm.Error(), "only simulated ones, left out by default") {
		t.Fatalf("rent of simulated GPUs by default: %v, want a NoMatch naming simulated GPUs", err)
	}
	if rp.net.Host.Network().Connectedness(s.net.Host.ID()) == network.Connected {
		t.Fatal("the renter dialled a supplier of simulated GPUs it was not to lease from")
	}
	for _, tc := range []struct {
		name  string
		allow bool
		f     string
	}{{"allow", true, "model=h100-sxm"}, {"filter", false, "model=h100-sxm simulated=true"}} {
		req := req
		req.AllowSimulated, req.Filter, req.Wait = tc.allow, mustParseFilter(t, tc.f), 30*time.Second
		l, err := r.Rent(ctx, req)
		if err != nil || l.Supplier != s.net.Host.ID() {
			t.Fatalf("%s: rent = %v, %v; want a lease from the simulated supplier", tc.name, l, err)
		}
	}
}
