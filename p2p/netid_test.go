package p2p

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

func TestValidNetwork(t *testing.T) {
	for _, id := range []string{"mainnet", "testnet", "testnet-7", "lab-3f2a", "a", strings.Repeat("x", 32)} {
		if err := ValidNetwork(id); err != nil {
			t.Errorf("ValidNetwork(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "Mainnet", "test net", "test_net", "net/1", "ünï", strings.Repeat("x", 33), "a)"} {
		if err := ValidNetwork(id); err == nil {
			t.Errorf("ValidNetwork(%q) = nil, want an error", id)
		}
	}
	if _, err := New(Config{Key: newKey(t), Network: "Bad Net", Logger: quietLogger()}); err == nil {
		t.Fatal("New accepted an invalid network ID")
	}
}

func TestProtocolNames(t *testing.T) {
	if got := DHTPrefix("mainnet"); got != "/gpumesh" {
		t.Errorf("mainnet DHT prefix = %s", got)
	}
	if got := DHTPrefix("testnet-7"); got != "/gpumesh/testnet-7" {
		t.Errorf("testnet-7 DHT prefix = %s", got)
	}
	ps := PubSubProtocols("testnet-7")
	if len(ps) == 0 || ps[0] != "/gpumesh/testnet-7/meshsub/1.3.0" {
		t.Errorf("testnet-7 pubsub protocols = %v", ps)
	}
	for _, p := range ps {
		if !strings.HasPrefix(string(p), "/gpumesh/testnet-7/meshsub/") {
			t.Errorf("testnet-7 speaks %s", p)
		}
	}
	if MDNSService("mainnet") != "gpumesh" || MDNSService("lab-1") != "gpumesh-lab-1" {
		t.Errorf("mDNS services %q, %q", MDNSService("mainnet"), MDNSService("lab-1"))
	}
	if ps := PubSubProtocols("mainnet"); !slices.Contains(ps, "/meshsub/1.1.0") {
		t.Errorf("mainnet pubsub protocols = %v, want go-libp2p-pubsub's", ps)
	}
}

func TestParseAgentNetwork(t *testing.T) {
	for _, c := range []struct {
		agent string
		id    string
		ok    bool
	}{
		{"gpumesh/0.1.0 (network=mainnet)", "mainnet", true},
		{"gpumesh (network=testnet-7)", "testnet-7", true},
		{AgentVersion("gpumesh/1.2.3 (linux)", "lab"), "lab", true},
		{"gpumesh/0.1.0", "", false},                         // before networks had names
		{"kubo/0.30.0 (network=mainnet)", "", false},         // not gpumesh
		{"gpumesh/0.1.0 (network=Main Net)", "", false},      // invalid ID
		{"gpumesh/0.1.0 (network=)", "", false},              // empty
		{"gpumesh/0.1.0 (network=mainnet", "", false},        // unterminated
		{"gpumesh/0.1.0 (network=mainnet) extra", "", false}, // trailing text
		{"gpumesh" + strings.Repeat("x", 300) + " (network=a)", "", false},
	} {
		id, ok := ParseAgentNetwork(c.agent)
		if id != c.id || ok != c.ok {
			t.Errorf("ParseAgentNetwork(%q) = %q, %v; want %q, %v", c.agent, id, ok, c.id, c.ok)
		}
	}
}

// startOn starts a server on network id, bootstrapped from boot.
func startOn(t *testing.T, id string, boot ...*Network) *Network {
	t.Helper()
	var bs []peer.AddrInfo
	for _, b := range boot {
		bs = append(bs, addrInfo(b))
	}
	return startNetworkWith(t, Config{Key: newKey(t), Network: id, Mode: ModeServer, PubSub: true, Bootstrap: bs})
}

// speaks reports whether n's host handles protocol p.
func speaks(n *Network, p protocol.ID) bool { return slices.Contains(n.Host.Mux().Protocols(), p) }

// TestNetworksDoNotMix runs two networks on loopback, mainnet and
// testnet-7, and connects one of each: they speak no protocol that
// carries records in common, drop each other once identified, say so,
// and neither sees the other's profiles or heartbeats.
func TestNetworksDoNotMix(t *testing.T) {
	a0 := startOn(t, "mainnet")
	a1 := startOn(t, "mainnet", a0)
	b0 := startOn(t, "testnet-7")
	b1 := startOn(t, "testnet-7", b0)

	for _, c := range []struct {
		n    *Network
		p    protocol.ID
		want bool
	}{
		{a0, "/gpumesh/kad/1.0.0", true},
		{a0, "/meshsub/1.1.0", true},
		{a0, "/gpumesh/testnet-7/kad/1.0.0", false},
		{b0, "/gpumesh/testnet-7/kad/1.0.0", true},
		{b0, "/gpumesh/testnet-7/meshsub/1.1.0", true},
		{b0, "/gpumesh/kad/1.0.0", false},
		{b0, "/meshsub/1.1.0", false},
		{b0, "/floodsub/1.0.0", false},
	} {
		if got := speaks(c.n, c.p); got != c.want {
			t.Errorf("%s node speaks %s: %v, want %v", c.n.NetworkID(), c.p, got, c.want)
		}
	}

	// Heartbeats on both networks.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join := func(n *Network) *Heartbeats {
		h, err := JoinHeartbeats(n.PubSub, n.cfg.Key, nil, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	ha0, ha1, hb0, hb1 := join(a0), join(a1), join(b0), join(b1)

	// b1 dials a0 (a node given a mainnet peer by mistake): identify
	// tells each that the other is on another network, and both drop it.
	if err := b1.Host.Connect(ctx, addrInfo(a0)); err != nil {
		t.Logf("connect across networks: %v (dropped at once)", err)
	}
	waitFor(t, 10*time.Second, "both sides dropped the other network's peer", func() bool {
		return b1.Host.Network().Connectedness(a0.Host.ID()) != network.Connected &&
			len(a0.WrongNetworkPeers()) == 1 && len(b1.WrongNetworkPeers()) == 1
	})
	if w := b1.WrongNetworkPeers()[0]; w.Peer != a0.Host.ID() || w.Network != "mainnet" || w.Bootstrap {
		t.Fatalf("b1 remembers %+v", w)
	}
	if w := a0.WrongNetworkPeers()[0]; w.Peer != b1.Host.ID() || w.Network != "testnet-7" {
		t.Fatalf("a0 remembers %+v", w)
	}
	if got := a0.WrongNetworkPeers()[0].String("mainnet"); !strings.Contains(got, "testnet-7") || !strings.Contains(got, "mainnet") {
		t.Fatalf("wrong-network message %q names not both networks", got)
	}

	// A mainnet profile is found on the mainnet and not on testnet-7.
	publish(t, a1, testProfile(1, time.Now(), time.Hour, testGPU("h100-sxm", "GPU-a")), "h100-sxm")
	publish(t, b0, testProfile(1, time.Now(), time.Hour, testGPU("h100-sxm", "GPU-b")), "h100-sxm")
	if got := sortedIDs(a0.FindSuppliers(ctx, []string{"h100-sxm"})); !equalIDs(got, []peer.ID{a1.Host.ID()}) {
		t.Fatalf("mainnet suppliers = %v, want only %s", got, a1.Host.ID())
	}
	if got := sortedIDs(b1.FindSuppliers(ctx, []string{"h100-sxm"})); !equalIDs(got, []peer.ID{b0.Host.ID()}) {
		t.Fatalf("testnet-7 suppliers = %v, want only %s", got, b0.Host.ID())
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if p, err := b1.FetchProfile(short, a1.Host.ID(), 1); err == nil {
		t.Fatalf("testnet-7 node fetched the mainnet profile %+v", p.Profile)
	}

	// Heartbeats: each node hears its own network's peer, never the
	// other network's, even though a0 and b1 were connected.
	pubCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, h := range []*Heartbeats{ha0, ha1, hb0, hb1} {
		go func() {
			for pubCtx.Err() == nil {
				_ = h.Publish(pubCtx, &pb.Heartbeat{Software: "gpumesh/test"})
				select {
				case <-pubCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	hear := func(h *Heartbeats, self *Network, want *Network, not ...*Network) {
		t.Helper()
		for {
			hb, err := h.Next(ctx)
			if err != nil {
				t.Fatalf("%s waiting for %s's heartbeat: %v", self.Host.ID(), want.Host.ID(), err)
			}
			for _, o := range not {
				if hb.ID == o.Host.ID() {
					t.Fatalf("%s node heard a heartbeat of %s node %s", self.NetworkID(), o.NetworkID(), o.Host.ID())
				}
			}
			if hb.ID == want.Host.ID() {
				return
			}
		}
	}
	// Ten heartbeats of the own network each way make it likely that one
	// from the other network would have come in between.
	for range 10 {
		hear(ha0, a0, a1, b0, b1)
		hear(hb1, b1, b0, a0, a1)
	}
}

// TestBootstrapIntoWrongNetwork: a node (and a light client) of testnet-7
// given a mainnet bootstrap peer fails to join, saying which networks.
func TestBootstrapIntoWrongNetwork(t *testing.T) {
	main := startOn(t, "mainnet")
	for _, mode := range []Mode{ModeServer, ModeClient} {
		cfg := Config{Key: newKey(t), Network: "testnet-7", Mode: mode, Bootstrap: []peer.AddrInfo{addrInfo(main)}, Logger: quietLogger()}
		if mode == ModeServer {
			cfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
		}
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = n.Bootstrap(ctx, 10*time.Second)
		cancel()
		if !errors.Is(err, ErrWrongNetwork) {
			t.Fatalf("mode %d: bootstrap into the wrong network: %v, want ErrWrongNetwork", mode, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "network mainnet") || !strings.Contains(msg, "on testnet-7") || !strings.Contains(msg, main.Host.ID().String()) {
			t.Fatalf("error %q does not name the peer and both networks", msg)
		}
		w := n.WrongNetworkPeers()
		if len(w) != 1 || !w[0].Bootstrap || w[0].Network != "mainnet" {
			t.Fatalf("wrong-network peers = %+v", w)
		}
		n.Close()
	}
}

func FuzzParseAgentNetwork(f *testing.F) {
	for _, s := range []string{"gpumesh/0.1.0 (network=mainnet)", "gpumesh (network=)", "gpumesh/0.1.0", "kubo/1 (network=x)", "gpumesh ( (network=a-b))"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, agent string) {
		id, ok := ParseAgentNetwork(agent)
		if ok != (ValidNetwork(id) == nil) {
			t.Fatalf("ParseAgentNetwork(%q) = %q, %v: ok disagrees with ValidNetwork", agent, id, ok)
		}
		if ok && !strings.HasSuffix(agent, AgentVersion("", id)) {
			t.Fatalf("ParseAgentNetwork(%q) = %q, not what the agent ends in", agent, id)
		}
	})
}

// TestWrongPeersRemembered: peers of other networks are remembered (at
// most maxWrongPeers, the latest), peers of unknown networks are left
// alone, and a peer that identifies on this network since is forgotten.
func TestWrongPeersRemembered(t *testing.T) {
	n := startNetwork(t, ModeServer, false, nil)
	ids := make([]peer.ID, maxWrongPeers+5)
	for i := range ids {
		ids[i] = mustID(t, newKey(t))
	}
	if n.checkPeerNetwork(ids[0], "gpumesh/0.1.0") || n.checkPeerNetwork(ids[0], "kubo/0.30 (network=lab)") || len(n.WrongNetworkPeers()) != 0 {
		t.Fatal("a peer of unknown network was taken for another network's")
	}
	for _, id := range ids {
		if !n.checkPeerNetwork(id, "gpumesh/0.1.0 (network=lab-1)") {
			t.Fatalf("%s on lab-1 not found wrong", id)
		}
	}
	if got := len(n.WrongNetworkPeers()); got != maxWrongPeers {
		t.Fatalf("%d wrong peers remembered, want %d", got, maxWrongPeers)
	}
	last := ids[len(ids)-1]
	if _, ok := n.wrong.get(last); !ok {
		t.Fatal("the latest wrong peer was forgotten")
	}
	if n.checkPeerNetwork(last, AgentVersion("gpumesh/0.1.0", n.NetworkID())) {
		t.Fatal("a peer of this network found wrong")
	}
	if _, ok := n.wrong.get(last); ok {
		t.Fatal("a peer back on this network is still remembered as wrong")
	}
}
