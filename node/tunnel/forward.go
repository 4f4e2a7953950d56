package tunnel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/tunnel/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Endpoint is one attempt a Forwarder may carry connections to.
type Endpoint struct {
	Peer    peer.ID // the attempt's supplier
	LeaseID [32]byte
	Attempt uint32
}

func (e Endpoint) key() string { return fmt.Sprintf("%x/%d", e.LeaseID[:8], e.Attempt) }

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	// Listen is the local address ("127.0.0.1:0" when empty).
	Listen string
	// Port is the job's port that connections go to.
	Port uint16
	// Endpoints gives the attempts that serve now (the job's running,
	// healthy replicas); it is called for every connection (required).
	Endpoints func() []Endpoint
	// OpenStream opens a Protocol stream to a supplier (required). A node
	// opens it over a direct connection: a relayed one is cut after 2
	// minutes or 128 KiB.
	OpenStream func(ctx context.Context, p peer.ID) (network.Stream, error)
	// Wait is how long a connection waits for an endpoint when none
	// serves (a failover under way) before it is closed (default 30 s).
	Wait time.Duration
	// Retry is how often the endpoints are asked again while waiting
	// (default 250 ms).
	Retry time.Duration
	// MaxConns bounds the connections carried or waiting at once (default
	// MaxTunnels); one more is closed at once, counted as failed.
	MaxConns int
	Log      *slog.Logger
}

// ForwardStats count a Forwarder's connections.
type ForwardStats struct {
	Open     int64 `json:"open"`     // connections carried now
	Accepted int64 `json:"accepted"` // connections accepted in all
	Failed   int64 `json:"failed"`   // connections closed without a tunnel
	BytesIn  int64 `json:"bytes_in"` // from the job to local clients
	BytesOut int64 `json:"bytes_out"`
}

// Forwarder listens on a local address and carries every connection it
// accepts to the job's port through a tunnel stream.
type Forwarder struct {
	cfg ForwarderConfig
	ln  net.Listener
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	active  map[string]int // open connections per endpoint
	turn    int            // where the next pick starts its scan
	conns   map[net.Conn]struct{}
	stats   ForwardStats
	lastErr string
}

// Forward starts a Forwarder on cfg.Listen.
func Forward(cfg ForwarderConfig) (*Forwarder, error) {
	if cfg.Endpoints == nil || cfg.OpenStream == nil || cfg.Port == 0 {
		return nil, errors.New("forward: Endpoints, OpenStream and Port are required")
	}
	cfg.Listen = cmp.Or(cfg.Listen, "127.0.0.1:0")
	cfg.Wait = cmp.Or(cfg.Wait, 30*time.Second)
	cfg.Retry = cmp.Or(cfg.Retry, 250*time.Millisecond)
	cfg.MaxConns = cmp.Or(cfg.MaxConns, MaxTunnels)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("forward port %d: listen on %s: %w", cfg.Port, cfg.Listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Forwarder{
		cfg: cfg, ln: ln, log: cfg.Log.With("sub", "forward", "addr", ln.Addr().String(), "port", cfg.Port),
		ctx: ctx, cancel: cancel, active: map[string]int{}, conns: map[net.Conn]struct{}{},
	}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr is the local address the Forwarder listens on.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

// Port is the job's port it carries connections to.
func (f *Forwarder) Port() uint16 { return f.cfg.Port }

// Stats are the Forwarder's counts now, and the last reason a connection
// found no tunnel ("" when none failed).
func (f *Forwarder) Stats() (ForwardStats, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.lastErr
}

// Close stops listening, cuts the connections it carries and waits for
// them.
func (f *Forwarder) Close() error {
	f.cancel()
	err := f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if f.ctx.Err() == nil {
				f.log.Warn("forward: accept", "err", err)
			}
			return
		}
		f.mu.Lock()
		if f.ctx.Err() != nil {
			f.mu.Unlock()
			c.Close()
			return
		}
		if len(f.conns) >= f.cfg.MaxConns {
			f.stats.Accepted++
			f.stats.Failed++
			f.lastErr = fmt.Sprintf("%d connections at once, the forward's limit", len(f.conns))
			f.mu.Unlock()
			c.Close()
			continue
		}
		f.conns[c] = struct{}{}
		f.stats.Accepted++
		f.wg.Add(1)
		f.mu.Unlock()
		go f.carry(c)
	}
}

