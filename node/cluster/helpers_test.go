package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cluster/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// newHost is a real libp2p host on loopback TCP, secured with TLS 1.3 or
// Noise as a node's (p2p.New).
func newHost(tb testing.TB) host.Host {
	tb.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
		libp2p.Security(libp2ptls.ID, libp2ptls.New), libp2p.Security(noise.ID, noise.New))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

// serveTCP is a TCP server on loopback that runs handle for each
// connection and closes it after; the test's cleanup stops it and waits
// for its connections.
func serveTCP(tb testing.TB, handle func(c net.Conn)) *net.TCPListener {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln
}

// echoServer is a member's job: it echoes every connection as it reads
// it and, when the client half-closes, writes name and closes.
func echoServer(tb testing.TB, name string) *net.TCPListener {
	tb.Helper()
	return serveTCP(tb, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		if _, err := io.Copy(c, c); err == nil {
			_, _ = c.Write([]byte(name))
		}
	})
}

// member is one member of a test cluster: a host, its Service, its job's
// listener and its membership.
type member struct {
	h      host.Host
	svc    *Service
	job    *net.TCPListener
	mb     *Membership
	paused atomic.Value // string
}

// port is the port the member's job listens on.
func (m *member) port() uint16 { return uint16(m.job.Addr().(*net.TCPAddr).Port) }

// dialLoopback is an attached member's way into its job: the job's
// cluster address is loopback in tests.
func dialLoopback(ctx context.Context, port uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String())
}

func randomLease() market.ID {
	var id market.ID
	_, _ = rand.Read(id[:])
	return id
}

// newCluster makes n members with Services configured as cfg, joined to
// cluster attempt 1 of job "c1"; attached members run.
func newCluster(t testing.TB, n int, cfg Config, attach bool) []*member {
	t.Helper()
	ms := make([]*member, n)
	members := make([]Member, n)
	for i := range ms {
		m := &member{h: newHost(t)}
		m.paused.Store("")
		c := cfg
		c.Host = m.h
		svc, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		m.svc = svc
		m.job = echoServer(t, Hostname(i))
		ms[i] = m
		members[i] = Member{Rank: i, Supplier: m.h.ID(), Lease: randomLease(), Addrs: m.h.Addrs()}
	}
	for i, m := range ms {
		mb, err := m.svc.Join(Manifest{Job: "c1", Attempt: 1, Self: i, Members: members})
		if err != nil {
			t.Fatal(err)
		}
		m.mb = mb
		if attach {
			mb.Attach(dialLoopback, func() string { return m.paused.Load().(string) })
		}
	}
	return ms
}

// jobConn is a connection that mb's job opened to dst: the job's end is
// returned, and the node's end is handed to mb.Connect as the runtime
// would, in a goroutine of its own.
func jobConn(tb testing.TB, mb *Membership, dst netip.AddrPort) *net.TCPConn {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	nc, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	go mb.Connect(nc, dst)
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	return c
}

// exchange writes body on c, half-closes and reads everything back.
func exchange(c *net.TCPConn, body []byte) ([]byte, error) {
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(body)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	out, err := io.ReadAll(c)
	if err != nil {
		return out, err
	}
	return out, <-werr
}

// rawOpen opens a cluster stream from h to p with open, as any peer may:
// the stream when accepted, else the refusal.
func rawOpen(tb testing.TB, h host.Host, to host.Host, open *pb.ClusterOpen) (network.Stream, *Refusal) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Connect(ctx, peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()}); err != nil {
		tb.Fatal(err)
	}
	st, err := h.NewStream(ctx, to.ID(), Protocol)
	if err != nil {
		tb.Fatal(err)
	}
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	if err := p2p.WriteMsg(st, open); err != nil {
		tb.Fatal(err)
	}
	r, err := readReply(st)
	if err != nil {
		tb.Fatal(err)
	}
	if r != nil {
		_ = st.Close()
		return nil, r
	}
	tb.Cleanup(func() { st.Reset() })
	_ = st.SetDeadline(time.Now().Add(2 * time.Minute))
	return st, nil
}

// openTo is a valid Open from rank from to member to of ms.
func openTo(ms []*member, from, to int) *pb.ClusterOpen {
	l := ms[to].mb.m.Members[to].Lease
	return &pb.ClusterOpen{Version: Version, LeaseId: l[:], Attempt: 1, FromRank: uint32(from), Port: uint32(ms[to].port())}
}

// eventually waits up to a minute for cond.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// closedOrReset reports whether c ends (EOF or reset) with nothing read.
func closedOrReset(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := c.Read(make([]byte, 1))
	switch {
	case n > 0:
		return errors.New("read a byte from a connection that should have been closed")
	case err == nil:
		return errors.New("no error")
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return nil // a reset
}

// closedPort is a loopback port nothing listens on.
func closedPort(tb testing.TB) uint16 {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	p := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return p
}

// echoPing sends "ping" on c, a connection to an echoServer, and reads
// it back.
func echoPing(tb testing.TB, c net.Conn) {
	tb.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		tb.Fatalf("%q %v", buf, err)
	}
}
