package light

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestConfig(t *testing.T) {
	if _, err := New(context.Background(), WithLogger(quiet())); !errors.Is(err, ErrNoBootstrap) {
		t.Fatalf("New without bootstrap peers: %v, want ErrNoBootstrap", err)
	}
	b := peer.AddrInfo{ID: "b"}
	c, err := newConfig([]Option{WithBootstrap(b)})
	if err != nil {
		t.Fatal(err)
	}
	if c.key == nil || c.bootstrapTimeout != 10*time.Second || c.queryTimeout != time.Second || c.log == nil || c.now == nil || c.renting || c.store != nil {
		t.Errorf("defaults = %+v", c)
	}
	st := store.NewMemory()
	c, err = newConfig([]Option{WithBootstrap(b), WithBootstrap(b), WithStore(st), WithBootstrapTimeout(time.Minute), WithQueryTimeout(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !c.renting || c.store != st || len(c.bootstrap) != 2 || c.bootstrapTimeout != time.Minute || c.queryTimeout != time.Hour {
		t.Errorf("WithStore, two bootstraps, timeouts: renting %v, %d bootstrap peers, %s, %s", c.renting, len(c.bootstrap), c.bootstrapTimeout, c.queryTimeout)
	}
}

// bootstrapNode is a real DHT server with pubsub on loopback, closed at
// the test's end.
func bootstrapNode(t *testing.T) peer.AddrInfo {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(p2p.Config{Key: k, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Mode: p2p.ModeServer, PubSub: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return peer.AddrInfo{ID: n.Host.ID(), Addrs: n.Host.Addrs()}
}

// TestClient: a client joins through its bootstrap peer; only one built
// to rent listens (on loopback, since it joined through loopback) and can
// rent; Close is safe twice.
func TestClient(t *testing.T) {
	b := bootstrapNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lc, err := New(ctx, WithBootstrap(b), WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	if got := lc.Network().Host.Network().Connectedness(b.ID); got != network.Connected {
		t.Errorf("search client: %s to its bootstrap peer, want Connected", got)
	}
	if n := len(lc.Network().Host.Addrs()); n != 0 {
		t.Errorf("search client listens on %d addresses, want none", n)
	}
	if _, err := lc.Rent(ctx, market.RentRequest{AllowSimulated: true}); !errors.Is(err, ErrNotRenting) {
		t.Errorf("Rent on a search client: %v, want ErrNotRenting", err)
	}
	if _, err := lc.TakeAsk(ctx, "ab", 1, time.Hour, true); !errors.Is(err, ErrNotRenting) {
		t.Errorf("TakeAsk on a search client: %v, want ErrNotRenting", err)
	}
	if err := lc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lc.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	rc, err := New(ctx, WithBootstrap(b), WithLogger(quiet()), WithRenting())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	addrs := rc.Network().Host.Addrs()
	if len(addrs) == 0 {
		t.Fatal("renting client listens nowhere: a bid must list an address")
	}
	for _, a := range addrs {
		if !manet.IsIPLoopback(a) {
			t.Errorf("renting client joined through loopback listens on %s", a)
		}
	}
	// The bootstrap node's book is empty: taking an ask finds none.
	if _, err := rc.TakeAsk(ctx, "ab", 1, time.Hour, true); err == nil || errors.Is(err, ErrNotRenting) {
		t.Errorf("TakeAsk of an unknown ask: %v, want a lookup error", err)
	}
}
