package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
)

func TestTCPFirstRanker(t *testing.T) {
	m := func(s string) ma.Multiaddr { return ma.StringCast(s) }
	delays := func(addrs ...ma.Multiaddr) map[string]time.Duration {
		out := map[string]time.Duration{}
		for _, r := range tcpFirstRanker(addrs) {
			out[r.Addr.String()] = r.Delay
		}
		if len(out) != len(addrs) {
			t.Fatalf("ranked %d of %d addresses", len(out), len(addrs))
		}
		return out
	}
	const (
		privTCP  = "/ip4/192.168.1.5/tcp/4001"
		privQUIC = "/ip4/192.168.1.5/udp/4001/quic-v1"
		pubTCP   = "/ip4/1.2.3.4/tcp/4001"
		pubQUIC  = "/ip4/1.2.3.4/udp/4001/quic-v1"
		relay    = "/ip4/1.2.3.4/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit"
	)
	d := delays(m(privTCP), m(privQUIC))
	if d[privTCP] != 0 || d[privQUIC] != swarm.PrivateQUICDelay {
		t.Errorf("private: TCP after %s, QUIC after %s; want 0 and %s", d[privTCP], d[privQUIC], swarm.PrivateQUICDelay)
	}
	d = delays(m(pubQUIC), m(pubTCP), m(relay))
	if d[pubTCP] != 0 || d[pubQUIC] != swarm.PublicQUICDelay {
		t.Errorf("public: TCP after %s, QUIC after %s; want 0 and %s", d[pubTCP], d[pubQUIC], swarm.PublicQUICDelay)
	}
	if d[relay] < swarm.RelayDelay {
		t.Errorf("relay dialled after %s, before the direct addresses' %s", d[relay], swarm.RelayDelay)
	}
	// Without a TCP address, QUIC goes first, as libp2p ranks it.
	d = delays(m(pubQUIC), m(relay))
	if d[pubQUIC] != 0 {
		t.Errorf("QUIC alone dialled after %s", d[pubQUIC])
	}
}

// TestDaemonsConnectOverTCP: two servers that both listen on TCP and
// QUIC connect over TCP; a light client reaches a server over QUIC.
func TestDaemonsConnectOverTCP(t *testing.T) {
	both := []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
	start := func(mode Mode, listen []string) *Network {
		n, err := New(Config{Key: newKey(t), Mode: mode, ListenAddrs: listen, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("start network: %v", err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a, b := start(ModeServer, both), start(ModeServer, both)
	light := start(ModeClient, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	transport := func(from *Network) string {
		t.Helper()
		if err := from.Host.Connect(ctx, peer.AddrInfo{ID: b.Host.ID(), Addrs: b.Host.Addrs()}); err != nil {
			t.Fatalf("connect: %v", err)
		}
		conns := from.Host.Network().ConnsToPeer(b.Host.ID())
		if len(conns) != 1 {
			t.Fatalf("%d connections to the server, want 1", len(conns))
		}
		return conns[0].ConnState().Transport
	}
	if got := transport(a); got != "tcp" {
		t.Errorf("server to server over %q, want tcp", got)
	}
	if got := transport(light); got != "quic-v1" {
		t.Errorf("light client to server over %q, want quic-v1", got)
	}
}
