package market

import (
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// testClock is a settable clock for validators.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time          { return c.t }
func (c *testClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestOrderValidatorAccepts(t *testing.T) {
	f := newFixture(t)
	v := NewOrderValidator(func() time.Time { return f.now }, rate.Inf, 1)
	ask := f.ask(t)
	got, err := v.Check(f.supplier, ask)
	if a, ok := got.(*Ask); err != nil || !ok || a.ID != IDOf(ask) {
		t.Fatalf("ask: got %T %v, %v", got, got, err)
	}
	bid := f.bid(t)
	got, err = v.Check(f.renter, bid)
	if b, ok := got.(*Bid); err != nil || !ok || b.ID != IDOf(bid) {
		t.Fatalf("bid: got %T %v, %v", got, got, err)
	}
	cancel := f.cancel(t, ask)
	got, err = v.Check(f.supplier, cancel)
	if c, ok := got.(*Cancel); err != nil || !ok || c.OrderID != IDOf(ask) || c.Signer != f.supplier {
		t.Fatalf("cancel: got %T %v, %v", got, got, err)
	}
	// The validator is a p2p.CheckFunc.
	var _ p2p.CheckFunc[Order] = v.Check
}

func TestOrderValidatorRejects(t *testing.T) {
	f := newFixture(t)
	c := f.chain(t)
	v := NewOrderValidator(func() time.Time { return f.now }, rate.Inf, 1)
	tests := []struct {
		name   string
		author peer.ID
		data   []byte
		want   error
	}{
		{"ask published by another peer", f.renter, f.ask(t), p2p.ErrSignerMismatch},
		{"bid published by another peer", f.supplier, f.bid(t), p2p.ErrSignerMismatch},
		{"cancel published by another peer", f.renter, f.cancel(t, c.ask), p2p.ErrSignerMismatch},
		{"forged ask", f.renter, forge(t, AskType, f.askMsg(), f.renterKey), p2p.ErrSignerMismatch},
		{"quote on the orders topic", f.supplier, c.quote, p2p.ErrBadEnvelope},
		{"lease on the orders topic", f.supplier, c.lease, p2p.ErrBadEnvelope},
		{"garbage", f.supplier, []byte("hello"), p2p.ErrBadEnvelope},
		{"too large", f.supplier, make([]byte, MaxAskSize+1), p2p.ErrTooLarge},
		{"tampered ask", f.supplier, tamper(f.ask(t)), p2p.ErrBadEnvelope},
		{"malformed bid", f.renter, f.bid(t, func(m *pb.Bid) { m.Filter = "nope" }), p2p.ErrMalformed},
		{"expired ask", f.supplier, f.ask(t, func(m *pb.Ask) { m.CreatedMs, m.ExpiresMs = f.ms(-time.Hour), f.ms(-time.Minute) }), p2p.ErrExpired},
		{"future-dated bid", f.renter, f.bid(t, func(m *pb.Bid) { m.CreatedMs, m.ExpiresMs = f.ms(time.Hour), f.ms(90*time.Minute) }), p2p.ErrFutureDated},
		// A bid signed as an ask is read as an ask, and is not a valid one.
		{"bid sealed as an ask", f.renter, forge(t, AskType, f.bidMsg(), f.renterKey), p2p.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.Check(tc.author, tc.data)
			if got != nil {
				t.Errorf("returned %v with error %v", got, err)
			}
			checkErr(t, err, tc.want)
		})
	}
}

func TestOrderValidatorReplay(t *testing.T) {
	f := newFixture(t)
	clock := &testClock{f.now}
	v := NewOrderValidator(clock.now, rate.Inf, 1)
	ask := f.ask(t)
	if _, err := v.Check(f.supplier, ask); err != nil {
		t.Fatal(err)
	}
	_, err := v.Check(f.supplier, ask)
	checkErr(t, err, ErrReplayed)
	if p2p.Verdict(err) != pubsub.ValidationReject {
		t.Errorf("replay verdict %v, want reject", p2p.Verdict(err))
	}

	// Another record of the same signer with the same nonce is a replay
	// too, whatever its type.
	nonce := decode(t, AskType, ask, &pb.Ask{}).Nonce
	_, err = v.Check(f.supplier, f.ask(t, func(m *pb.Ask) { m.Nonce, m.PriceMicros = nonce, 1 }))
	checkErr(t, err, ErrReplayed)
	sameNonceCancel := f.cancel(t, ask, func(m *pb.Cancel) { m.Nonce = nonce })
	_, err = v.Check(f.supplier, sameNonceCancel)
	checkErr(t, err, ErrReplayed)
	// The same nonce from another signer is not.
	if _, err := v.Check(f.renter, f.bid(t, func(m *pb.Bid) { m.Nonce = nonce })); err != nil {
		t.Errorf("bid with another signer's nonce: %v", err)
	}

	// Once the ask has expired it is forgotten; the record itself is then
	// merely expired, which pubsub ignores.
	if n := v.seen.Len(); n != 2 {
		t.Errorf("replay table holds %d entries, want 2", n)
	}
	clock.advance(10 * time.Minute)
	_, err = v.Check(f.supplier, ask)
	checkErr(t, err, p2p.ErrExpired)
	if p2p.Verdict(err) != pubsub.ValidationIgnore {
		t.Errorf("expired verdict %v, want ignore", p2p.Verdict(err))
	}
	if _, err := v.Check(f.supplier, f.ask(t, func(m *pb.Ask) { m.CreatedMs, m.ExpiresMs = clock.t.UnixMilli(), clock.t.Add(time.Minute).UnixMilli() })); err != nil {
		t.Fatal(err)
	}
	if n := v.seen.Len(); n != 1 {
		t.Errorf("replay table holds %d entries after expiry, want 1", n)
	}
}

func TestOrderValidatorRateLimit(t *testing.T) {
	f := newFixture(t)
	clock := &testClock{f.now}
	const burst = 3
	v := NewOrderValidator(clock.now, rate.Every(time.Second), burst)
	for i := range burst {
		if _, err := v.Check(f.supplier, f.ask(t)); err != nil {
			t.Fatalf("ask %d of the burst: %v", i, err)
		}
	}
	_, err := v.Check(f.supplier, f.ask(t))
	checkErr(t, err, p2p.ErrRateLimited)
	if p2p.Verdict(err) != pubsub.ValidationIgnore {
		t.Errorf("rate-limited verdict %v, want ignore (dropped at the first hop, no penalty)", p2p.Verdict(err))
	}
	// Other authors have buckets of their own.
	if _, err := v.Check(f.renter, f.bid(t)); err != nil {
		t.Errorf("another author: %v", err)
	}
	// Refilled at the rate.
	clock.advance(time.Second)
	if _, err := v.Check(f.supplier, f.ask(t)); err != nil {
		t.Errorf("after a second: %v", err)
	}
	_, err = v.Check(f.supplier, f.ask(t))
	checkErr(t, err, p2p.ErrRateLimited)
}

func TestTradeValidator(t *testing.T) {
	f := newFixture(t)
	clock := &testClock{f.now}
	v := NewTradeValidator(clock.now, rate.Inf, 1)
	c := f.chain(t)
	got, err := v.Check(f.supplier, c.trade)
	if err != nil || got == nil || got.Lease.ID != IDOf(c.proposal) {
		t.Fatalf("got %v, %v", got, err)
	}
	var _ p2p.CheckFunc[*TradePrint] = v.Check

	_, err = v.Check(f.supplier, c.trade)
	checkErr(t, err, ErrReplayed)
	// A second print of the same lease, with a fresh nonce, is a replay.
	_, err = v.Check(f.supplier, f.trade(t, c.lease))
	checkErr(t, err, ErrReplayed)

	_, err = v.Check(f.renter, f.trade(t, f.lease(t, f.proposal(t, f.quote(t, f.bid(t))))))
	checkErr(t, err, p2p.ErrSignerMismatch)
	_, err = v.Check(f.renter, mustSeal(t)(SealTradePrint(f.tradeMsg(c.lease), f.renterKey)))
	checkErr(t, err, ErrMismatch)
	_, err = v.Check(f.supplier, c.lease)
	checkErr(t, err, p2p.ErrBadEnvelope)
	_, err = v.Check(f.supplier, make([]byte, MaxTradeSize+1))
	checkErr(t, err, p2p.ErrTooLarge)

}

func TestTradeValidatorRateLimit(t *testing.T) {
	f := newFixture(t)
	clock := &testClock{f.now}
	v := NewTradeValidator(clock.now, rate.Every(time.Minute), 1)
	newTrade := func() []byte {
		return f.trade(t, f.lease(t, f.proposal(t, f.quote(t, f.bid(t)))), func(m *pb.TradePrint) { m.CreatedMs = clock.t.UnixMilli() })
	}
	if _, err := v.Check(f.supplier, newTrade()); err != nil {
		t.Fatal(err)
	}
	_, err := v.Check(f.supplier, newTrade())
	checkErr(t, err, p2p.ErrRateLimited)
	clock.advance(time.Minute)
	if _, err := v.Check(f.supplier, newTrade()); err != nil {
		t.Errorf("after refill: %v", err)
	}
}

func TestOrderValidatorConcurrent(t *testing.T) {
	f := newFixture(t)
	v := NewOrderValidator(func() time.Time { return f.now }, rate.Inf, 1)
	asks := make([][]byte, 64)
	for i := range asks {
		asks[i] = f.ask(t)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int
	)
	for range 4 {
		wg.Go(func() {
			for _, a := range asks {
				if _, err := v.Check(f.supplier, a); err == nil {
					mu.Lock()
					accepted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if accepted != len(asks) {
		t.Errorf("accepted %d of %d distinct asks sent 4 times each", accepted, len(asks))
	}
}
