package market

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market/pb"
)

// TestCollectorExtendAfterRefusals: once its first offer is in, a
// collector waits for the other expected supplier no longer than the
// straggler cut; when that offer was refused (extend), it waits for the
// other until req.Wait after all. Under load, a rent whose first
// supplier refused failed with the second one's quote a little late.
func TestCollectorExtendAfterRefusals(t *testing.T) {
	a, b := peer.ID("supplier-a"), peer.ID("supplier-b")
	req := RentRequest{Count: 1, Duration: time.Hour, MaxPrice: 3_000_000, Wait: time.Minute, Enough: 1}
	quote := func(s peer.ID) *Quote {
		return &Quote{Quote: &pb.Quote{Model: "h100-sxm", Count: 1, DurationS: 3600, PriceMicros: 2_000_000}, Supplier: s}
	}
	for _, extend := range []bool{false, true} {
		ch := make(chan *Quote, 2)
		r := &Renter{}
		c := r.newCollector(ch, req, map[peer.ID]bool{a: true, b: true})
		ch <- quote(a)
		offers, more := c.collect(context.Background())
		if len(offers) != 1 || offers[0].Supplier != a || !more {
			t.Fatalf("first collect: %d offers, more %v; want a's, and more to come", len(offers), more)
		}
		time.Sleep(StraggleMin + 300*time.Millisecond) // the cut passes while a's offer is proposed and refused
		if extend {
			c.extend()
		}
		go func() { time.Sleep(100 * time.Millisecond); ch <- quote(b) }()
		offers, _ = c.collect(context.Background())
		got := len(offers) == 1 && offers[0].Supplier == b
		if got != extend {
			t.Errorf("extend %v: b's late quote collected %v, want %v", extend, got, extend)
		}
		c.stop()
	}
}
