package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cluster/pb"
)

func TestAddrHostname(t *testing.T) {
	if got := Addr(0).String(); got != "100.64.0.1" {
		t.Fatalf("Addr(0) = %s", got)
	}
	if got := Addr(MaxNodes - 1).String(); got != "100.64.0.64" || !Prefix.Contains(Addr(MaxNodes-1)) {
		t.Fatalf("Addr(%d) = %s", MaxNodes-1, got)
	}
	if Hostname(3) != "rank3" {
		t.Fatal(Hostname(3))
	}
	for a, want := range map[string]int{"100.64.0.1": 0, "100.64.0.3": 2, "::ffff:100.64.0.2": 1} {
		if r, ok := RankOf(netip.MustParseAddr(a), 3); !ok || r != want {
			t.Fatalf("RankOf(%s) = %d %v, want %d", a, r, ok, want)
		}
	}
	for _, a := range []string{"100.64.0.0", "100.64.0.4", "100.64.0.255", "100.64.1.1", "10.0.0.1", "::1"} {
		if r, ok := RankOf(netip.MustParseAddr(a), 3); ok {
			t.Fatalf("RankOf(%s) = %d", a, r)
		}
	}
}

func TestManifestCheck(t *testing.T) {
	ids := make([]peer.ID, 3)
	for i := range ids {
		ids[i] = newHost(t).ID()
	}
	good := func() Manifest {
		m := Manifest{Job: "j", Attempt: 2, Self: 1}
		for i, id := range ids {
			m.Members = append(m.Members, Member{Rank: i, Supplier: id, Lease: randomLease()})
		}
		return m
	}
	if err := good().Check(ids[1]); err != nil {
		t.Fatal(err)
	}
	addrs := make([]ma.Multiaddr, MaxAddrs+1)
	for i := range addrs {
		addrs[i] = ma.StringCast("/ip4/127.0.0.1/tcp/4001")
	}
	for name, c := range map[string]struct {
		edit func(*Manifest)
		self peer.ID
	}{
		"not self":       {func(*Manifest) {}, ids[0]},
		"no members":     {func(m *Manifest) { m.Members = nil; m.Self = 0 }, ids[1]},
		"too many":       {func(m *Manifest) { m.Members = make([]Member, MaxNodes+1) }, ids[1]},
		"no job":         {func(m *Manifest) { m.Job = "" }, ids[1]},
		"self outside":   {func(m *Manifest) { m.Self = 3 }, ids[1]},
		"self negative":  {func(m *Manifest) { m.Self = -1 }, ids[1]},
		"rank order":     {func(m *Manifest) { m.Members[0].Rank, m.Members[2].Rank = 2, 0 }, ids[1]},
		"dup supplier":   {func(m *Manifest) { m.Members[2].Supplier = ids[0] }, ids[1]},
		"no supplier":    {func(m *Manifest) { m.Members[2].Supplier = "" }, ids[1]},
		"dup lease":      {func(m *Manifest) { m.Members[2].Lease = m.Members[0].Lease }, ids[1]},
		"zero lease":     {func(m *Manifest) { m.Members[0].Lease = market.ID{} }, ids[1]},
		"too many addrs": {func(m *Manifest) { m.Members[0].Addrs = addrs }, ids[1]},
	} {
		m := good()
		c.edit(&m)
		if err := m.Check(c.self); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConnectCarriesBytes: rank 0's job connects to rank 2's cluster
// address and port; the bytes reach rank 2's job through the two
// Services and come back, 4 MiB both ways at once, with the half-close
// carried; rank 1's job reaches rank 0's too.
func TestConnectCarriesBytes(t *testing.T) {
	ms := newCluster(t, 3, Config{}, true)
	for _, size := range []int{0, 1, 4 << 20} {
		body := make([]byte, size)
		_, _ = rand.Read(body)
		c := jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(2), ms[2].port()))
		got, err := exchange(c, body)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if want := append(body, "rank2"...); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: got %d bytes back, want %d", size, len(got), len(want))
		}
	}
	c := jobConn(t, ms[1].mb, netip.AddrPortFrom(Addr(0), ms[0].port()))
	if got, err := exchange(c, []byte("hello")); err != nil || string(got) != "hellorank0" {
		t.Fatalf("rank 1 to rank 0: %q %v", got, err)
	}
}

