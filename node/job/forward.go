package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/tunnel"
)

// Publish is a local address that carries connections to a port of a
// job (`gpumesh run --publish`, `gpumesh forward`).
type Publish struct {
	// Listen is the local host:port; port 0 picks one, and the record
	// keeps the one picked, so a restarted node listens there again.
	Listen string `json:"listen"`
	Port   uint16 `json:"port"` // a port the job's spec declares
}

// ForwardView is one of a job's forwards, as `gpumesh forward --list`
// shows it.
type ForwardView struct {
	JobID  string `json:"job_id"`
	Port   uint16 `json:"port"`
	Listen string `json:"listen"` // the local address it listens on
	tunnel.ForwardStats
	LastError string `json:"last_error,omitempty"` // why the last connection found no tunnel
}

// ErrForward is wrapped by a forward the controller refuses: the job
// does not declare the port, has ended, or forwards there already.
var ErrForward = errors.New("cannot forward")

// Forward opens a local address that carries each connection to port of
// job id, on whichever supplier runs its attempt then (the address
// outlives failover), or on any healthy replica of its group. The forward
// is kept with the job and closes when every replica of the group has
// ended.
func (c *Controller) Forward(id string, p Publish) (ForwardView, error) {
	js, err := c.find(id)
	if err != nil {
		return ForwardView{}, err
	}
	js.mu.Lock()
	switch {
	case js.rec.finished():
		js.mu.Unlock()
		return ForwardView{}, fmt.Errorf("%w: job %s is %s", ErrForward, js.rec.ID[:8], js.rec.State)
	case !js.spec.Serves(p.Port):
		js.mu.Unlock()
		return ForwardView{}, fmt.Errorf("%w: job %s declares no port %d (run it with --port %d)", ErrForward, js.rec.ID[:8], p.Port, p.Port)
	}
	f, err := c.openForward(js, p)
	if err != nil {
		js.mu.Unlock()
		return ForwardView{}, err
	}
	js.rec.Publish = append(js.rec.Publish, Publish{Listen: f.Addr().String(), Port: p.Port})
	if err = c.save(js); err != nil {
		js.rec.Publish = js.rec.Publish[:len(js.rec.Publish)-1]
	} else {
		js.fwd = append(js.fwd, f)
	}
	id = js.rec.ID
	js.mu.Unlock()
	if err != nil {
		f.Close() // outside js.mu: its connections ask js for endpoints
		return ForwardView{}, err
	}
	return forwardView(id, f), nil
}

// Unforward closes job id's forward on the local address listen (every
// forward of the job when listen is "").
func (c *Controller) Unforward(id, listen string) error {
	js, err := c.find(id)
	if err != nil {
		return err
	}
	js.mu.Lock()
	var closing []*tunnel.Forwarder
	js.fwd = slices.DeleteFunc(js.fwd, func(f *tunnel.Forwarder) bool {
		if listen == "" || f.Addr().String() == listen {
			closing = append(closing, f)
			return true
		}
		return false
	})
	js.rec.Publish = slices.DeleteFunc(js.rec.Publish, func(p Publish) bool { return listen == "" || p.Listen == listen })
	err = c.save(js)
	js.mu.Unlock()
	if len(closing) == 0 {
		return fmt.Errorf("%w: job %s forwards nothing on %s", ErrForward, id, listen)
	}
	for _, f := range closing {
		f.Close()
	}
	return err
}

// Forwards lists the forwards of job id (of every job when id is "").
func (c *Controller) Forwards(id string) ([]ForwardView, error) {
	var jobs []*jobState
	if id != "" {
		js, err := c.find(id)
		if err != nil {
			return nil, err
		}
		jobs = []*jobState{js}
	} else {
		c.mu.Lock()
		for _, js := range c.jobs {
			jobs = append(jobs, js)
		}
		c.mu.Unlock()
	}
	out := []ForwardView{}
	for _, js := range jobs {
		js.mu.Lock()
		for _, f := range js.fwd {
			out = append(out, forwardView(js.rec.ID, f))
		}
		js.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ForwardView) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Listen, b.Listen))
	})
	return out, nil
}

func forwardView(id string, f *tunnel.Forwarder) ForwardView {
	st, why := f.Stats()
	return ForwardView{JobID: id, Port: f.Port(), Listen: f.Addr().String(), ForwardStats: st, LastError: why}
}

