package p2p

import (
	"slices"
	"testing"
	"time"

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
		{"private, libp2p dropped the address, observers agreed on it", ReachInfo{AutoNAT: "private", RelayAddrs: []string{circuit.String()}, Observed: []Observation{
			{Addr: "/ip4/11.1.0.9/udp/4001/quic-v1", Observers: 3},
		}}, []ma.Multiaddr{private, circuit}, ReachPunchable},
		{"private, one observer each at different ports", ReachInfo{AutoNAT: "private", RelayAddrs: []string{circuit.String()}, Observed: []Observation{
			{Addr: "/ip4/11.1.0.9/tcp/40001", Observers: 1}, {Addr: "/ip4/11.1.0.9/tcp/51234", Observers: 1},
		}}, []ma.Multiaddr{private, circuit}, ReachRelayOnly},
		{"the operator says public", ReachInfo{AutoNAT: "unknown", Configured: ReachabilityPublic}, []ma.Multiaddr{pub}, ReachPublic},
		{"one observer of a translated address, before autonat", ReachInfo{AutoNAT: "unknown", Translated: true, RelayAddrs: []string{circuit.String()}, Observed: []Observation{
			{Addr: "/ip4/11.1.0.9/udp/4001/quic-v1", Observers: 1},
		}}, []ma.Multiaddr{private, circuit}, ReachPunchable},
		{"translated, no relay slot yet", ReachInfo{AutoNAT: "unknown", Translated: true, Observed: []Observation{
			{Addr: "/ip4/11.1.0.9/udp/4001/quic-v1", Observers: 2},
		}}, []ma.Multiaddr{private}, ReachUnknown},
		{"one observer, autonat private", ReachInfo{AutoNAT: "private", RelayAddrs: []string{circuit.String()}, Observed: []Observation{
			{Addr: "/ip4/11.1.0.9/tcp/4001", Observers: 1},
		}}, []ma.Multiaddr{private, circuit}, ReachPunchable},
		{"one observer of the node's own public address", ReachInfo{AutoNAT: "unknown", Observed: []Observation{
			{Addr: "/ip4/11.1.0.5/tcp/4001", Observers: 1},
		}}, []ma.Multiaddr{pub}, ReachUnknown},
		{"the operator says private, nobody saw it", ReachInfo{AutoNAT: "private", Configured: ReachabilityPrivate}, []ma.Multiaddr{private}, ReachRelayOnly},
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

func TestParseReachability(t *testing.T) {
	for in, want := range map[string]Reachability{"": ReachabilityAuto, "auto": ReachabilityAuto, "public": ReachabilityPublic, "private": ReachabilityPrivate} {
		if got, err := ParseReachability(in); err != nil || got != want {
			t.Errorf("ParseReachability(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Public", "yes", "relay", " public"} {
		if _, err := ParseReachability(in); err == nil {
			t.Errorf("ParseReachability(%q) took it", in)
		}
	}
	if _, err := New(Config{Key: newKey(t), Reachability: "sometimes"}); err == nil {
		t.Error("New took reachability \"sometimes\"")
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

// TestRankAddrs checks the order records list addresses in: public
// direct, relayed, private, loopback, each group in its original order.
func TestRankAddrs(t *testing.T) {
	in := []string{
		"/ip4/127.0.0.1/tcp/4001",
		"/ip4/10.3.0.2/tcp/4001",
		"/ip4/11.2.0.1/tcp/4001/p2p/12D3KooWSwC3ipUdF9P2xLkFw9kcDSQqcFSvZbhwpCN24A1zLfcA/p2p-circuit",
		"/ip4/11.3.0.1/udp/4001/quic-v1",
		"/ip4/10.3.0.2/udp/4001/quic-v1",
		"/ip4/11.2.0.2/tcp/4001/p2p/12D3KooWQ6AFJW8nu5r43b74GjbyFK2YUuTVprUYyuvxH7sEyCEd/p2p-circuit",
		"/ip4/11.3.0.1/tcp/4001",
	}
	want := []string{in[3], in[6], in[2], in[5], in[1], in[4], in[0]}
	var addrs []ma.Multiaddr
	for _, s := range in {
		addrs = append(addrs, ma.StringCast(s))
	}
	got := addrStrings(RankAddrs(addrs))
	if !slices.Equal(got, want) {
		t.Fatalf("RankAddrs:\n got %q\nwant %q", got, want)
	}
	if addrs[0].String() != in[0] {
		t.Fatal("RankAddrs reordered its argument")
	}
}

// TestPunchClock times a relayed connection's upgrade to a direct one,
// and times nothing for peers dialled directly or left relayed.
func TestPunchClock(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	pc := newPunchClock(func() time.Time { return now })
	a, b, c := peer.ID("a"), peer.ID("b"), peer.ID("c")
	pc.connected(a, true, false) // relayed first
	pc.connected(b, false, true) // dialled directly
	pc.connected(c, true, false) // relayed, never punched
	now = now.Add(1500 * time.Millisecond)
	pc.connected(a, true, false) // a second relayed connection does not restart the clock
	pc.connected(a, false, true) // hole punched
	if d, ok := pc.last(a); !ok || d != 1500*time.Millisecond {
		t.Fatalf("a: %v %v, want 1.5s", d, ok)
	}
	if _, ok := pc.last(b); ok {
		t.Fatal("b was dialled directly, yet has a punch time")
	}
	pc.disconnected(c)
	pc.connected(c, false, true)
	if _, ok := pc.last(c); ok {
		t.Fatal("c's relayed connection closed before the direct one, yet it has a punch time")
	}
}