// carry takes one local connection through a tunnel, or closes it.
func (f *Forwarder) carry(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		c.Close()
	}()
	st, ep, err := f.dial()
	if err != nil {
		f.mu.Lock()
		f.stats.Failed++
		f.lastErr = err.Error()
		f.mu.Unlock()
		f.log.Info("forward: no tunnel for a connection", "err", err)
		return
	}
	k := ep.key()
	f.mu.Lock()
	f.stats.Open++
	f.mu.Unlock()
	lc, ok := c.(HalfConn)
	if !ok {
		_ = st.Reset()
		return
	}
	n := Join(lc, st, f.ctx.Done())
	f.mu.Lock()
	f.stats.Open--
	f.stats.BytesOut += n.AToB
	f.stats.BytesIn += n.BToA
	if f.active[k]--; f.active[k] <= 0 {
		delete(f.active, k)
	}
	f.mu.Unlock()
}

// dial opens a tunnel to the endpoint with the fewest open connections,
// trying the others in that order when one refuses or cannot be reached,
// and waiting for an endpoint while none serves, up to cfg.Wait. The
// endpoint returned has been counted as active.
func (f *Forwarder) dial() (network.Stream, Endpoint, error) {
	ctx, cancel := context.WithTimeout(f.ctx, f.cfg.Wait)
	defer cancel()
	var last error
	for {
		tried := map[string]bool{}
		for {
			ep, ok := f.pick(tried)
			if !ok {
				break
			}
			st, err := f.open(ctx, ep)
			if err == nil {
				return st, ep, nil
			}
			f.mu.Lock()
			if f.active[ep.key()]--; f.active[ep.key()] <= 0 {
				delete(f.active, ep.key())
			}
			f.mu.Unlock()
			tried[ep.key()] = true
			last = fmt.Errorf("attempt %d on %s: %w", ep.Attempt, ep.Peer, err)
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = errors.New("no attempt of the job serves")
			}
			return nil, Endpoint{}, fmt.Errorf("port %d: %w (waited %s)", f.cfg.Port, last, f.cfg.Wait)
		case <-time.After(f.cfg.Retry):
		}
	}
}

// pick chooses among the endpoints not tried yet the one with the fewest
// open connections (least outstanding; ties in turn), and counts one more
// for it.
func (f *Forwarder) pick(tried map[string]bool) (Endpoint, bool) {
	eps := f.cfg.Endpoints()
	f.mu.Lock()
	defer f.mu.Unlock()
	best, found := Endpoint{}, false
	// Ties go round: start the scan one further on each time, so that
	// connections one after another spread over idle endpoints too.
	f.turn++
	for i := range eps {
		ep := eps[(i+f.turn)%len(eps)]
		if tried[ep.key()] {
			continue
		}
		if !found || f.active[ep.key()] < f.active[best.key()] {
			best, found = ep, true
		}
	}
	if found {
		f.active[best.key()]++
	}
	return best, found
}

// open opens one tunnel stream to ep and reads the supplier's Reply.
func (f *Forwarder) open(ctx context.Context, ep Endpoint) (network.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	st, err := f.cfg.OpenStream(ctx, ep.Peer)
	if err != nil {
		return nil, err
	}
	return handshake(ctx, st, ep, f.cfg.Port)
}

// handshake sends the Open on st and reads the Reply: st, ready to carry
// bytes, or an error (a *Refusal when the supplier refused).
func handshake(ctx context.Context, st network.Stream, ep Endpoint, port uint16) (network.Stream, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	if err := p2p.WriteMsg(st, &pb.Open{Version: Version, LeaseId: ep.LeaseID[:], Attempt: ep.Attempt, Port: uint32(port)}); err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("send open: %w", err)
	}
	r := &pb.Reply{}
	if err := p2p.ReadMsg(st, MaxReplySize, r); err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("read reply: %w", err)
	}
	if r.Refused != "" {
		_ = st.Close()
		return nil, &Refusal{Protocol: refusalOf, Code: r.Refused, Message: r.Message}
	}
	_ = st.SetDeadline(time.Time{})
	return st, nil
}

// Dial opens one tunnel to port of ep over st's protocol: for a caller
// that wants a single connection rather than a listener (tests, health
// checks). The stream is the connection.
func Dial(ctx context.Context, open func(ctx context.Context, p peer.ID) (network.Stream, error), ep Endpoint, port uint16) (network.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	st, err := open(ctx, ep.Peer)
	if err != nil {
		return nil, err
	}
	return handshake(ctx, st, ep, port)
}
