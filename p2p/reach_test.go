package p2p

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func TestClassifyReach(t *testing.T) {
	pub := ma.StringCast("/ip4/11.1.0.5/tcp/4001")
	relayID, _ := peer.IDFromPrivateKey(newKey(t))
	circuit := ma.StringCast("/ip4/11.1.0.1/tcp/4001/p2p/" + relayID.String() + "/p2p-circuit")
	private := ma.StringCast("/ip4/10.1.0.2/tcp/4001")
	cases := []struct {
		name       string
		info       ReachInfo
		advertised []ma.Multiaddr
		want       Reach
	}{
		{"autonat public", ReachInfo{AutoNAT: "public"}, []ma.Multiaddr{pub}, ReachPublic},
		{"autonat v2 confirmed an address", ReachInfo{AutoNAT: "unknown", Reachable: []string{pub.String()}}, []ma.Multiaddr{pub}, ReachPublic},
		{"nothing known yet", ReachInfo{AutoNAT: "unknown"}, []ma.Multiaddr{private}, ReachUnknown},
		{"private with an agreed public address", ReachInfo{AutoNAT: "private"}, []ma.Multiaddr{private, pub, circuit}, ReachPunchable},
		{"private, relayed only", ReachInfo{AutoNAT: "private", RelayAddrs: []string{circuit.String()}}, []ma.Multiaddr{private, circuit}, ReachRelayOnly},
		{"symmetric by libp2p's count", ReachInfo{AutoNAT: "private", NATTCP: "endpoint-dependent", NATUDP: "endpoint-dependent"}, []ma.Multiaddr{private, pub, circuit}, ReachRelayOnly},
		{"one transport punchable", ReachInfo{AutoNAT: "private", NATTCP: "endpoint-dependent", NATUDP: "endpoint-independent"}, []ma.Multiaddr{private, pub, circuit}, ReachPunchable},
		{"ports differ per observer before autonat", ReachInfo{AutoNAT: "unknown", Observed: []Observation{
			{Addr: "/ip4/11.1.0.9/tcp/40001", Observers: 1}, {Addr: "/ip4/11.1.0.9/tcp/51234", Observers: 1},
		}}, []ma.Multiaddr{private}, ReachRelayOnly},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reason := classify(c.info, c.advertised)
			if got != c.want {
				t.Fatalf("classify = %s (%s), want %s", got, reason, c.want)
			}
			if reason == "" {
				t.Fatal("no reason given")
			}
		})
	}
}

func TestPortSpread(t *testing.T) {
	obs := []Observation{
		{Addr: "/ip4/11.1.0.9/udp/1000/quic-v1"}, {Addr: "/ip4/11.1.0.9/udp/1001/quic-v1"}, {Addr: "/ip4/11.1.0.9/udp/1002/quic-v1"},
		{Addr: "/ip4/11.1.0.9/tcp/1000"}, {Addr: "not an addr"},
	}
	if got := portSpread(obs); got != 3 {
		t.Fatalf("portSpread = %d, want 3", got)
	}
	if got := portSpread(nil); got != 0 {
		t.Fatalf("portSpread(nil) = %d", got)
	}
}

func TestReachOfLoopbackHost(t *testing.T) {
	a := startNetwork(t, ModeServer, false, nil)
	info := a.Reach()
	if !info.Reach.Valid() || info.Reason == "" {
		t.Fatalf("reach %+v", info)
	}
	if info.Reach == ReachPublic || info.Reach == ReachPunchable {
		t.Fatalf("a loopback-only host claims %s: %s", info.Reach, info.Reason)
	}
}
