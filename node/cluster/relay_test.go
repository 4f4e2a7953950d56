package cluster

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/p2p"
)

// TestAdmissionRelayed: a stream that comes over a relayed (limited)
// connection is refused relayed, before its Open is read.
func TestAdmissionRelayed(t *testing.T) {
	ms := newCluster(t, 2, Config{LinkWait: 2 * time.Second}, true)
	r := newHost(t)
	rs, err := relay.New(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	target := ms[1].h
	if _, err := client.Reserve(ctx, target, peer.AddrInfo{ID: r.ID(), Addrs: r.Addrs()}); err != nil {
		t.Fatal(err)
	}
	circuit := r.Addrs()[0].Encapsulate(ma.StringCast("/p2p/" + r.ID().String() + "/p2p-circuit"))

	// A peer that knows the member only behind the relay.
	x := newHost(t)
	if err := x.Connect(ctx, peer.AddrInfo{ID: target.ID(), Addrs: []ma.Multiaddr{circuit}}); err != nil {
		t.Fatal(err)
	}
	st, err := x.NewStream(network.WithAllowLimitedConn(ctx, "test"), target.ID(), Protocol)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Conn().Stat().Limited {
		t.Fatal("the test's connection is not a relayed one")
	}
	_ = st.SetDeadline(time.Now().Add(time.Minute))
	if err := p2p.WriteMsg(st, openTo(ms, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if r, err := readReply(st); err != nil || r == nil || r.Code != RefusedRelayed {
		t.Fatalf("got %v %v, want %s", r, err, RefusedRelayed)
	}
	st.Close()
}

// TestConnectNeedsDirectLink: a member that reaches another only through
// a relay opens no stream over it: the job's connection is closed after
// LinkWait, and nothing reaches the other member's job.
func TestConnectNeedsDirectLink(t *testing.T) {
	r := newHost(t)
	rs, err := relay.New(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	// Rank 1 is known to rank 0 only behind the relay, and cannot dial
	// rank 0 back.
	h0 := newHost(t)
	h1, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
		libp2p.Security(libp2ptls.ID, libp2ptls.New), libp2p.Security(noise.ID, noise.New),
		libp2p.ConnectionGater(noDialTo(h0.ID())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h1.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.Reserve(ctx, h1, peer.AddrInfo{ID: r.ID(), Addrs: r.Addrs()}); err != nil {
		t.Fatal(err)
	}
	circuit := r.Addrs()[0].Encapsulate(ma.StringCast("/p2p/" + r.ID().String() + "/p2p-circuit"))
	members := []Member{
		{Rank: 0, Supplier: h0.ID(), Lease: randomLease()},
		{Rank: 1, Supplier: h1.ID(), Lease: randomLease(), Addrs: []ma.Multiaddr{circuit}},
	}
	var accepted atomic.Int64
	job := serveTCP(t, func(net.Conn) { accepted.Add(1) })
	port := uint16(job.Addr().(*net.TCPAddr).Port)
	var mbs [2]*Membership
	for i, h := range []host.Host{h0, h1} {
		svc, err := New(Config{Host: h, LinkWait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		if mbs[i], err = svc.Join(Manifest{Job: "c1", Attempt: 1, Self: i, Members: members}); err != nil {
			t.Fatal(err)
		}
		mbs[i].Attach(dialLoopback, nil)
	}
	eventually(t, "a relayed connection from rank 0 to rank 1", func() bool {
		return len(h0.Network().ConnsToPeer(h1.ID())) > 0
	})
	if l := mbs[0].Links()[0]; l.Direct {
		t.Fatalf("link %+v is direct", l)
	}
	if err := closedOrReset(jobConn(t, mbs[0], netip.AddrPortFrom(Addr(1), port))); err != nil {
		t.Fatal(err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("rank 1's job accepted %d connections", n)
	}
}

// noDialTo is a connection gater that refuses outbound dials to one peer
// and allows everything else.
type noDialTo peer.ID

func (g noDialTo) InterceptPeerDial(p peer.ID) bool                 { return p != peer.ID(g) }
func (g noDialTo) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return p != peer.ID(g) }
func (noDialTo) InterceptAccept(network.ConnMultiaddrs) bool        { return true }
func (noDialTo) InterceptSecured(network.Direction, peer.ID, network.ConnMultiaddrs) bool {
	return true
}
func (noDialTo) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
