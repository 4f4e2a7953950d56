package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func TestTCPFirstRanks(t *testing.T) {
	addrs := func(ss ...string) []ma.Multiaddr {
		out := make([]ma.Multiaddr, len(ss))
		for i, s := range ss {
			out[i] = ma.StringCast(s)
		}
		return out
	}
	delays := func(r []network.AddrDelay) map[string]time.Duration {
		m := map[string]time.Duration{}
		for _, d := range r {
			m[d.Addr.String()] = d.Delay
		}
		return m
	}
	// Both transports, private and public: TCP at once, QUIC
	// QUICAfterTCP later.
	for _, c := range []struct {
		tcp, quic string
		wait      time.Duration
	}{
		{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1", QUICAfterTCP},
		{"/ip4/1.2.3.4/tcp/4001", "/ip4/1.2.3.4/udp/4001/quic-v1", 250 * time.Millisecond},
	} {
		r := tcpFirst(addrs(c.quic, c.tcp))
		if len(r) != 2 || transportOf(r[0].Addr) != "tcp" {
			t.Fatalf("%s: ranked %v, want TCP first", c.tcp, r)
		}
		d := delays(r)
		if d[c.tcp] != 0 || d[c.quic] != c.wait {
			t.Errorf("%s: TCP at %v and QUIC at %v, want 0 and %v", c.tcp, d[c.tcp], d[c.quic], c.wait)
		}
	}
	// One transport only: as the default ranks it.
	for _, only := range [][]ma.Multiaddr{
		addrs("/ip4/127.0.0.1/udp/4001/quic-v1"),
		addrs("/ip4/127.0.0.1/tcp/4001"),
	} {
		if r := tcpFirst(only); len(r) != 1 || r[0].Delay != 0 {
			t.Errorf("%v ranked %v, want it at once", only, r)
		}
	}
	// A relay address stays after both.
	relay := "/ip4/1.2.3.4/tcp/4001/p2p/12D3KooWEVBq6yqmdU12eXLgVLQV8mjwsvyV2nGFqt3knHZQ4pNR/p2p-circuit"
	r := tcpFirst(addrs(relay, "/ip4/5.6.7.8/udp/4001/quic-v1", "/ip4/5.6.7.8/tcp/4001"))
	if got := r[len(r)-1].Addr.String(); got != relay {
		t.Errorf("last dialled %s, want the relay address", got)
	}
}

// TestPeersConnectOverTCP: two nodes listening on TCP and QUIC connect
// over TCP.
func TestPeersConnectOverTCP(t *testing.T) {
	listen := []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
	start := func() *Network {
		n, err := New(Config{Key: newKey(t), Mode: ModeServer, ListenAddrs: listen, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a, b := start(), start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Host.Connect(ctx, peer.AddrInfo{ID: b.Host.ID(), Addrs: b.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	conns := a.Host.Network().ConnsToPeer(b.Host.ID())
	if len(conns) == 0 {
		t.Fatal("no connection")
	}
	for _, c := range conns {
		if got := transportOf(c.RemoteMultiaddr()); got != "tcp" {
			t.Errorf("connected over %s (%s), want TCP", got, c.RemoteMultiaddr())
		}
	}
}