// openForward listens for p. The caller holds js.mu.
func (c *Controller) openForward(js *jobState, p Publish) (*tunnel.Forwarder, error) {
	f, err := tunnel.Forward(tunnel.ForwarderConfig{
		Listen:     p.Listen,
		Port:       p.Port,
		Endpoints:  func() []tunnel.Endpoint { return c.endpoints(js) },
		OpenStream: c.openTunnel,
		Log:        c.log.With("job", js.rec.ID[:8]),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForward, err)
	}
	return f, nil
}

// openTunnel opens a tunnel stream to a supplier.
func (c *Controller) openTunnel(ctx context.Context, p peer.ID) (network.Stream, error) {
	if err := c.cfg.Net.Connect(ctx, p); err != nil {
		return nil, err
	}
	return c.cfg.Net.NewStream(ctx, p, tunnel.Protocol)
}

// endpoints are the attempts that serve js's ports now: the current
// attempt of js and of each of its sibling replicas, where it runs and its
// last health check passed.
func (c *Controller) endpoints(js *jobState) []tunnel.Endpoint {
	eps := c.endpointsOf(js, true)
	for _, o := range c.siblings(js) {
		eps = append(eps, c.endpointsOf(o, true)...)
	}
	return eps
}

// endpointsOf is js's current attempt as a tunnel endpoint, once the
// supplier runs it while the job is running (and, with healthy, when its
// last health check passed); none otherwise.
func (c *Controller) endpointsOf(js *jobState, healthy bool) []tunnel.Endpoint {
	js.mu.Lock()
	defer js.mu.Unlock()
	cur := js.rec.cur()
	if cur == nil || js.rec.State != StateRunning || !cur.Started || cur.Outcome != "" {
		return nil
	}
	if healthy && (js.health.attempt != cur.Attempt || !js.health.ok) {
		return nil
	}
	if js.ep == nil || js.ep.Attempt != cur.Attempt {
		l, err := market.OpenLease(cur.Lease, c.cfg.Now())
		if err != nil {
			return nil
		}
		js.ep = &tunnel.Endpoint{Peer: l.Supplier, LeaseID: [32]byte(l.ID), Attempt: cur.Attempt}
	}
	return []tunnel.Endpoint{*js.ep}
}

// publish opens a new job's forwards before it is rented, so that a
// taken address fails the submission, and keeps the addresses picked.
func (c *Controller) publish(js *jobState, ps []Publish) error {
	if len(ps) == 0 {
		return nil
	}
	js.mu.Lock()
	err := func() error {
		for _, p := range ps {
			if !js.spec.Serves(p.Port) {
				return fmt.Errorf("%w: publish %s to port %d: the spec declares no port %d", ErrForward, p.Listen, p.Port, p.Port)
			}
			f, err := c.openForward(js, p)
			if err != nil {
				return err
			}
			js.fwd = append(js.fwd, f)
			js.rec.Publish = append(js.rec.Publish, Publish{Listen: f.Addr().String(), Port: p.Port})
		}
		return c.save(js)
	}()
	opened := js.fwd
	if err != nil {
		js.fwd, js.rec.Publish = nil, nil
	}
	js.mu.Unlock()
	if err != nil {
		for _, f := range opened { // outside js.mu: their connections ask js for endpoints
			f.Close()
		}
	}
	return err
}

// reopenForwards listens again on the addresses a job's record keeps
// (a restarted node). The caller holds js.mu.
func (c *Controller) reopenForwards(js *jobState) {
	for _, p := range js.rec.Publish {
		f, err := c.openForward(js, p)
		if err != nil {
			c.log.Warn("forward not reopened", "job", js.rec.ID[:8], "listen", p.Listen, "port", p.Port, "err", err)
			continue
		}
		js.fwd = append(js.fwd, f)
	}
}

// closeForwards closes a job's forwards once its group has ended, in the
// background: their connections ask js for endpoints, and the caller
// holds js.mu.
func (c *Controller) closeForwards(js *jobState) {
	fwd := js.fwd
	js.fwd = nil
	if len(fwd) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, f := range fwd {
			f.Close()
		}
	}()
}
