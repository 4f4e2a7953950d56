package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
)

// TestManyVisitorsKeepGossipOpen connects far more short-lived peers to
// an advertised supplier than an event subscription buffers (light
// clients come and go like this all day), then checks that a newcomer
// still gets the supplier's subscriptions: a node's own event watchers
// must never stop reading, or identify stalls and pubsub learns of no
// new peer again.
func TestManyVisitorsKeepGossipOpen(t *testing.T) {
	a := startNode(t, testConfig(t, t.TempDir(), "sim:rtx4090:1", "eu-west", nil))
	startNode(t, testConfig(t, t.TempDir(), "none", "eu-west", bootstrapOf(a)))
	waitAdvertised(t, a)
	target := mustBootstrap(t, a)[0]
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := range 48 {
		h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.DisableMetrics())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Connect(ctx, target); err != nil {
			t.Fatalf("visitor %d: %v", i, err)
		}
		h.Close()
	}
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p2p.New(p2p.Config{Key: k, Bootstrap: []peer.AddrInfo{target}, Mode: p2p.ModeClient, PubSub: true, Logger: quiet(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Bootstrap(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	topic, err := c.PubSub.Join(market.OrdersTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	eventually(t, 10*time.Second, "the supplier's subscription to reach a newcomer after 48 visitors", func() bool {
		return slices.Contains(topic.ListPeers(), a.ID())
	})
}