// TestConnectRefusesNonMembers: a job's connection to an address that
// is no other member's is closed without a stream.
func TestConnectRefusesNonMembers(t *testing.T) {
	ms := newCluster(t, 3, Config{}, true)
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(Addr(0), ms[0].port()), // its own
		netip.AddrPortFrom(Addr(3), 80),           // no such rank
		netip.MustParseAddrPort("10.0.0.1:80"),
		netip.AddrPortFrom(Addr(1), 0),
	} {
		if err := closedOrReset(jobConn(t, ms[0].mb, dst)); err != nil {
			t.Fatalf("%s: %v", dst, err)
		}
	}
	if got := ms[0].mb.Links(); got[0].Streams+got[1].Streams != 0 {
		t.Fatalf("streams after refusals: %+v", got)
	}
}

// TestConnectRefused: a refusal of the target's supplier closes the
// job's connection.
func TestConnectRefused(t *testing.T) {
	ms := newCluster(t, 2, Config{}, true)
	ms[1].paused.Store(RefusedUnpaid)
	if err := closedOrReset(jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(1), ms[1].port()))); err != nil {
		t.Fatal(err)
	}
}

// TestAdmission: every refusal of the serving side, each with its code.
func TestAdmission(t *testing.T) {
	ms := newCluster(t, 3, Config{}, true)
	stranger := newHost(t)
	for name, c := range map[string]struct {
		from int // -1: the stranger
		edit func(*pb.ClusterOpen)
		code string
	}{
		"non-member peer":    {-1, func(*pb.ClusterOpen) {}, RefusedNoMember},
		"own rank":           {0, func(o *pb.ClusterOpen) { o.FromRank = 2 }, RefusedNoMember},
		"another's rank":     {0, func(o *pb.ClusterOpen) { o.FromRank = 1 }, RefusedNoMember},
		"rank outside":       {0, func(o *pb.ClusterOpen) { o.FromRank = 5 }, RefusedNoMember},
		"another lease":      {0, func(o *pb.ClusterOpen) { l := randomLease(); o.LeaseId = l[:] }, RefusedNoMember},
		"the sender's lease": {0, func(o *pb.ClusterOpen) { l := ms[0].mb.m.Members[0].Lease; o.LeaseId = l[:] }, RefusedNoMember},
		"stale attempt":      {0, func(o *pb.ClusterOpen) { o.Attempt = 2 }, RefusedStale},
		"version":            {0, func(o *pb.ClusterOpen) { o.Version = 2 }, RefusedVersion},
		"short lease":        {0, func(o *pb.ClusterOpen) { o.LeaseId = o.LeaseId[:31] }, RefusedMalformed},
		"port zero":          {0, func(o *pb.ClusterOpen) { o.Port = 0 }, RefusedMalformed},
		"port too large":     {0, func(o *pb.ClusterOpen) { o.Port = 70000 }, RefusedMalformed},
		"rank too large":     {0, func(o *pb.ClusterOpen) { o.FromRank = MaxNodes }, RefusedMalformed},
		"nobody listening":   {0, func(o *pb.ClusterOpen) { o.Port = uint32(closedPort(t)) }, RefusedUnreachable},
	} {
		from := stranger
		if c.from >= 0 {
			from = ms[c.from].h
		}
		o := openTo(ms, 0, 2)
		c.edit(o)
		if _, r := rawOpen(t, from, ms[2].h, o); r == nil || r.Code != c.code {
			t.Errorf("%s: got %v, want %s", name, r, c.code)
		}
	}
	// A member that follows the rules is admitted.
	st, r := rawOpen(t, ms[0].h, ms[2].h, openTo(ms, 0, 2))
	if r != nil {
		t.Fatal(r)
	}
	_, _ = st.Write([]byte("x"))
	_ = st.CloseWrite()
	if got, err := io.ReadAll(st); err != nil || string(got) != "xrank2" {
		t.Fatalf("%q %v", got, err)
	}
}

// TestAdmissionOversizedOpen: an Open over MaxOpenSize is refused
// malformed.
func TestAdmissionOversizedOpen(t *testing.T) {
	ms := newCluster(t, 2, Config{}, true)
	o := openTo(ms, 0, 1)
	o.LeaseId = make([]byte, MaxOpenSize)
	if _, r := rawOpen(t, ms[0].h, ms[1].h, o); r == nil || r.Code != RefusedMalformed {
		t.Fatalf("got %v", r)
	}
}

