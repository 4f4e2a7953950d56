package market

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// serveBidsInline installs s's BidProtocol with an offer that answers
// each bid in a goroutine of its own and counts what it was handed.
func serveBidsInline(t *testing.T, s *testSupplier) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var offered atomic.Int64
	s.sup.ServeBids(func(b *Bid) bool {
		offered.Add(1)
		wg.Go(func() { s.sup.HandleBid(ctx, b) })
		return true
	})
	return &offered
}

// TestRentQuotedStraight: a supplier that answers no gossiped bid (its
// gossip reader is not running) still quotes a renter connected to it,
// since the renter sends its bid straight over BidProtocol as well, and
// the lease is made.
func TestRentQuotedStraight(t *testing.T) {
	now := time.Now
	s := newTestSupplier(t, now)
	offered := serveBidsInline(t, s)
	rp := newTestPeer(t, now)
	book := NewBook(now)
	book.AddAsk(s.ask(t, now()))
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})
	l := rentH100(t, r)
	if l.Supplier != s.net.Host.ID() {
		t.Fatalf("lease from %s, want %s", l.Supplier, s.net.Host.ID())
	}
	if n := offered.Load(); n != 1 {
		t.Fatalf("the supplier was handed %d bids straight, want 1", n)
	}
}

// TestBidStraightAndGossipedAnsweredOnce: a bid that reaches a supplier
// both straight and by gossip gets one quote.
func TestBidStraightAndGossipedAnsweredOnce(t *testing.T) {
	now := time.Now
	s := newTestSupplier(t, now)
	serveBidsInline(t, s)
	bidder := newTestPeer(t, now)
	got := countQuotes(t, bidder, now)
	bidder.connect(t, s.testPeer)
	waitGossipPath(t, bidder, s.testPeer)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bid := testBid(t, bidder.key, now(), bidder.net.Host.Addrs()...)
	if err := p2p.Send(ctx, bidder.net.Host, s.net.Host.ID(), BidProtocol, bid.Raw); err != nil {
		t.Fatal(err)
	}
	if err := bidder.orders.Publish(ctx, bid.Raw); err != nil {
		t.Fatal(err)
	}
	// The gossiped copy, answered as a node answers it.
	for {
		msg, err := s.orders.Next(ctx)
		if err != nil {
			t.Fatalf("the gossiped bid never came: %v", err)
		}
		if b, ok := msg.Value.(*Bid); ok && b.ID == bid.ID {
			s.sup.HandleBid(ctx, b)
			break
		}
	}
	eventually(t, 30*time.Second, "the bid's quote", func() bool { return got.forBid(bid.ID) >= 1 })
	// A later bid's quote marks the end of what the first one brought:
	// both of its copies have been handled by now.
	marker := testBid(t, bidder.key, now(), bidder.net.Host.Addrs()...)
	if err := p2p.Send(ctx, bidder.net.Host, s.net.Host.ID(), BidProtocol, marker.Raw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the later bid's quote", func() bool { return got.forBid(marker.ID) == 1 })
	if n := got.forBid(bid.ID); n != 1 {
		t.Fatalf("a bid that came straight and by gossip got %d quotes, want 1", n)
	}
}

// TestDirectBidRefused: what BidProtocol refuses, before the supplier's
// answerers see it: a bid signed by someone else than its sender, an
// expired one, an oversized message, garbage, and a sender over its rate.
func TestDirectBidRefused(t *testing.T) {
	clk := &manualClock{t: time.Now()}
	s := newTestSupplier(t, clk.Now)
	offered := serveBidsInline(t, s)
	bidder := newTestPeer(t, clk.Now)
	countQuotes(t, bidder, clk.Now)
	bidder.connect(t, s.testPeer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	send := func(bidder *testPeer, raw []byte) error {
		st, err := bidder.net.Host.NewStream(ctx, s.net.Host.ID(), BidProtocol)
		if err != nil {
			return err
		}
		defer st.Close()
		if err := p2p.WriteRaw(st, raw); err != nil {
			return err
		}
		// The supplier closes the stream when it took the bid and resets
		// it when it refused it.
		_ = st.CloseWrite()
		_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = st.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err == nil {
			return errors.New("the supplier wrote an answer on the stream")
		}
		return err
	}
	expired := &pb.Bid{
		Nonce: nonce(), CreatedMs: clk.Now().Add(-2 * time.Minute).UnixMilli(), ExpiresMs: clk.Now().Add(-time.Minute).UnixMilli(),
		Filter: "model=h100-sxm", Count: 1, DurationS: 3600, MaxPriceMicros: 3_000_000,
		Addrs: [][]byte{bidder.net.Host.Addrs()[0].Bytes()},
	}
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"signed by another key", testBid(t, newTestKey(t), clk.Now(), bidder.net.Host.Addrs()...).Raw},
		{"expired", mustSeal(t)(SealBid(expired, bidder.key))},
		{"oversized", make([]byte, MaxBidSize+1)},
		{"garbage", []byte("not a signed envelope")},
	} {
		if err := send(bidder, tc.raw); err == nil {
			t.Errorf("%s: the supplier took it", tc.name)
		}
	}
	if n := offered.Load(); n != 0 {
		t.Fatalf("the supplier's answerers were handed %d refused bids", n)
	}

	// The burst is taken, the rest refused until the clock moves on (a
	// peer of its own: the refusals above took from the first one's).
	flood := newTestPeer(t, clk.Now)
	countQuotes(t, flood, clk.Now)
	flood.connect(t, s.testPeer)
	for i := range OrderBurst + 5 {
		if err := send(flood, testBid(t, flood.key, clk.Now(), flood.net.Host.Addrs()...).Raw); (err == nil) != (i < OrderBurst) {
			t.Fatalf("bid %d of a burst of %d: %v", i+1, OrderBurst+5, err)
		}
	}
	if n := offered.Load(); n != OrderBurst {
		t.Fatalf("a burst of %d bids from one peer: %d handed on, want %d", OrderBurst+5, n, OrderBurst)
	}
	clk.Advance(time.Second)
	if err := send(flood, testBid(t, flood.key, clk.Now(), flood.net.Host.Addrs()...).Raw); err != nil {
		t.Fatalf("a bid after the limit refilled: %v", err)
	}
}

