package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"strings"
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
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/node/tunnel/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// newHost is a real libp2p host on loopback TCP, secured with TLS 1.3 or
// Noise as a node's (p2p.New).
func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
		libp2p.Security(libp2ptls.ID, libp2ptls.New), libp2p.Security(noise.ID, noise.New))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func connect(t *testing.T, a, b host.Host) {
	t.Helper()
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
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

// hashServer is a job's server: for each connection it reads everything
// until the client half-closes, answers with the sha-256 of what it read
// and then the name it was given, and closes.
func hashServer(t *testing.T, name string) *net.TCPListener {
	t.Helper()
	return serveTCP(t, func(c net.Conn) {
		h := sha256.New()
		if _, err := io.Copy(h, c); err == nil {
			_, _ = c.Write(append(h.Sum(nil), name...))
		}
	})
}

// supplier is a tunnel Server on its own host whose one attempt (lease
// ID lease, attempt 1, renter renter, port 8000) reaches ln.
type supplier struct {
	h      host.Host
	srv    *Server
	lease  [32]byte
	done   chan struct{}
	dials  atomic.Int64
	refuse atomic.Pointer[Refusal]
}

func newSupplier(t testing.TB, renter peer.ID, ln net.Listener, cfg ServerConfig) *supplier {
	t.Helper()
	s := &supplier{h: newHost(t), done: make(chan struct{})}
	_, _ = rand.Read(s.lease[:])
	cfg.Host = s.h
	cfg.Resolve = func(from peer.ID, req Request) (Target, *Refusal) {
		if r := s.refuse.Load(); r != nil {
			return Target{}, r
		}
		if from != renter || req.LeaseID != s.lease || req.Attempt != 1 {
			return Target{}, Refuse(RefusedNoAttempt, "no such attempt")
		}
		if req.Port != 8000 {
			return Target{}, Refuse(RefusedPort, "port %d not declared", req.Port)
		}
		return Target{Attempt: "a", Done: s.done, Dial: func(ctx context.Context) (net.Conn, error) {
			s.dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", ln.Addr().String())
		}}, nil
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	s.srv = srv
	return s
}

func (s *supplier) endpoint() Endpoint { return Endpoint{Peer: s.h.ID(), LeaseID: s.lease, Attempt: 1} }

func opener(h host.Host) func(ctx context.Context, p peer.ID) (network.Stream, error) {
	return func(ctx context.Context, p peer.ID) (network.Stream, error) { return h.NewStream(ctx, p, Protocol) }
}

// roundTrip sends body through addr, half-closes, and returns the answer.
func roundTrip(addr string, body []byte) ([]byte, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(body)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	out, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	if err := <-werr; err != nil {
		return nil, err
	}
	return out, nil
}

func wantAnswer(t *testing.T, got, body []byte, name string) {
	t.Helper()
	sum := sha256.Sum256(body)
	if want := append(sum[:], name...); !bytes.Equal(got, want) {
		t.Fatalf("answer %x (%d bytes), want %x", got, len(got), want)
	}
}

// TestForwardCarriesBytes: a large body goes through a Forwarder, a tunnel
// stream over real libp2p and the Server to the job's port, and the
// answer comes back after the client's half-close: both directions and
// the half-close are carried intact.
func TestForwardCarriesBytes(t *testing.T) {
	r := newHost(t)
	s := newSupplier(t, r.ID(), hashServer(t, "A"), ServerConfig{})
	connect(t, r, s.h)
	f, err := Forward(ForwarderConfig{Port: 8000, Endpoints: func() []Endpoint { return []Endpoint{s.endpoint()} }, OpenStream: opener(r)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{0, 1, 64 << 10, 48 << 20} {
		body := make([]byte, size)
		_, _ = rand.Read(body)
		got, err := roundTrip(f.Addr().String(), body)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		wantAnswer(t, got, body, "A")
	}
	st, _ := f.Stats()
	if st.Accepted != 4 || st.Failed != 0 || st.BytesOut != 48<<20+64<<10+1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestServerRefuses: each thing a supplier checks has its refusal code,
// and a refused tunnel never reaches the job.
func TestServerRefuses(t *testing.T) {
	r, other := newHost(t), newHost(t)
	s := newSupplier(t, r.ID(), hashServer(t, "A"), ServerConfig{})
	connect(t, r, s.h)
	connect(t, other, s.h)
	ctx := context.Background()
	ep := s.endpoint()
	wrongAttempt, wrongLease := ep, ep
	wrongAttempt.Attempt = 2
	wrongLease.LeaseID[0] ^= 1
	cases := []struct {
		name string
		h    host.Host
		ep   Endpoint
		port uint16
		code string
	}{
		{"another peer", other, ep, 8000, RefusedNoAttempt},
		{"another attempt", r, wrongAttempt, 8000, RefusedNoAttempt},
		{"another lease", r, wrongLease, 8000, RefusedNoAttempt},
		{"an undeclared port", r, ep, 22, RefusedPort},
	}
	for _, c := range cases {
		_, err := Dial(ctx, opener(c.h), c.ep, c.port)
		if !IsRefusal(err, c.code) {
			t.Errorf("%s: %v, want refusal %s", c.name, err, c.code)
		}
	}
	// Malformed and unsupported Opens, written by hand.
	raw := []struct {
		name string
		m    *pb.Open
		code string
	}{
		{"version 2", &pb.Open{Version: 2, LeaseId: ep.LeaseID[:], Attempt: 1, Port: 8000}, RefusedVersion},
		{"short lease id", &pb.Open{Version: 1, LeaseId: ep.LeaseID[:31], Attempt: 1, Port: 8000}, RefusedMalformed},
		{"port 0", &pb.Open{Version: 1, LeaseId: ep.LeaseID[:], Attempt: 1}, RefusedMalformed},
		{"port 70000", &pb.Open{Version: 1, LeaseId: ep.LeaseID[:], Attempt: 1, Port: 70000}, RefusedMalformed},
	}
	for _, c := range raw {
		st, err := r.NewStream(ctx, s.h.ID(), Protocol)
		if err != nil {
			t.Fatal(err)
		}
		if err := p2p.WriteMsg(st, c.m); err != nil {
			t.Fatal(err)
		}
		rep := &pb.Reply{}
		if err := p2p.ReadMsg(st, MaxReplySize, rep); err != nil || rep.Refused != c.code {
			t.Errorf("%s: reply %v (%v), want %s", c.name, rep, err, c.code)
		}
		st.Close()
	}
	// An Open larger than MaxOpenSize is refused without being read.
	st, err := r.NewStream(ctx, s.h.ID(), Protocol)
	if err != nil {
		t.Fatal(err)
	}
	_ = p2p.WriteRaw(st, make([]byte, MaxOpenSize+1))
	rep := &pb.Reply{}
	if err := p2p.ReadMsg(st, MaxReplySize, rep); err != nil || rep.Refused != RefusedMalformed {
		t.Errorf("oversized open: reply %v (%v)", rep, err)
	}
	st.Close()
	// Nothing listening on the job's port: unreachable.
	dead := hashServer(t, "dead")
	s2 := newSupplier(t, r.ID(), dead, ServerConfig{})
	dead.Close()
	connect(t, r, s2.h)
	if _, err := Dial(ctx, opener(r), s2.endpoint(), 8000); !IsRefusal(err, RefusedUnreachable) {
		t.Errorf("dead port: %v", err)
	}
	if n := s.dials.Load(); n != 0 {
		t.Errorf("refused tunnels dialled the job %d times", n)
	}
}

// TestServerBounds: the per-attempt limit refuses a tunnel beyond it as
// busy, and the count goes down when a tunnel ends.
func TestServerBounds(t *testing.T) {
	r := newHost(t)
	s := newSupplier(t, r.ID(), hashServer(t, "A"), ServerConfig{MaxPerAttempt: 2})
	connect(t, r, s.h)
	ctx := context.Background()
	var open []network.Stream
	for range 2 {
		st, err := Dial(ctx, opener(r), s.endpoint(), 8000)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, st)
	}
	if _, err := Dial(ctx, opener(r), s.endpoint(), 8000); !IsRefusal(err, RefusedBusy) {
		t.Fatalf("third tunnel: %v, want busy", err)
	}
	_ = open[0].CloseWrite()
	if _, err := io.ReadAll(open[0]); err != nil {
		t.Fatal(err)
	}
	open[0].Close()
	waitFor(t, func() bool { return s.srv.Open() == 1 })
	st, err := Dial(ctx, opener(r), s.endpoint(), 8000)
	if err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	st.Reset()
	open[1].Reset()
	waitFor(t, func() bool { return s.srv.Open() == 0 })
}

// TestTunnelCutWhenAttemptEnds: closing the target's Done cuts a tunnel
// that is open, mid-transfer.
func TestTunnelCutWhenAttemptEnds(t *testing.T) {
	r := newHost(t)
	s := newSupplier(t, r.ID(), hashServer(t, "A"), ServerConfig{})
	connect(t, r, s.h)
	st, err := Dial(context.Background(), opener(r), s.endpoint(), 8000)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	close(s.done)
	_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(st)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the attempt ended: %v, want a reset", err)
	}
	waitFor(t, func() bool { return s.srv.Open() == 0 })
}

// TestForwarderFollowsEndpoints: connections go to the endpoint with the
// fewest open connections; a refusing endpoint is skipped; when the
// endpoints change (a failover), new connections go to the new one on
// the same local address; with none, a connection waits, then closes.
func TestForwarderFollowsEndpoints(t *testing.T) {
	r := newHost(t)
	a := newSupplier(t, r.ID(), hashServer(t, "A"), ServerConfig{})
	b := newSupplier(t, r.ID(), hashServer(t, "B"), ServerConfig{})
	connect(t, r, a.h)
	connect(t, r, b.h)
	var mu sync.Mutex
	eps := []Endpoint{a.endpoint(), b.endpoint()}
	f, err := Forward(ForwarderConfig{Port: 8000, Wait: 2 * time.Second, OpenStream: opener(r), Endpoints: func() []Endpoint {
		mu.Lock()
		defer mu.Unlock()
		return eps
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := f.Addr().String()

	// Four held connections spread two and two.
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		_, _ = c.Write([]byte("x"))
	}
	waitFor(t, func() bool { return a.srv.Open() == 2 && b.srv.Open() == 2 })
	for _, c := range held {
		c.Close()
	}
	waitFor(t, func() bool { return a.srv.Open() == 0 && b.srv.Open() == 0 })

	// Connections one after another, each closed before the next, take
	// the two endpoints in turn. "Closed" is the forward's view: it may
	// finish a connection a little after the client has its answer.
	answers := map[string]int{}
	for range 6 {
		got, err := roundTrip(addr, []byte("q"))
		if err != nil {
			t.Fatal(err)
		}
		answers[string(got[sha256.Size:])]++
		waitFor(t, func() bool { s, _ := f.Stats(); return s.Open == 0 })
	}
	if answers["A"] != 3 || answers["B"] != 3 {
		t.Fatalf("six sequential connections went %v, want 3 and 3", answers)
	}

	// A refuses (its job halted): every connection lands on B.
	a.refuse.Store(Refuse(RefusedUnpaid, "halted"))
	for range 3 {
		got, err := roundTrip(addr, []byte("q"))
		if err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, got, []byte("q"), "B")
	}
	// Failover: B is gone, C takes over; the address is the same.
	c := newSupplier(t, r.ID(), hashServer(t, "C"), ServerConfig{})
	connect(t, r, c.h)
	mu.Lock()
	eps = []Endpoint{c.endpoint()}
	mu.Unlock()
	got, err := roundTrip(addr, []byte("q"))
	if err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, got, []byte("q"), "C")
	// No endpoint: the connection is closed after Wait, counted failed.
	mu.Lock()
	eps = nil
	mu.Unlock()
	if got, err := roundTrip(addr, []byte("q")); err == nil && len(got) > 0 {
		t.Fatalf("with no endpoint got %q", got)
	}
	st, why := f.Stats()
	if st.Failed != 1 || why == "" {
		t.Fatalf("stats %+v, last failure %q", st, why)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzCheckOpen: any bytes decode to an Open that CheckOpen accepts only
// with its fields in range, and never panic.
func FuzzCheckOpen(f *testing.F) {
	good, _ := proto.Marshal(&pb.Open{Version: 1, LeaseId: make([]byte, 32), Attempt: 1, Port: 8000})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &pb.Open{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		req, err := CheckOpen(m)
		if err != nil {
			return
		}
		if m.Version != Version || req.Port == 0 || uint32(req.Port) != m.Port || !bytes.Equal(req.LeaseID[:], m.LeaseId) {
			t.Fatalf("accepted %v as %+v", m, req)
		}
	})
}

// TestForwarderBoundsConnections: past MaxConns at once, a new local
// connection is closed at once and counted failed; the ones held go on.
func TestForwarderBoundsConnections(t *testing.T) {
	r := newHost(t)
	s := newSupplier(t, r.ID(), hashServer(t, "A"), ServerConfig{})
	connect(t, r, s.h)
	f, err := Forward(ForwarderConfig{Port: 8000, MaxConns: 2, Endpoints: func() []Endpoint { return []Endpoint{s.endpoint()} }, OpenStream: opener(r)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", f.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitFor(t, func() bool { return s.srv.Open() == 2 })
	extra, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a third connection past the bound: read %d, %v; want it closed", n, err)
	}
	if st, why := f.Stats(); st.Failed != 1 || !strings.Contains(why, "limit") {
		t.Fatalf("stats %+v, %q", st, why)
	}
	for _, c := range held {
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		wantAnswer(t, got, nil, "A")
	}
}
