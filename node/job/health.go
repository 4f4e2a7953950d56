package job

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/tunnel"
)

// Health checks of jobs that serve ports (docs/PROTOCOL.md §39.7). The
// renter's node checks the current attempt of each such job through a
// tunnel every HealthInterval: an HTTP GET of the job's health path (a
// 2xx or 3xx answer is healthy) or, without one, a tunnel to its first
// port that the supplier could connect. A forward sends connections only
// to healthy attempts. An attempt that was healthy and then fails
// HealthFailures checks in a row, or that is not healthy within its grace
// (DefaultHealthGrace) of starting, is given up as lost: the job fails
// over to another supplier, never one it or a sibling replica lost.
const (
	HealthInterval = 2 * time.Second
	HealthTimeout  = 5 * time.Second
	HealthFailures = 3
	// MaxHealthAnswer bounds what a health check reads of a job's answer.
	MaxHealthAnswer    = 16 << 10
	DefaultHealthGrace = 5 * time.Minute
	// MaxReplicas bounds a job's replicas.
	MaxReplicas = 16
)

// healthState is what the checks found of a job's current attempt.
type healthState struct {
	attempt  uint32    // the attempt these figures are about
	since    time.Time // when the attempt was first checked
	ok       bool      // the last check passed
	ever     bool      // a check of this attempt has passed
	failures int       // checks failed in a row
	last     string    // why the last check failed
	giveUp   string    // set: drive gives the attempt up as lost, saying why
}

// healthWord says how the current attempt's health looks. The caller
// holds js.mu.
func (js *jobState) healthWord() string {
	h := js.health
	cur := js.rec.cur()
	switch {
	case cur == nil || h.attempt != cur.Attempt || js.rec.State != StateRunning:
		return "starting"
	case h.ok:
		return "healthy"
	case !h.ever:
		return "starting: " + h.last
	}
	return "unhealthy: " + h.last
}

// group is the ID that names js's replicas: the first replica's ID (a job
// without replicas is a group of one).
func group(r *jobRecord) string {
	if r.Group != "" {
		return r.Group
	}
	return r.ID
}

// siblings are the other replicas of js's group.
func (c *Controller) siblings(js *jobState) []*jobState {
	js.mu.Lock()
	g := group(&js.rec)
	js.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*jobState
	for _, o := range c.jobs {
		if o == js {
			continue
		}
		o.mu.Lock()
		same := group(&o.rec) == g
		o.mu.Unlock()
		if same {
			out = append(out, o)
		}
	}
	return out
}

// siblingSuppliers are the suppliers a replica must not rent from: those
// its siblings run on now, and those they lost.
func (c *Controller) siblingSuppliers(js *jobState) []peer.ID {
	var out []peer.ID
	for _, o := range c.siblings(js) {
		o.mu.Lock()
		for i, a := range o.rec.Attempts {
			current := i == len(o.rec.Attempts)-1 && a.Outcome == "" && !o.rec.finished()
			if current || a.Outcome != "" && a.Outcome != StateFailed && a.Outcome != StateSucceeded {
				if id, err := peer.Decode(a.Supplier); err == nil {
					out = append(out, id)
				}
			}
		}
		o.mu.Unlock()
	}
	return out
}

// healthLoop checks every running job that serves ports, every
// HealthInterval, until the controller closes.
func (c *Controller) healthLoop() {
	defer c.wg.Done()
	t := time.NewTicker(HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		var jobs []*jobState
		for _, js := range c.jobs {
			jobs = append(jobs, js)
		}
		c.mu.Unlock()
		for _, js := range jobs {
			c.checkHealth(js)
		}
		c.closeEndedForwards(jobs)
	}
}

// closeEndedForwards closes the forwards of groups whose jobs have all
// ended (a forward of one replica serves the whole group).
func (c *Controller) closeEndedForwards(jobs []*jobState) {
	live := map[string]bool{}
	for _, js := range jobs {
		js.mu.Lock()
		if !js.rec.finished() {
			live[group(&js.rec)] = true
		}
		js.mu.Unlock()
	}
	for _, js := range jobs {
		js.mu.Lock()
		if !live[group(&js.rec)] {
			c.closeForwards(js)
		}
		js.mu.Unlock()
	}
}

// checkHealth checks js's current attempt, if it runs and serves ports,
// and gives it up when it has failed for good.
func (c *Controller) checkHealth(js *jobState) {
	js.mu.Lock()
	cur := js.rec.cur()
	if len(js.spec.Ports) == 0 || cur == nil || js.rec.finished() || js.rec.State != StateRunning || !cur.Started || cur.Outcome != "" {
		js.mu.Unlock()
		return
	}
	if js.health.attempt != cur.Attempt {
		js.health = healthState{attempt: cur.Attempt, since: c.cfg.Now(), last: "not checked yet"}
	}
	path, port := js.rec.Health, uint16(js.spec.Ports[0].Number)
	grace := time.Duration(js.rec.Grace) * time.Millisecond
	js.mu.Unlock()
	if grace == 0 {
		grace = DefaultHealthGrace
	}
	eps := c.endpointsOf(js, false)
	if len(eps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, HealthTimeout)
	err := c.probe(ctx, eps[0], port, path)
	cancel()
	if c.ctx.Err() != nil {
		return
	}
	js.mu.Lock()
	h := &js.health
	if h.attempt != eps[0].Attempt {
		js.mu.Unlock()
		return
	}
	if err == nil {
		h.ok, h.ever, h.failures, h.last = true, true, 0, ""
		js.mu.Unlock()
		return
	}
	h.ok, h.failures, h.last = false, h.failures+1, err.Error()
	switch {
	case h.ever && h.failures >= HealthFailures:
		h.giveUp = fmt.Sprintf("failed %d health checks in a row: %v", h.failures, err)
	case !h.ever && c.cfg.Now().Sub(h.since) >= grace:
		h.giveUp = fmt.Sprintf("not healthy %s after it started: %v", grace, err)
	}
	conn := js.conn
	give := h.giveUp
	js.mu.Unlock()
	if give != "" && conn != nil {
		c.log.Warn("attempt unhealthy; failing over", "job", js.rec.ID[:8], "attempt", eps[0].Attempt, "why", give)
		conn.close() // drive's follow returns, and drive gives the attempt up
	}
}

// takeGiveUp returns, once, why the health checks gave the current
// attempt up ("" when they did not).
func (js *jobState) takeGiveUp() string {
	js.mu.Lock()
	defer js.mu.Unlock()
	why := js.health.giveUp
	js.health.giveUp = ""
	return why
}

// probe checks one attempt: a tunnel to port that the supplier admits
// and connects, then, with an HTTP path, a GET of it answered 2xx or 3xx.
func (c *Controller) probe(ctx context.Context, ep tunnel.Endpoint, port uint16, path string) error {
	st, err := tunnel.Dial(ctx, c.openTunnel, ep, port)
	if err != nil {
		return err
	}
	defer st.Close()
	if path == "" {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(st, "GET %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: gpumesh-health\r\nConnection: close\r\n\r\n", path); err != nil {
		return fmt.Errorf("health check: send: %w", err)
	}
	// The answer comes from the job: only its head is read, and at most
	// MaxHealthAnswer bytes of it.
	resp, err := http.ReadResponse(bufio.NewReader(io.LimitReader(st, MaxHealthAnswer)), nil)
	if err != nil {
		return fmt.Errorf("health check: GET %s: %w", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("health check: GET %s: %s", path, strings.TrimSpace(resp.Status))
	}
	return nil
}
