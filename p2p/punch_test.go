package p2p

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"
)

// TestPunchTimeOverRelay connects through a real relay, then directly
// (as hole punching does), and checks that the node timed the upgrade and
// that ConnTo tells the two connections apart.
func TestPunchTimeOverRelay(t *testing.T) {
	relay := startRelay(t, RelayLimits{MaxReservationsPerIP: 100})
	ri := peer.AddrInfo{ID: relay.Host.ID(), Addrs: relay.Host.Addrs()}
	target := plainHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Reserve(ctx, target, ri); err != nil {
		t.Fatal(err)
	}
	d := startNetwork(t, ModeServer, false, nil)
	circuit := ma.StringCast(fmt.Sprintf("%s/p2p/%s/p2p-circuit", relay.Host.Addrs()[0], relay.Host.ID()))
	if err := d.Host.Connect(ctx, peer.AddrInfo{ID: target.ID(), Addrs: []ma.Multiaddr{circuit}}); err != nil {
		t.Fatal(err)
	}
	if c := d.ConnTo(target.ID()); c.Direct || !c.Relayed {
		t.Fatalf("after the relayed connect: %+v, want relayed only", c)
	}
	if _, ok := d.PunchTime(target.ID()); ok {
		t.Fatal("a punch time before any direct connection")
	}
	if err := d.Host.Connect(network.WithForceDirectDial(ctx, "t"), peer.AddrInfo{ID: target.ID(), Addrs: target.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if c := d.ConnTo(target.ID()); !c.Direct {
		t.Fatalf("after the direct connect: %+v", c)
	}
	waitFor(t, 5*time.Second, "the punch time", func() bool {
		pt, ok := d.PunchTime(target.ID())
		return ok && pt > 0 && pt < 10*time.Second
	})
}
