package netlab

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"time"
)

// queueLen bounds the packets in flight to one destination; more are
// dropped, as a congested link drops them.
const queueLen = 4096

// Wan is the lab's user-space WAN: it forwards IPv4 packets between the
// TUN devices of public hosts and NAT routers with each pair of regions'
// delay, jitter and loss, and drops them between partitioned regions.
// Start one with [StartWAN]; Close stops it and the TUN devices vanish.
type Wan struct {
	log *slog.Logger

	mu     sync.Mutex // guards the fields below
	links  map[[2]string]Link
	parted map[[2]string]bool
	rng    *rand.Rand
	flows  map[[2]netip.Addr]*flow

	eps       map[netip.Addr]*endpoint // fixed once started
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type flow struct{ packets, bytes uint64 }

// endpoint is one TUN device of the WAN.
type endpoint struct {
	addr   netip.Addr
	region string
	ns     string
	dev    io.ReadWriteCloser
	q      chan delivery
	last   time.Time // latest delivery time queued; guarded by Wan.mu
}

type delivery struct {
	at  time.Time
	src netip.Addr
	pkt []byte
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// newWan makes a WAN over the given devices (taking ownership of them) and
// starts forwarding.
func newWan(spec Spec, eps []*endpoint, log *slog.Logger) *Wan {
	w := &Wan{
		log:    log,
		links:  map[[2]string]Link{},
		parted: map[[2]string]bool{},
		rng:    rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15)),
		flows:  map[[2]netip.Addr]*flow{},
		eps:    map[netip.Addr]*endpoint{},
		done:   make(chan struct{}),
	}
	for _, a := range spec.Regions {
		for _, b := range spec.Regions {
			w.links[pairKey(a, b)] = spec.linkOf(a, b)
		}
	}
	for _, ep := range eps {
		ep.q = make(chan delivery, queueLen)
		w.eps[ep.addr] = ep
	}
	for _, ep := range eps {
		w.wg.Go(func() { w.readLoop(ep) })
		w.wg.Go(func() { w.writeLoop(ep) })
	}
	return w
}

// Partition drops every packet between regions a and b (both ways) until
// Heal. Partitioning a region from itself cuts its hosts from each other.
func (w *Wan) Partition(a, b string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.parted[pairKey(a, b)] = true
	w.log.Info("wan: partition", "a", a, "b", b)
}

// Heal ends a partition between regions a and b.
func (w *Wan) Heal(a, b string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.parted, pairKey(a, b))
	w.log.Info("wan: heal", "a", a, "b", b)
}

// SetLink changes the link between regions a and b (both ways) for the
// packets sent from now on.
func (w *Wan) SetLink(a, b string, l Link) error {
	if l.Delay < 0 || l.Jitter < 0 || !(l.Loss >= 0 && l.Loss <= 1) {
		return fmt.Errorf("netlab: set link %s-%s: %w: %+v", a, b, ErrBadLink, l)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.links[pairKey(a, b)] = l
	return nil
}

// Flow returns the packets and bytes the WAN has delivered from public
// address src to public address dst. Between two NAT routers' addresses
// this tells a direct (hole-punched) flow from traffic through a relay.
func (w *Wan) Flow(src, dst netip.Addr) (packets, bytes uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.flows[[2]netip.Addr{src, dst}]; f != nil {
		return f.packets, f.bytes
	}
	return 0, 0
}

// Close stops forwarding and closes the TUN devices (which removes them).
// It is safe to call twice.
func (w *Wan) Close() error {
	var errs []error
	w.closeOnce.Do(func() {
		close(w.done)
		for _, ep := range w.eps {
			if err := ep.dev.Close(); err != nil {
				errs = append(errs, fmt.Errorf("netlab: close wan0 of %s: %w", ep.ns, err))
			}
		}
		w.wg.Wait()
	})
	return errors.Join(errs...)
}

func (w *Wan) closed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// readLoop reads packets from ep's TUN and queues them for their
// destination.
func (w *Wan) readLoop(ep *endpoint) {
	buf := make([]byte, 65535)
	for {
		n, err := ep.dev.Read(buf)
		if err != nil {
			if !w.closed() {
				w.log.Error("wan: read stopped", "ns", ep.ns, "err", err)
			}
			return
		}
		w.route(buf[:n], time.Now())
	}
}

// route schedules one packet read at now, or drops it.
func (w *Wan) route(p []byte, now time.Time) {
	src, dst, err := parseIPv4(p)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	to := w.eps[dst]
	from := w.eps[src]
	if to == nil || from == nil {
		return // unknown destination, or a source the lab did not give out
	}
	key := pairKey(from.region, to.region)
	if w.parted[key] {
		return
	}
	l := w.links[key]
	if l.Loss > 0 && w.rng.Float64() < l.Loss {
		return
	}
	d := l.Delay
	if l.Jitter > 0 {
		d += time.Duration(w.rng.Int64N(int64(l.Jitter) + 1))
	}
	at := now.Add(d)
	if at.Before(to.last) {
		at = to.last
	}
	select {
	case to.q <- delivery{at: at, src: src, pkt: append([]byte(nil), p...)}:
		to.last = at
	default: // queue full: dropped
	}
}

// writeLoop writes the packets queued for ep when they are due.
func (w *Wan) writeLoop(ep *endpoint) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		var d delivery
		select {
		case <-w.done:
			return
		case d = <-ep.q:
		}
		if wait := time.Until(d.at); wait > 0 {
			t.Reset(wait)
			select {
			case <-w.done:
				return
			case <-t.C:
			}
		}
		if _, err := ep.dev.Write(d.pkt); err != nil {
			if w.closed() {
				return
			}
			w.log.Debug("wan: write failed", "ns", ep.ns, "err", err)
			continue
		}
		w.mu.Lock()
		f := w.flows[[2]netip.Addr{d.src, ep.addr}]
		if f == nil {
			f = &flow{}
			w.flows[[2]netip.Addr{d.src, ep.addr}] = f
		}
		f.packets++
		f.bytes += uint64(len(d.pkt))
		w.mu.Unlock()
	}
}

var _ io.ReadWriteCloser = (*os.File)(nil)
