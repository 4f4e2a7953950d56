package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p/p2ptest"
)

// TestBidsDoNotReflect replays the reflection attack over gossip: an
// attacker connected only to a node that sells nothing publishes 100 valid
// bids whose addrs name a third party's TCP listener. Both suppliers hear
// every bid and open no connection to the listener; an honest renter then
// still leases.
func TestBidsDoNotReflect(t *testing.T) {
	t.Parallel() // its own nodes and listener
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:4", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
		sellerConfig(t, "unset", "sim:h100-sxm:4", "us-east", "fixed", []string{"h100-sxm=2.10"}, nil),
	})
	victim := p2ptest.Listen(t)

	// A bare libp2p host, without the DHT, so that it meets the suppliers
	// only through node 0's gossip.
	att, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps, err := pubsub.NewGossipSub(ctx, att, pubsub.WithFloodPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := p2ptest.StripSignatures(ps, market.OrdersTopic); err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(market.OrdersTopic)
	if err != nil {
		t.Fatal(err)
	}
	if err := att.Connect(ctx, mustBootstrap(t, m.nodes[0])[0]); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "attacker in node 0's orders topic", func() bool { return len(topic.ListPeers()) > 0 })

	// 20 renter keys of 5 bids each: within the book's 8 live bids per
	// renter, so that every bid is held (and could be answered).
	keys := make([]crypto.PrivKey, 20)
	for i := range keys {
		keys[i] = newTestKey(t)
	}
	// Below the per-author rate of the order validators (20/s).
	tick := time.NewTicker(60 * time.Millisecond)
	defer tick.Stop()
	for i := range 100 {
		<-tick.C
		now := time.Now()
		raw, err := market.SealBid(&pb.Bid{
			Nonce: uint64(now.UnixNano()), CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
			Filter: "model=h100-sxm", Count: 1, DurationS: 3600, MaxPriceMicros: 3_000_000,
			Addrs: [][]byte{victim.Multiaddr().Bytes()},
		}, keys[i%len(keys)])
		if err != nil {
			t.Fatal(err)
		}
		key := keys[i%len(keys)]
		if err := topic.Publish(ctx, raw, pubsub.WithSecretKeyAndPeerId(key, mustPeer(t, key))); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range m.nodes[1:] {
		deadline := time.Now().Add(30 * time.Second)
		for len(s.Book().Bids("h100-sxm")) < 100 {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after 30s waiting for the 100 bids in supplier %d's book: it holds %d, node 0 holds %d", i+1, len(s.Book().Bids("h100-sxm")), len(m.nodes[0].Book().Bids("h100-sxm")))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range m.nodes[1:] {
		if cs := att.Network().ConnsToPeer(s.ID()); len(cs) > 0 {
			t.Fatalf("the attacker is connected to supplier %s", s.ID())
		}
	}

	// An honest renter still leases, and the suppliers have had the time
	// of a rent to act on the attacker's bids.
	l, err := m.rent(t, "model=h100-sxm", 1, "3")
	if err != nil || l.Supplier != m.nodes[1].ID() {
		t.Fatalf("honest rent: lease from %s, err %v; want one from %s", supplierOf(l), err, m.nodes[1].ID())
	}
	if n := victim.Others(t); n != 0 {
		t.Fatalf("the suppliers opened %d connections to the address the bids listed, want 0", n)
	}
}

func mustPeer(t *testing.T, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
