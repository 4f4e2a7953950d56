package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cluster/pb"
	"github.com/gpumesh/gpumesh/node/tunnel"
	"github.com/gpumesh/gpumesh/p2p"
)

// Membership is this node's part in one cluster attempt: the streams it
// admits from the other members and the connections its own job opens
// to them.
type Membership struct {
	s     *Service
	m     Manifest
	lease market.ID
	tag   string
	log   *slog.Logger

	ctx    context.Context // cancelled by Leave
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	dial     func(ctx context.Context, port uint16) (net.Conn, error)
	paused   func() string
	left     bool
	cut      chan struct{}   // closed by Cut and Leave: the open streams end
	admitted int             // inbound streams open
	in       map[peer.ID]int // inbound streams open per remote peer
	open     map[peer.ID]int // streams open per remote peer, both ways
}

// Manifest is the cluster attempt this membership is for.
func (mb *Membership) Manifest() Manifest { return mb.m }

// others are the members other than this node, in rank order.
func (mb *Membership) others() []Member {
	out := make([]Member, 0, len(mb.m.Members)-1)
	for _, o := range mb.m.Members {
		if o.Rank != mb.m.Self {
			out = append(out, o)
		}
	}
	return out
}

// lists reports whether the manifest has from as the supplier of rank,
// another rank than the own.
func (mb *Membership) lists(from peer.ID, rank int) bool {
	return rank >= 0 && rank < len(mb.m.Members) && rank != mb.m.Self && mb.m.Members[rank].Supplier == from
}

// Attach gives the membership its way into the own job: dial connects to
// a port of the job's cluster address (the runtime's
// ClusterDialer.DialCluster), and paused says whether the job may take
// connections now ("" when running, else RefusedNotRunning or
// RefusedUnpaid). Until Attach (or with a nil dial), streams are refused
// not-running.
func (mb *Membership) Attach(dial func(ctx context.Context, port uint16) (net.Conn, error), paused func() string) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	mb.dial, mb.paused = dial, paused
}

// Leave ends the membership: further streams are refused, the open ones
// (both ways) are reset, and the member links are no longer protected.
// It waits for the streams' goroutines and may be called more than once.
func (mb *Membership) Leave() {
	mb.s.mu.Lock()
	if mb.s.byLease[mb.lease] == mb {
		delete(mb.s.byLease, mb.lease)
	}
	mb.s.mu.Unlock()
	mb.mu.Lock()
	first := !mb.left
	if first {
		close(mb.cut)
	}
	mb.left = true
	mb.mu.Unlock()
	mb.cancel()
	mb.wg.Wait()
	if first {
		for _, o := range mb.others() {
			mb.s.h.ConnManager().Unprotect(o.Supplier, mb.tag)
		}
		mb.log.Debug("left the cluster attempt")
	}
}

// Cut resets every cluster stream open now, both ways, and stays a
// member: for a job halted for payment, whose new streams paused
// refuses, or restarted in place.
func (mb *Membership) Cut() {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if !mb.left {
		close(mb.cut)
		mb.cut = make(chan struct{})
	}
}

// enter counts a stream with p against the membership (inbound ones
// against its bounds too), or refuses it. cut closes when the stream
// must end.
func (mb *Membership) enter(p peer.ID, inbound bool) (cut <-chan struct{}, release func(), no *Refusal) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	switch {
	case mb.left:
		return nil, nil, Refuse(RefusedNoMember, "no cluster here has that lease with this peer as a member")
	case inbound && mb.admitted >= mb.s.cfg.PerAttempt:
		return nil, nil, Refuse(RefusedBusy, "%d streams open to this cluster attempt, its limit", mb.admitted)
	case inbound && mb.in[p] >= mb.s.cfg.PerPeer:
		return nil, nil, Refuse(RefusedBusy, "%d streams open from this peer, its limit", mb.in[p])
	}
	if inbound {
		mb.admitted++
		mb.in[p]++
	}
	mb.open[p]++
	mb.wg.Add(1)
	return mb.cut, func() {
		mb.mu.Lock()
		if inbound {
			mb.admitted--
			if mb.in[p]--; mb.in[p] == 0 {
				delete(mb.in, p)
			}
		}
		if mb.open[p]--; mb.open[p] == 0 {
			delete(mb.open, p)
		}
		mb.mu.Unlock()
		mb.wg.Done()
	}, nil
}

// running says whether the own job takes connections now: its dial, or
// a refusal (not-running, unpaid).
func (mb *Membership) running() (func(ctx context.Context, port uint16) (net.Conn, error), *Refusal) {
	mb.mu.Lock()
	dial, paused := mb.dial, mb.paused
	mb.mu.Unlock()
	if dial == nil {
		return nil, Refuse(RefusedNotRunning, "the member's job is not running")
	}
	if paused != nil {
		switch code := paused(); code {
		case "":
		case RefusedUnpaid:
			return nil, Refuse(RefusedUnpaid, "the member's job is halted until the renter pays")
		default:
			return nil, Refuse(RefusedNotRunning, "the member's job is %s", code)
		}
	}
	return dial, nil
}