// TestAdmissionNotRunning: a member not attached yet refuses
// not-running; paused, it refuses with the code paused gives.
func TestAdmissionNotRunning(t *testing.T) {
	ms := newCluster(t, 2, Config{}, false)
	if _, r := rawOpen(t, ms[0].h, ms[1].h, openTo(ms, 0, 1)); r == nil || r.Code != RefusedNotRunning {
		t.Fatalf("not attached: got %v", r)
	}
	ms[1].mb.Attach(dialLoopback, func() string { return ms[1].paused.Load().(string) })
	for _, code := range []string{RefusedUnpaid, RefusedNotRunning, "stopping"} {
		ms[1].paused.Store(code)
		want := code
		if code == "stopping" {
			want = RefusedNotRunning
		}
		if _, r := rawOpen(t, ms[0].h, ms[1].h, openTo(ms, 0, 1)); r == nil || r.Code != want {
			t.Fatalf("paused %q: got %v, want %s", code, r, want)
		}
	}
	ms[1].paused.Store("")
	if _, r := rawOpen(t, ms[0].h, ms[1].h, openTo(ms, 0, 1)); r != nil {
		t.Fatalf("running: %v", r)
	}
}

// TestAdmissionBounds: past PerPeer streams from one peer, and past
// PerAttempt to one membership, a stream is refused busy; one that
// ends makes room.
func TestAdmissionBounds(t *testing.T) {
	ms := newCluster(t, 3, Config{PerPeer: 2, PerAttempt: 3}, true)
	held := make([]any, 0, 3)
	for range 2 {
		st, r := rawOpen(t, ms[0].h, ms[2].h, openTo(ms, 0, 2))
		if r != nil {
			t.Fatal(r)
		}
		held = append(held, st)
	}
	if _, r := rawOpen(t, ms[0].h, ms[2].h, openTo(ms, 0, 2)); r == nil || r.Code != RefusedBusy {
		t.Fatalf("third from one peer: got %v", r)
	}
	st, r := rawOpen(t, ms[1].h, ms[2].h, openTo(ms, 1, 2))
	if r != nil {
		t.Fatalf("first from another peer: %v", r)
	}
	if _, r := rawOpen(t, ms[1].h, ms[2].h, openTo(ms, 1, 2)); r == nil || r.Code != RefusedBusy {
		t.Fatalf("fourth to the attempt: got %v", r)
	}
	// The other peer's stream ends: room for one more.
	_ = st.CloseWrite()
	if got, err := io.ReadAll(st); err != nil || string(got) != "rank2" {
		t.Fatalf("%q %v", got, err)
	}
	eventually(t, "the ended stream's release", func() bool {
		return ms[2].mb.Links()[1].Streams == 0
	})
	if _, r := rawOpen(t, ms[1].h, ms[2].h, openTo(ms, 1, 2)); r != nil {
		t.Fatalf("after one ended: %v", r)
	}
	_ = held
}

// TestLeave: leaving resets the open streams both ways and refuses new
// ones; the other members' streams to a left member fail too.
func TestLeave(t *testing.T) {
	ms := newCluster(t, 3, Config{}, true)
	c := jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(2), ms[2].port()))
	echoPing(t, c)
	eventually(t, "the stream counted on both sides", func() bool {
		return ms[0].mb.Links()[1].Streams == 1 && ms[2].mb.Links()[0].Streams == 1
	})
	ms[2].mb.Leave()
	if err := closedOrReset(c); err != nil {
		t.Fatal(err)
	}
	if _, r := rawOpen(t, ms[0].h, ms[2].h, openTo(ms, 0, 2)); r == nil || r.Code != RefusedNoMember {
		t.Fatalf("after leave: got %v", r)
	}
	if err := closedOrReset(jobConn(t, ms[1].mb, netip.AddrPortFrom(Addr(2), ms[2].port()))); err != nil {
		t.Fatal(err)
	}
	ms[2].mb.Leave() // twice is fine
	// The left lease can join again (a new membership).
	m := ms[2].mb.Manifest()
	if _, err := ms[2].svc.Join(m); err != nil {
		t.Fatal(err)
	}
	// The connecting side leaves: its connections are closed.
	c = jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(1), ms[1].port()))
	echoPing(t, c)
	ms[0].mb.Leave()
	if err := closedOrReset(c); err != nil {
		t.Fatal(err)
	}
	if err := closedOrReset(jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(1), ms[1].port()))); err != nil {
		t.Fatal(err)
	}
}

