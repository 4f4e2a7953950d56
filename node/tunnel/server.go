package tunnel

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/node/tunnel/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Target is an admitted tunnel's far end: the supplier's way into one
// attempt's network.
type Target struct {
	// Dial connects to the port inside the job's network.
	Dial func(ctx context.Context) (net.Conn, error)
	// Done closes when the attempt ends (or stops being paid for): its
	// tunnels are cut then.
	Done <-chan struct{}
	// Attempt names the attempt, for the per-attempt limit and the logs.
	Attempt string
}

// Resolver admits an Open: from must be the renter of the lease whose
// attempt runs here, the attempt running and paid for, and the port one
// its spec declares. It refuses with a *Refusal (RefusedNoAttempt,
// RefusedNotRunning, RefusedUnpaid, RefusedPort, RefusedNoNetwork).
type Resolver func(from peer.ID, req Request) (Target, *Refusal)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Host serves Protocol.
	Host interface {
		SetStreamHandler(protocol.ID, network.StreamHandler)
		RemoveStreamHandler(protocol.ID)
	}
	// Resolve admits each Open (required).
	Resolve Resolver
	// MaxPerAttempt and MaxTunnels bound the open tunnels of one attempt
	// and of the node (defaults MaxPerAttempt, MaxTunnels).
	MaxPerAttempt, MaxTunnels int
	// OpenTimeout and DialTimeout bound the read of the Open and the
	// connect to the job (defaults OpenTimeout, DialTimeout).
	OpenTimeout, DialTimeout time.Duration
	Log                      *slog.Logger
}

// Server is a supplier's end of the tunnel protocol.
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	mu        sync.Mutex
	open      int
	perTarget map[string]int
	closed    bool
	stop      chan struct{}
	wg        sync.WaitGroup
}

// NewServer installs the tunnel protocol on cfg.Host.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Host == nil || cfg.Resolve == nil {
		return nil, errors.New("tunnel server: Host and Resolve are required")
	}
	cfg.MaxPerAttempt = cmp.Or(cfg.MaxPerAttempt, MaxPerAttempt)
	cfg.MaxTunnels = cmp.Or(cfg.MaxTunnels, MaxTunnels)
	cfg.OpenTimeout = cmp.Or(cfg.OpenTimeout, OpenTimeout)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, DialTimeout)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Log.With("sub", "tunnel"), perTarget: map[string]int{}, stop: make(chan struct{})}
	cfg.Host.SetStreamHandler(Protocol, s.handle)
	return s, nil
}

// Close removes the protocol, cuts every open tunnel and waits for them.
func (s *Server) Close() error {
	s.cfg.Host.RemoveStreamHandler(Protocol)
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Open is the number of tunnels open now.
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// refuse answers st with a refusal and closes it.
func (s *Server) refuse(st network.Stream, r *Refusal) {
	s.log.Debug("tunnel refused", "peer", st.Conn().RemotePeer(), "code", r.Code, "why", r.Message)
	_ = p2p.WriteMsg(st, &pb.Reply{Refused: r.Code, Message: r.Message})
	_ = st.Close()
}

func (s *Server) handle(st network.Stream) {
	// The service scope puts every tunnel under limits of its own
	// (p2p.TunnelService), apart from the node's other protocols.
	if err := st.Scope().SetService(p2p.TunnelService); err != nil {
		s.log.Debug("tunnel over the resource manager's limits", "peer", st.Conn().RemotePeer(), "err", err)
		_ = st.Reset()
		return
	}
	from := st.Conn().RemotePeer()
	_ = st.SetDeadline(time.Now().Add(s.cfg.OpenTimeout))
	m := &pb.Open{}
	if err := p2p.ReadMsg(st, MaxOpenSize, m); err != nil {
		s.refuse(st, Refuse(RefusedMalformed, "read open: %v", err))
		return
	}
	req, err := CheckOpen(m)
	if err != nil {
		code := RefusedMalformed
		if errors.Is(err, p2p.ErrUnsupported) {
			code = RefusedVersion
		}
		s.refuse(st, Refuse(code, "%v", err))
		return
	}
	t, no := s.cfg.Resolve(from, req)
	if no != nil {
		s.refuse(st, no)
		return
	}
	release, no := s.admit(t.Attempt)
	if no != nil {
		s.refuse(st, no)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
	conn, err := t.Dial(ctx)
	cancel()
	if err != nil {
		s.refuse(st, Refuse(RefusedUnreachable, "port %d of the job: %v", req.Port, err))
		return
	}
	jc, ok := conn.(HalfConn)
	if !ok {
		conn.Close()
		s.refuse(st, Refuse(RefusedUnreachable, "port %d of the job: a %T cannot half-close", req.Port, conn))
		return
	}
	if err := p2p.WriteMsg(st, &pb.Reply{}); err != nil {
		conn.Close()
		_ = st.Reset()
		return
	}
	_ = st.SetDeadline(time.Time{})
	cut, over := make(chan struct{}), make(chan struct{})
	go func() { // the tunnel is cut when its attempt ends or the server closes
		select {
		case <-t.Done:
			close(cut)
		case <-s.stop:
			close(cut)
		case <-over:
		}
	}()
	n := Join(st, jc, cut)
	close(over)
	s.log.Debug("tunnel closed", "peer", from, "attempt", t.Attempt, "port", req.Port, "in", n.AToB, "out", n.BToA)
}

// admit counts a tunnel against the limits, or refuses it as busy.
func (s *Server) admit(attempt string) (release func(), no *Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, Refuse(RefusedBusy, "the supplier is shutting down")
	case s.open >= s.cfg.MaxTunnels:
		return nil, Refuse(RefusedBusy, "%d tunnels open on this supplier, its limit", s.open)
	case s.perTarget[attempt] >= s.cfg.MaxPerAttempt:
		return nil, Refuse(RefusedBusy, "%d tunnels open to this attempt, its limit", s.perTarget[attempt])
	}
	s.open++
	s.perTarget[attempt]++
	s.wg.Add(1)
	return func() {
		s.mu.Lock()
		s.open--
		if s.perTarget[attempt]--; s.perTarget[attempt] == 0 {
			delete(s.perTarget, attempt)
		}
		s.mu.Unlock()
		s.wg.Done()
	}, nil
}
