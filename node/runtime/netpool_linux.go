package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// readyNet is a job network made before its job: a namespace, held by
// fd and by nothing else (no name in /run/netns, so nothing of it
// outlives the node), with loopback up and its link attached. It serves
// one job, whose shim starts in it, and goes with that job.
type readyNet struct {
	fd   *os.File
	link *link
}

// prepare makes a ready network: a fresh namespace and its link.
func (n *jobNetwork) prepare(ctx context.Context) (*readyNet, error) {
	f, err := n.ns.newNamespace()
	if err != nil {
		return nil, fmt.Errorf("job network: %w", err)
	}
	rn := &readyNet{fd: f}
	if rn.link, err = n.attach(ctx, rn.path(), int(f.Fd())); err != nil {
		f.Close()
		return nil, err
	}
	return rn, nil
}

// path is where other processes (ip, a container engine) open rn's
// namespace: the node's descriptor, so it needs no name in /run/netns.
func (rn *readyNet) path() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), rn.fd.Fd())
}

// release removes rn's link and lets its namespace go (with whatever a
// job left in it).
func (n *jobNetwork) release(rn *readyNet) {
	n.detach(rn.link)
	rn.fd.Close()
}

// netPool keeps up to size ready networks for the jobs to come, made in
// the background: one loop (loop) makes them, take hands each out once,
// and whoever takes one releases it with its job. Networks are never
// returned: a job's namespace is never another's.
type netPool struct {
	jnet *jobNetwork
	size int
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when loop returns
	kick   chan struct{} // asks loop to fill up; 1 buffered

	mu     sync.Mutex
	ready  []*readyNet
	closed bool
}

// retryAfter is how long the pool waits after it failed to make a
// network before it tries again (a kick tries at once).
const retryAfter = 10 * time.Second

// newNetPool starts filling a pool of size networks of jnet.
func newNetPool(jnet *jobNetwork, size int, log *slog.Logger) *netPool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &netPool{jnet: jnet, size: size, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	go p.loop()
	p.refill()
	return p
}

// take hands out a ready network, or nil when none is (the pool is
// filling up, or empty, or closed). The caller owns it from then on.
func (p *netPool) take() *readyNet {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return nil
	}
	rn := p.ready[0]
	p.ready = p.ready[1:]
	return rn
}

// refill asks the loop to make networks until the pool is full. A job
// calls it once it has started, so that the making does not compete
// with its start.
func (p *netPool) refill() {
	if p == nil {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop makes networks while the pool is not full, on each kick (and
// again retryAfter after a failure), until Close. It alone adds to
// ready.
func (p *netPool) loop() {
	defer close(p.done)
	var retry <-chan time.Time
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.kick:
		case <-retry:
		}
		retry = nil
		for p.count() < p.size {
			rn, err := p.jnet.prepare(p.ctx)
			if err != nil {
				if p.ctx.Err() == nil {
					p.log.Warn("job network: cannot make one ahead; jobs make their own meanwhile", "err", err)
					retry = time.After(retryAfter)
				}
				break
			}
			if !p.put(rn) {
				p.jnet.release(rn)
				return
			}
		}
	}
}

func (p *netPool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// put adds rn to the pool unless it is closed.
func (p *netPool) put(rn *readyNet) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.ready = append(p.ready, rn)
	return true
}

// Close stops the loop and releases every network not handed out (those
// handed out go with their jobs). It is safe to call more than once.
func (p *netPool) Close() error {
	if p == nil {
		return nil
	}
	p.cancel()
	<-p.done
	p.mu.Lock()
	ready := p.ready
	p.ready, p.closed = nil, true
	p.mu.Unlock()
	for _, rn := range ready {
		p.jnet.release(rn)
	}
	return nil
}