// TestJoin: a manifest not naming this node, a lease already joined and
// a closed Service are refused.
func TestJoin(t *testing.T) {
	ms := newCluster(t, 2, Config{}, true)
	m := ms[0].mb.Manifest()
	if _, err := ms[0].svc.Join(m); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("joined twice: %v", err)
	}
	m.Self = 1
	if _, err := ms[0].svc.Join(m); err == nil {
		t.Fatal("joined as another member")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a host")
	}
	ms[1].svc.Close()
	if _, err := ms[1].svc.Join(ms[1].mb.Manifest()); err == nil {
		t.Fatal("joined a closed service")
	}
	// The handler is gone with the Service.
	if err := ms[0].h.Connect(context.Background(), peer.AddrInfo{ID: ms[1].h.ID(), Addrs: ms[1].h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	// NewStream may negotiate lazily (identify told ms[0] that ms[1]
	// spoke the protocol, and its update may not have come yet): the
	// refusal then comes with the first read. A handler still serving
	// would wait for the Open instead, past the deadline.
	st, err := ms[0].h.NewStream(context.Background(), ms[1].h.ID(), Protocol)
	if err == nil {
		defer st.Reset()
		_ = st.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = st.Read(make([]byte, 1))
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a closed Service still serves the protocol (read: %v)", err)
		}
	}
}

// TestLinks: each member reports a direct link to every other one, with
// a measured round trip, and the streams open on it.
func TestLinks(t *testing.T) {
	ms := newCluster(t, 3, Config{Refresh: 100 * time.Millisecond}, true)
	c := jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(1), ms[1].port()))
	echoPing(t, c)
	for _, m := range ms {
		eventually(t, "direct links with round trips", func() bool {
			for _, l := range m.mb.Links() {
				if !l.Direct || l.RTT <= 0 {
					return false
				}
			}
			return true
		})
	}
	got := ms[0].mb.Links()
	if len(got) != 2 || got[0].Rank != 1 || got[0].Supplier != ms[1].h.ID() || got[0].Streams != 1 || got[1].Rank != 2 || got[1].Streams != 0 {
		t.Fatalf("links %+v", got)
	}
}

// FuzzCheckOpen: any bytes decode to an Open that CheckOpen accepts only
// with its fields in range, and never panic.
func FuzzCheckOpen(f *testing.F) {
	good, _ := proto.Marshal(&pb.ClusterOpen{Version: 1, LeaseId: make([]byte, 32), Attempt: 1, FromRank: 3, Port: 8000})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &pb.ClusterOpen{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		req, err := CheckOpen(m)
		if err != nil {
			return
		}
		if m.Version != Version || req.Port == 0 || uint32(req.Port) != m.Port || req.FromRank >= MaxNodes ||
			uint32(req.FromRank) != m.FromRank || !bytes.Equal(req.Lease[:], m.LeaseId) {
			t.Fatalf("accepted %v as %+v", m, req)
		}
	})
}

// FuzzReply: any bytes decode to a Reply that accepts only when its
// refused code is empty.
func FuzzReply(f *testing.F) {
	refused, _ := proto.Marshal(&pb.ClusterReply{Refused: RefusedBusy, Message: "x"})
	f.Add(refused)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &pb.ClusterReply{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		r := replyRefusal(m)
		if (r == nil) != (m.Refused == "") || (r != nil && (r.Code != m.Refused || !IsRefusal(r, m.Refused))) {
			t.Fatalf("%v read as %v", m, r)
		}
	})
}

// TestAdmissionOpenTimeout: a peer that sends no Open within
// OpenTimeout is refused malformed, and the stream is not held.
func TestAdmissionOpenTimeout(t *testing.T) {
	ms := newCluster(t, 2, Config{OpenTimeout: 200 * time.Millisecond}, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ms[0].h.Connect(ctx, peer.AddrInfo{ID: ms[1].h.ID(), Addrs: ms[1].h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	st, err := ms[0].h.NewStream(ctx, ms[1].h.ID(), Protocol)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Reset()
	_ = st.SetDeadline(time.Now().Add(time.Minute))
	if r, err := readReply(st); err != nil || r == nil || r.Code != RefusedMalformed {
		t.Fatalf("got %v %v, want %s", r, err, RefusedMalformed)
	}
}

// TestCut: Cut resets the open streams, on either side, and the
// membership goes on admitting new ones.
func TestCut(t *testing.T) {
	ms := newCluster(t, 3, Config{}, true)
	for _, cutter := range []int{2, 0} {
		c := jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(2), ms[2].port()))
		echoPing(t, c)
		ms[cutter].mb.Cut()
		if err := closedOrReset(c); err != nil {
			t.Fatalf("cut by rank %d: %v", cutter, err)
		}
		c = jobConn(t, ms[0].mb, netip.AddrPortFrom(Addr(2), ms[2].port()))
		if got, err := exchange(c, []byte("again")); err != nil || string(got) != "againrank2" {
			t.Fatalf("after the cut by rank %d: %q %v", cutter, got, err)
		}
	}
}