// TestRentDoesNotWaitForGossip: a rent whose supplier got the bid
// straight returns its lease while the bid's gossip is still held (here
// by the renter's own validator, as a loaded node's GossipSub holds a
// publish until its event loop comes round), with the bid already out of
// the renter's own book; once the gossip goes, the bid and its cancel
// reach the supplier.
func TestRentDoesNotWaitForGossip(t *testing.T) {
	now := time.Now
	s := newTestSupplier(t, now)
	serveBidsInline(t, s)
	key := newTestKey(t)
	n, err := p2p.New(p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PubSub: true, Now: now, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	hold := make(chan struct{})
	var heldOut atomic.Bool
	v := NewOrderValidator(now, 100, 200)
	orders, err := p2p.JoinTopic(n.PubSub, n.Host.ID(), OrdersTopic, func(author peer.ID, data []byte) (Order, error) {
		o, err := v.Check(author, data)
		if _, ok := o.(*Bid); ok && author == n.Host.ID() {
			select {
			case <-hold:
			case <-time.After(20 * time.Second): // a rent that waited for this
				heldOut.Store(true)
			}
		}
		return o, err
	}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orders.Close() })
	rp := &testPeer{key: key, net: n, orders: orders}
	// A gossip path first: a bid published before the supplier's
	// subscription is known goes nowhere, and a rent that is over does not
	// try again (the supplier had it straight).
	rp.connect(t, s.testPeer)
	waitGossipPath(t, rp, s.testPeer)
	book := NewBook(now)
	book.AddAsk(s.ask(t, now()))
	r := NewRenter(RenterConfig{Net: rp.net, Key: rp.key, Orders: rp.orders, Book: book, Now: now, Log: quietLog()})

	l := rentH100(t, r)
	if heldOut.Load() {
		t.Fatal("the rent waited for its bid's gossip")
	}
	if l.Supplier != s.net.Host.ID() {
		t.Fatalf("lease from %s, want %s", l.Supplier, s.net.Host.ID())
	}
	if _, bids := book.Len(); bids != 0 {
		t.Fatalf("the renter's book still lists %d bids after the rent", bids)
	}
	close(hold)
	r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Both come; a receiver validates each message on its own goroutine,
	// so they may be handed over in either order.
	var bid, cancelled ID
	for bid == (ID{}) || bid != cancelled {
		msg, err := s.orders.Next(ctx)
		if err != nil {
			t.Fatalf("bid %s and cancel of %s gossiped; waiting for the rest: %v", bid.Short(), cancelled.Short(), err)
		}
		switch o := msg.Value.(type) {
		case *Bid:
			if o.Renter == n.Host.ID() {
				bid = o.ID
			}
		case *Cancel:
			if o.Signer == n.Host.ID() {
				cancelled = o.OrderID
			}
		}
	}
}
