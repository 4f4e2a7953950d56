package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cluster/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Config configures a Service.
type Config struct {
	// Host serves Protocol and dials the other members' suppliers
	// (required).
	Host host.Host
	Log  *slog.Logger
	// PerAttempt and PerPeer bound the admitted streams of one
	// membership, and of one remote peer in it (defaults PerAttempt,
	// PerPeer).
	PerAttempt, PerPeer int
	// OpenTimeout bounds the read of an Open (serving side) and of the
	// Reply (dialling side) (default OpenTimeout).
	OpenTimeout time.Duration
	// DialTimeout bounds the connect to the own job (default DialTimeout).
	DialTimeout time.Duration
	// LinkWait is how long the dialling side waits for a direct
	// connection to the target's supplier (default LinkWait).
	LinkWait time.Duration
	// Refresh is how often a membership redials the members it has no
	// direct connection to and pings those it has (default 10 s).
	Refresh time.Duration
}

// Service is a node's end of the cluster protocol: its memberships, and
// the stream handler that admits the other members' streams.
type Service struct {
	cfg Config
	h   host.Host
	log *slog.Logger

	mu      sync.Mutex
	byLease map[market.ID]*Membership // by the own member's lease
	pending map[network.Stream]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// New makes a Service and registers its stream handler on cfg.Host.
func New(cfg Config) (*Service, error) {
	if cfg.Host == nil {
		return nil, errors.New("cluster service: Host is required")
	}
	cfg.PerAttempt = cmp.Or(cfg.PerAttempt, PerAttempt)
	cfg.PerPeer = cmp.Or(cfg.PerPeer, PerPeer)
	cfg.OpenTimeout = cmp.Or(cfg.OpenTimeout, OpenTimeout)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, DialTimeout)
	cfg.LinkWait = cmp.Or(cfg.LinkWait, LinkWait)
	cfg.Refresh = cmp.Or(cfg.Refresh, 10*time.Second)
	if cfg.PerAttempt < 0 || cfg.PerPeer < 0 || cfg.OpenTimeout < 0 || cfg.DialTimeout < 0 || cfg.LinkWait < 0 || cfg.Refresh < 0 {
		return nil, errors.New("cluster service: negative bound or timeout")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Service{
		cfg: cfg, h: cfg.Host, log: cfg.Log.With("sub", "cluster"),
		byLease: map[market.ID]*Membership{}, pending: map[network.Stream]struct{}{},
	}
	cfg.Host.SetStreamHandler(Protocol, s.handle)
	return s, nil
}

// Close removes the stream handler, ends every membership (as Leave) and
// waits for the streams it served.
func (s *Service) Close() error {
	s.h.RemoveStreamHandler(Protocol)
	s.mu.Lock()
	s.closed = true
	for st := range s.pending {
		_ = st.Reset()
	}
	mbs := make([]*Membership, 0, len(s.byLease))
	for _, mb := range s.byLease {
		mbs = append(mbs, mb)
	}
	s.mu.Unlock()
	for _, mb := range mbs {
		mb.Leave()
	}
	s.wg.Wait()
	return nil
}

// Join makes this node a member of the cluster attempt m: it admits
// streams from the other members' suppliers for m, dials those suppliers
// now (from their Addrs) and protects the connections in the connection
// manager, so that hole punching starts before the job needs them. The
// membership admits nothing but refusals (not-running) until Attach.
func (s *Service) Join(m Manifest) (*Membership, error) {
	if err := m.Check(s.h.ID()); err != nil {
		return nil, err
	}
	m.Members = append([]Member(nil), m.Members...)
	ctx, cancel := context.WithCancel(context.Background())
	mb := &Membership{
		s: s, m: m, lease: m.Lease(),
		tag:    fmt.Sprintf("gpumesh-cluster-%s-%d", m.Job, m.Attempt),
		ctx:    ctx,
		cancel: cancel,
		in:     map[peer.ID]int{},
		cut:    make(chan struct{}),
		open:   map[peer.ID]int{},
		log:    s.log.With("job", m.Job, "attempt", m.Attempt, "rank", m.Self),
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		cancel()
		return nil, errors.New("cluster service closed")
	case s.byLease[mb.lease] != nil:
		s.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("cluster: lease %s is already a member of job %s", mb.lease.Short(), s.byLease[mb.lease].m.Job)
	}
	s.byLease[mb.lease] = mb
	s.mu.Unlock()
	for _, o := range mb.others() {
		s.h.Peerstore().AddAddrs(o.Supplier, o.Addrs, time.Hour)
		s.h.ConnManager().Protect(o.Supplier, mb.tag)
	}
	mb.wg.Add(1)
	go mb.keepLinks()
	return mb, nil
}

// membership is the membership on the own lease lease, or nil.
func (s *Service) membership(lease market.ID) *Membership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byLease[lease]
}