// accept admits st from the running check on (docs/PROTOCOL.md §41.3,
// steps 7 to 9), then pipes it to the own job's port until either side
// ends or the membership is left.
func (mb *Membership) accept(st network.Stream, req Request) {
	from := st.Conn().RemotePeer()
	dial, no := mb.running()
	if no != nil {
		mb.s.refuse(st, no)
		return
	}
	cut, release, no := mb.enter(from, true)
	if no != nil {
		mb.s.refuse(st, no)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(mb.ctx, mb.s.cfg.DialTimeout)
	conn, err := dial(ctx, req.Port)
	cancel()
	if err != nil {
		mb.s.refuse(st, Refuse(RefusedUnreachable, "port %d of rank %d: %v", req.Port, mb.m.Self, err))
		return
	}
	jc, ok := conn.(tunnel.HalfConn)
	if !ok {
		conn.Close()
		mb.s.refuse(st, Refuse(RefusedUnreachable, "port %d of rank %d: a %T cannot half-close", req.Port, mb.m.Self, conn))
		return
	}
	if err := p2p.WriteMsg(st, &pb.ClusterReply{}); err != nil {
		conn.Close()
		_ = st.Reset()
		return
	}
	_ = st.SetDeadline(time.Time{})
	n := tunnel.Join(st, jc, cut)
	mb.log.Debug("cluster stream closed", "from_rank", req.FromRank, "port", req.Port, "in", n.AToB, "out", n.BToA)
}

// Connect carries conn, a connection the own job opened to dst (another
// member's cluster address and a port), to that member's job: it opens
// a stream to the member's supplier over a direct connection (retrying
// for up to Config.LinkWait while none exists, hole punching under way),
// sends the Open and, once accepted, pipes bytes both ways until both
// sides are done. It owns conn: a dst that is no other member's address,
// a refusal or no link closes it (with a reset, as a refused connect
// looks to the job). It blocks for the connection's life; the runtime
// calls it in a goroutine of its own (runtime.ClusterNet.Connect).
func (mb *Membership) Connect(conn net.Conn, dst netip.AddrPort) {
	rank, ok := RankOf(dst.Addr(), len(mb.m.Members))
	if !ok || rank == mb.m.Self || dst.Port() == 0 {
		mb.log.Debug("cluster connection to no other member", "dst", dst)
		abort(conn)
		return
	}
	hc, ok := conn.(tunnel.HalfConn)
	if !ok {
		mb.log.Warn("cluster connection cannot half-close", "type", fmt.Sprintf("%T", conn))
		abort(conn)
		return
	}
	to := mb.m.Members[rank]
	cut, release, no := mb.enter(to.Supplier, false)
	if no != nil {
		abort(conn)
		return
	}
	defer release()
	st, err := mb.openStream(to, dst.Port())
	if err != nil {
		mb.log.Info("cluster connection failed", "to_rank", rank, "port", dst.Port(), "err", err)
		abort(conn)
		return
	}
	select {
	case <-cut: // cut while the stream opened
		_ = st.Reset()
		abort(conn)
		return
	default:
	}
	n := tunnel.Join(hc, st, cut)
	mb.log.Debug("cluster connection closed", "to_rank", rank, "port", dst.Port(), "out", n.AToB, "in", n.BToA)
}

// abort closes c with a reset where it can, so that the job sees its
// connection refused rather than ended.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// directDial marks ctx for dials of member links: direct addresses
// only, and no dial backoff (a failed attempt, such as a TCP
// simultaneous open with the other side's own dial, is tried again at
// the next retry rather than after libp2p's backoff of 5 s and more).
func directDial(ctx context.Context) context.Context {
	return network.WithForceDirectDial(ctx, "gpumesh cluster member")
}

// linkRetry is how often a connection that has no direct link to its
// target's supplier tries again.
const linkRetry = 500 * time.Millisecond

// openStream opens a stream to to's supplier on a direct connection,
// waiting up to LinkWait for one, and runs the Open/Reply exchange: the
// stream ready for bytes, or an error (a *Refusal when refused).
func (mb *Membership) openStream(to Member, port uint16) (network.Stream, error) {
	ctx, cancel := context.WithTimeout(mb.ctx, mb.s.cfg.LinkWait)
	defer cancel()
	var last error
	for try := 0; ; try++ {
		// Without network.WithAllowLimitedConn, NewStream never runs on a
		// relayed connection: it waits for a direct one (a hole punch).
		// Every other try dials direct addresses only, past libp2p's dial
		// backoff (see directDial); the others may dial through a relay,
		// which is what starts a hole punch.
		sctx := ctx
		if try%2 == 1 {
			sctx = directDial(ctx)
		}
		st, err := mb.s.h.NewStream(sctx, to.Supplier, Protocol)
		if err == nil && st.Conn().Stat().Limited {
			_ = st.Reset()
			err = network.ErrLimitedConn
		}
		if err == nil {
			return mb.handshake(st, to, port)
		}
		last = err
		mb.log.Debug("cluster stream: no direct connection yet", "to_rank", to.Rank, "err", err)
		select {
		case <-ctx.Done():
			if mb.ctx.Err() != nil {
				return nil, errors.New("left the cluster attempt")
			}
			return nil, fmt.Errorf("no direct connection to rank %d's supplier %s within %s: %w", to.Rank, to.Supplier, mb.s.cfg.LinkWait, last)
		case <-time.After(linkRetry):
		}
	}
}

// handshake sends the Open on st and reads the Reply, within
// OpenTimeout.
func (mb *Membership) handshake(st network.Stream, to Member, port uint16) (network.Stream, error) {
	_ = st.SetDeadline(time.Now().Add(mb.s.cfg.OpenTimeout))
	open := &pb.ClusterOpen{Version: Version, LeaseId: to.Lease[:], Attempt: mb.m.Attempt, FromRank: uint32(mb.m.Self), Port: uint32(port)}
	if err := p2p.WriteMsg(st, open); err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("send open: %w", err)
	}
	r, err := readReply(st)
	if err != nil {
		_ = st.Reset()
		return nil, err
	}
	if r != nil {
		_ = st.Close()
		return nil, r
	}
	_ = st.SetDeadline(time.Time{})
	return st, nil
}

