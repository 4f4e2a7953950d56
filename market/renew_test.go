package market

import (
	"context"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/clock/clocktest"
)

// TestAskRenewalSpread: an unchanged ask is renewed at a point drawn from
// 30% to 50% of its lifetime, and the draws cover that whole range, so
// suppliers that posted together drift apart.
func TestAskRenewalSpread(t *testing.T) {
	s := &Supplier{cfg: SupplierConfig{AskTTL: 10 * time.Minute}}
	now := time.Unix(1_700_000_000, 0)
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := s.renewal(now).Sub(now)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 3*time.Minute || hi > 5*time.Minute {
		t.Fatalf("renewals from %s to %s after posting; want within 3m to 5m of a 10m ask", lo, hi)
	}
	// 2000 uniform draws leave a 10 s gap at either end with odds of
	// about e^-167.
	if lo > 3*time.Minute+10*time.Second || hi < 5*time.Minute-10*time.Second {
		t.Fatalf("renewals only from %s to %s: not spread over 3m to 5m", lo, hi)
	}
}

// TestAskRenewedWhenDue: over real libp2p, a supplier whose capacity does
// not change gossips no new ask before 30% of its lifetime has passed,
// and one by the time half of it has.
func TestAskRenewedWhenDue(t *testing.T) {
	clk := clocktest.New()
	sup := newTestSupplier(t, clk.Now, func(c *SupplierConfig) { c.Clock = clk })
	watcher := newTestPeer(t, clk.Now)
	watcher.connect(t, sup.testPeer)

	ctx, cancel := context.WithCancel(context.Background())
	asks := make(chan *Ask, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			msg, err := watcher.orders.Next(ctx)
			if err != nil {
				return
			}
			if a, ok := msg.Value.(*Ask); ok {
				asks <- a
			}
		}
	}()
	runDone := make(chan struct{})
	go func() { defer close(runDone); sup.sup.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-runDone })

	next := func(limit time.Duration) *Ask {
		select {
		case a := <-asks:
			return a
		case <-time.After(limit):
			return nil
		}
	}
	first := next(20 * time.Second)
	if first == nil {
		t.Fatal("no ask gossiped after start")
	}
	ttl := 10 * time.Minute
	clk.Advance(ttl * 29 / 100)
	if a := next(time.Second); a != nil {
		t.Fatalf("ask renewed %s after it was posted, before 30%% of its %s lifetime", a.Created().Sub(first.Created()), ttl)
	}
	clk.Advance(ttl * 21 / 100)
	renewed := next(20 * time.Second)
	if renewed == nil {
		t.Fatalf("no renewal by half of the ask's %s lifetime", ttl)
	}
	if renewed.ID == first.ID || renewed.Count != first.Count || renewed.PriceMicros != first.PriceMicros {
		t.Fatalf("renewal %+v of %+v: want a new ask with the same count and price", renewed, first)
	}
}