// replyTimeout bounds the write of a refusal.
const replyTimeout = 5 * time.Second

// refuse answers st with a refusal and closes it.
func (s *Service) refuse(st network.Stream, r *Refusal) {
	s.log.Debug("cluster stream refused", "peer", st.Conn().RemotePeer(), "code", r.Code, "why", r.Message)
	// The Open's deadline may have passed (a refusal for its timeout):
	// the Reply gets a little time of its own.
	_ = st.SetWriteDeadline(time.Now().Add(replyTimeout))
	_ = p2p.WriteMsg(st, &pb.ClusterReply{Refused: r.Code, Message: r.Message})
	_ = st.Close()
}

// handle admits a stream (docs/PROTOCOL.md §41.3, in that order) and
// pipes it to the own job's port.
func (s *Service) handle(st network.Stream) {
	// The service scope puts every cluster stream under limits of its
	// own (p2p.ClusterService), apart from the node's other protocols.
	if err := st.Scope().SetService(p2p.ClusterService); err != nil {
		s.log.Debug("cluster stream over the resource manager's limits", "peer", st.Conn().RemotePeer(), "err", err)
		_ = st.Reset()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = st.Reset()
		return
	}
	s.pending[st] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	admitted := func() {
		s.mu.Lock()
		delete(s.pending, st)
		s.mu.Unlock()
	}
	mb, req, r := s.admit(st)
	admitted()
	if r != nil {
		s.refuse(st, r)
		return
	}
	mb.accept(st, req)
}

// admit reads and checks a stream's Open up to its membership and
// attempt (docs/PROTOCOL.md §41.3, steps 2 to 6): the membership and the
// request, or a refusal.
func (s *Service) admit(st network.Stream) (*Membership, Request, *Refusal) {
	from := st.Conn().RemotePeer()
	if st.Conn().Stat().Limited {
		return nil, Request{}, Refuse(RefusedRelayed, "cluster streams need a direct connection")
	}
	_ = st.SetDeadline(time.Now().Add(s.cfg.OpenTimeout))
	m := &pb.ClusterOpen{}
	if err := p2p.ReadMsg(st, MaxOpenSize, m); err != nil {
		return nil, Request{}, Refuse(RefusedMalformed, "read open: %v", err)
	}
	req, err := CheckOpen(m)
	if err != nil {
		code := RefusedMalformed
		if errors.Is(err, p2p.ErrUnsupported) {
			code = RefusedVersion
		}
		return nil, Request{}, Refuse(code, "%v", err)
	}
	mb := s.membership(req.Lease)
	if mb == nil || !mb.lists(from, req.FromRank) {
		return nil, Request{}, Refuse(RefusedNoMember, "no cluster here has that lease with this peer as a member")
	}
	if req.Attempt != mb.m.Attempt {
		return nil, Request{}, Refuse(RefusedStale, "cluster attempt %d runs here, not %d", mb.m.Attempt, req.Attempt)
	}
	return mb, req, nil
}