// readReply reads a Reply: nil when it accepts, the refusal otherwise.
func readReply(st network.Stream) (*Refusal, error) {
	m := &pb.ClusterReply{}
	if err := p2p.ReadMsg(st, MaxReplySize, m); err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	return replyRefusal(m), nil
}

// replyRefusal is the refusal a decoded Reply says, nil when it accepts.
func replyRefusal(m *pb.ClusterReply) *Refusal {
	if m.Refused == "" {
		return nil
	}
	return &Refusal{Protocol: refusalOf, Code: m.Refused, Message: m.Message}
}

// Link is the state of this node's link to another member's supplier.
type Link struct {
	Rank     int
	Supplier peer.ID
	// Direct: a direct (not relayed) connection to the supplier is open.
	Direct bool
	// RTT is the peerstore's round-trip estimate (pings while joined);
	// 0 when none was measured yet.
	RTT time.Duration
	// Streams are the cluster streams open with the supplier, both ways.
	Streams int
}

// Links are this node's links to the other members, in rank order.
func (mb *Membership) Links() []Link {
	others := mb.others()
	out := make([]Link, 0, len(others))
	mb.mu.Lock()
	defer mb.mu.Unlock()
	for _, o := range others {
		out = append(out, Link{
			Rank: o.Rank, Supplier: o.Supplier, Direct: mb.direct(o.Supplier),
			RTT: mb.s.h.Peerstore().LatencyEWMA(o.Supplier), Streams: mb.open[o.Supplier],
		})
	}
	return out
}

// direct reports whether a direct connection to p is open.
func (mb *Membership) direct(p peer.ID) bool {
	for _, c := range mb.s.h.Network().ConnsToPeer(p) {
		if !c.Stat().Limited {
			return true
		}
	}
	return false
}

// keepLinks dials the other members' suppliers at once and then every
// Refresh while no direct connection to them is open, and pings those
// that have one so that Links has round-trip times.
func (mb *Membership) keepLinks() {
	defer mb.wg.Done()
	t := time.NewTicker(mb.s.cfg.Refresh)
	defer t.Stop()
	for first := true; ; first = false {
		var wg sync.WaitGroup
		for _, o := range mb.others() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Two members dialling each other at the same moment over
				// TCP can meet in one simultaneous open, where both sides
				// take the client's part and the handshake fails on both:
				// at first only the lower rank dials; the higher one waits
				// a little for that connection before it dials too.
				if first && o.Rank < mb.m.Self {
					select {
					case <-mb.ctx.Done():
						return
					case <-time.After(2 * linkRetry):
					}
				}
				mb.link(o)
			}()
		}
		wg.Wait()
		select {
		case <-mb.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// link makes sure of a direct connection to o's supplier and measures
// its round trip. It dials direct addresses first (past the dial
// backoff); when none answers, it dials as libp2p will, through a relay
// too: a relayed connection is where a hole punch starts, and the
// punched connection is the direct one.
func (mb *Membership) link(o Member) {
	ctx, cancel := context.WithTimeout(mb.ctx, mb.s.cfg.Refresh)
	defer cancel()
	if !mb.direct(o.Supplier) {
		ai := peer.AddrInfo{ID: o.Supplier, Addrs: o.Addrs}
		if err := mb.s.h.Connect(directDial(ctx), ai); err != nil {
			mb.log.Debug("cluster member link: no direct dial", "to_rank", o.Rank, "err", err)
			if err := mb.s.h.Connect(ctx, ai); err != nil {
				mb.log.Debug("cluster member link", "to_rank", o.Rank, "err", err)
			}
			return
		}
		if !mb.direct(o.Supplier) {
			return
		}
	}
	select { // ping records the round trip in the peerstore
	case res := <-ping.Ping(ctx, mb.s.h, o.Supplier):
		if res.Error != nil {
			mb.log.Debug("cluster member ping", "to_rank", o.Rank, "err", res.Error)
		}
	case <-ctx.Done():
	}
}
