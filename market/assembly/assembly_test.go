package assembly

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testMarket is one assembled market on a real libp2p host on loopback.
type testMarket struct {
	*Market
	net      *p2p.Network
	observed atomic.Int64
}

// start assembles a market, selling two simulated h100-sxm at 2.00 a
// GPU-hour when sell is true, and runs it until the test ends.
func start(t *testing.T, sell bool) *testMarket {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PubSub: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	tm := &testMarket{net: n}
	cfg := Config{Net: n, Key: key, Store: store.NewMemory(), Log: quiet(),
		Observe: func(string, []byte) { tm.observed.Add(1) }}
	if sell {
		id := n.Host.ID().String()
		cfg.Sell = &Sell{
			Pricer: market.Pricer{Mode: market.Fixed, List: map[string]money.Micros{"h100-sxm": 2_000_000}},
			GPUs:   map[string][]string{"h100-sxm": {"GPU-0", "GPU-1"}},
			Region: "eu-west",
			Describe: func(m string) market.Offer {
				return market.Offer{PeerID: id, Model: m, Region: "eu-west", Simulated: true}
			},
		}
	}
	if tm.Market, err = New(cfg); err != nil {
		n.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tm.Run(ctx, wg.Go)
	t.Cleanup(func() {
		cancel()
		tm.Stopped(time.Second)
		if err := tm.Close(); err != nil {
			t.Error(err)
		}
		n.Close()
		wg.Wait()
	})
	return tm
}

func (m *testMarket) connect(t *testing.T, to *testMarket) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.net.Host.Connect(ctx, peer.AddrInfo{ID: to.net.Host.ID(), Addrs: to.net.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMarketTrades: two assembled markets over real libp2p. The seller's
// asks reach the buyer's book by gossip through the orders topic's
// validator; the buyer's renter leases from the seller (a bid gossiped
// or sent straight, answered by the seller's bid answerers, a quote, a
// countersigned lease); the seller's trade print reaches the buyer's
// price index through the trades topic; the validators showed each
// message to Observe.
func TestMarketTrades(t *testing.T) {
	seller, buyer := start(t, true), start(t, false)
	if buyer.Supplier != nil || seller.Supplier == nil {
		t.Fatal("a market sells only when told what")
	}
	buyer.connect(t, seller)
	eventually(t, "the seller's asks in the buyer's book", func() bool { return len(buyer.Book.Asks("h100-sxm")) > 0 })

	f, err := market.ParseFilter("model=h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := buyer.Renter.Rent(ctx, market.RentRequest{Filter: f, Count: 2, Duration: time.Hour, MaxPrice: 3_000_000,
		AllowSimulated: true, AllowUnproven: true, Wait: 2 * time.Second})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if l.Supplier != seller.net.Host.ID() || len(l.GpuUuids) != 2 {
		t.Fatalf("lease from %s of %d GPUs, want the seller's two", l.Supplier, len(l.GpuUuids))
	}
	eventually(t, "the lease's trade print in the buyer's price index", func() bool { return len(buyer.Index.Prints("h100-sxm")) > 0 })
	if buyer.observed.Load() == 0 || seller.observed.Load() == 0 {
		t.Errorf("Observe saw %d messages at the buyer, %d at the seller", buyer.observed.Load(), seller.observed.Load())
	}
}

// TestSyncFrom: a market that joins after the seller's ask was gossiped
// has it only once it syncs from a peer's book, and SyncFrom stops at
// the number of answers asked for or when done says the book has enough.
func TestSyncFrom(t *testing.T) {
	seller, relay := start(t, true), start(t, false)
	relay.connect(t, seller)
	eventually(t, "the seller's asks in the relay's book", func() bool { return len(relay.Book.Asks("")) > 0 })
	late := start(t, false)
	late.connect(t, relay)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	stranger := start(t, false) // never connected: its book cannot be asked
	if got := late.SyncFrom(ctx, []peer.ID{stranger.net.Host.ID()}, 1, nil); got != 0 {
		t.Errorf("a peer that cannot be reached answered: %d", got)
	}
	calls := 0
	got := late.SyncFrom(ctx, []peer.ID{relay.net.Host.ID(), relay.net.Host.ID()}, 2, func(b *market.Book) bool {
		calls++
		asks, _ := b.Len()
		return asks > 0
	})
	if got != 1 || calls != 1 {
		t.Errorf("SyncFrom: %d answers and %d calls of done, want 1 each (done after the first)", got, calls)
	}
	if len(late.Book.Asks("h100-sxm")) == 0 {
		t.Error("the late market's book has no ask after the sync")
	}
}

// TestNewNeedsNetworkAndKey: a market without a network or a key is
// refused, not built half.
func TestNewNeedsNetworkAndKey(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New with no network or key: no error")
	}
}
