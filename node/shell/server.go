package shell

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/p2p"
)

// Target is an admitted shell's attempt.
type Target struct {
	Stdio *Stdio
	// Resize sets the size of the attempt's terminal; nil without one.
	Resize func(Size) error
}

// Resolver admits an Open: from must be the renter of the lease whose
// attempt runs here, that attempt running with a standard input. It
// refuses with a *Refusal (RefusedNoAttempt, RefusedNotRunning).
type Resolver func(from peer.ID, o Open) (Target, *Refusal)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Host serves Protocol.
	Host interface {
		SetStreamHandler(protocol.ID, network.StreamHandler)
		RemoveStreamHandler(protocol.ID)
	}
	// Resolve admits each Open (required).
	Resolve Resolver
	// OpenTimeout bounds the read of the Open (default OpenTimeout).
	OpenTimeout time.Duration
	Log         *slog.Logger
}

// Server is a supplier's end of the shell protocol.
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// NewServer installs the shell protocol on cfg.Host.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Host == nil || cfg.Resolve == nil {
		return nil, errors.New("shell server: Host and Resolve are required")
	}
	cfg.OpenTimeout = cmp.Or(cfg.OpenTimeout, OpenTimeout)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Log.With("sub", "shell"), stop: make(chan struct{})}
	cfg.Host.SetStreamHandler(Protocol, s.handle)
	return s, nil
}

// Close removes the protocol, cuts every attached shell (their jobs see a
// hang-up) and waits for them.
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

// refuse answers st with a refusal and closes it.
func (s *Server) refuse(st network.Stream, r *Refusal) {
	s.log.Debug("shell refused", "peer", st.Conn().RemotePeer(), "code", r.Code, "why", r.Message)
	_ = WriteFrame(st, KindReply, EncodeReply(r))
	_ = st.Close()
}

func (s *Server) handle(st network.Stream) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = st.Reset()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	from := st.Conn().RemotePeer()
	_ = st.SetDeadline(time.Now().Add(s.cfg.OpenTimeout))
	rd := NewReader(st)
	f, err := rd.Next()
	if err == nil && f.Kind != KindOpen {
		err = p2p.Errf(p2p.ErrMalformed, "first frame %q, want an open", f.Kind)
	}
	if err != nil {
		s.refuse(st, Refuse(RefusedMalformed, "read open: %v", err))
		return
	}
	o := f.Open()
	if err := CheckOpen(o); err != nil {
		code := RefusedMalformed
		if errors.Is(err, p2p.ErrUnsupported) {
			code = RefusedVersion
		}
		s.refuse(st, Refuse(code, "%v", err))
		return
	}
	t, no := s.cfg.Resolve(from, o)
	if no == nil && o.TTY != t.Stdio.TTY() {
		no = Refuse(RefusedTTY, "the open asks for a terminal: %v, the attempt has one: %v", o.TTY, t.Stdio.TTY())
	}
	if no != nil {
		s.refuse(st, no)
		return
	}
	if err := t.Stdio.Attach(st); err != nil {
		code := RefusedAttached
		if errors.Is(err, errEnded) {
			code = RefusedNotRunning
		}
		s.refuse(st, Refuse(code, "%v", err))
		return
	}
	_ = st.SetDeadline(time.Time{})
	if o.TTY && t.Resize != nil {
		_ = t.Resize(o.Size) // the renter's terminal may differ from the one the job started on
	}
	log := s.log.With("peer", from, "attempt", o.Attempt)
	log.Debug("shell attached", "tty", o.TTY)
	read := make(chan struct{})
	go func() {
		defer close(read)
		s.serveInput(rd, t, log)
	}()
	select {
	case <-t.Stdio.Finished():
		_ = st.Close()
	case <-t.Stdio.Hangup():
		_ = st.Reset()
	case <-s.stop:
		_ = st.Reset()
		t.Stdio.lost()
	}
	<-read
	log.Debug("shell detached")
}

// serveInput carries the renter's frames to the job until the stream
// ends. A clean end of the stream ends the job's stdin only; a failure or
// a bad frame is a hang-up.
func (s *Server) serveInput(rd *Reader, t Target, log *slog.Logger) {
	for {
		f, err := rd.Next()
		switch {
		case errors.Is(err, io.EOF):
			t.Stdio.closeInput()
			return
		case err == nil && f.Kind == KindStdin:
			_ = t.Stdio.input(f.Payload) // an ended stdin drops it
		case err == nil && f.Kind == KindEOF:
			t.Stdio.closeInput()
		case err == nil && f.Kind == KindResize:
			if t.Resize != nil {
				if err := t.Resize(f.Size()); err != nil {
					log.Debug("resize", "err", err)
				}
			}
		default:
			if err == nil {
				err = p2p.Errf(p2p.ErrMalformed, "frame %q from the renter", f.Kind)
			}
			log.Debug("shell input ended", "err", err)
			t.Stdio.lost()
			return
		}
	}
}

// Opener opens streams: a node's job dialer (a direct connection first).
type Opener interface {
	NewStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error)
}

// Dial opens a shell stream to supplier p for o and reads its Reply: on
// acceptance the stream carries the shell's frames (the renter's input
// kinds out, the output kinds in); a refusal is a *Refusal.
func Dial(ctx context.Context, h Opener, p peer.ID, o Open) (network.Stream, error) {
	o.Version = Version
	st, err := h.NewStream(ctx, p, Protocol)
	if err != nil {
		return nil, err
	}
	dl := time.Now().Add(OpenTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = st.SetDeadline(dl)
	if err := WriteFrame(st, KindOpen, o.Encode()); err != nil {
		_ = st.Reset()
		return nil, err
	}
	f, err := NewReader(st).Next()
	if err == nil && f.Kind != KindReply {
		err = p2p.Errf(p2p.ErrMalformed, "first frame %q, want a reply", f.Kind)
	}
	if err != nil {
		_ = st.Reset()
		return nil, err
	}
	if r := f.Reply(); r != nil {
		_ = st.Close()
		return nil, r
	}
	_ = st.SetDeadline(time.Time{})
	return st, nil
}
