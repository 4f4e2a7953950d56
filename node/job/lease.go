package job

// Jobs on a lease the renter holds already (Request.Lease): `gpumesh
// rent` made it, binding no job spec, and `gpumesh run --lease` starts a
// job on it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
)

// submitOnLease starts req's job on the lease req.Lease names: kept in
// the store as this renter's, confirmed, not ended. The job's GPUs and
// time are the lease's; a lease that binds a job spec runs only that
// job, and the supplier checks it so.
func (c *Controller) submitOnLease(ctx context.Context, req Request) (View, error) {
	if req.Replicas > 1 {
		return View{}, errors.New("replicas rent a lease each: --lease runs one job")
	}
	l, err := c.heldLease(req.Lease)
	if err != nil {
		return View{}, err
	}
	req.Count, req.Duration = int(l.Count), l.End().Sub(c.cfg.Now()).Round(time.Second)
	req.MaxPrice = 0
	if req.Spec.Gpus != 0 && int(req.Spec.Gpus) != req.Count {
		return View{}, fmt.Errorf("the job asks for %d GPUs; lease %s has %d", req.Spec.Gpus, l.ID.Short(), l.Count)
	}
	req.Spec.Gpus = uint32(req.Count)
	return c.submitWith(ctx, req, "", 0, l)
}

// heldLease finds the lease this renter holds whose ID starts with
// prefix and checks that a job can start on it.
func (c *Controller) heldLease(prefix string) (*market.Lease, error) {
	now := c.cfg.Now()
	sl, err := market.FindLease(c.cfg.Store, prefix, market.RoleRenter, now)
	if err != nil {
		return nil, err
	}
	self, err := peer.IDFromPrivateKey(c.cfg.Key)
	if err != nil {
		return nil, err
	}
	switch {
	case sl.Renter != self:
		return nil, fmt.Errorf("lease %s: %w", sl.ID.Short(), market.ErrNotYours)
	case sl.State != market.LeaseConfirmed:
		return nil, fmt.Errorf("lease %s: %w: it is %s%s", sl.ID.Short(), market.ErrLeaseEnded, sl.State, reasonOf(sl.Reason))
	case !now.Before(sl.End()):
		return nil, fmt.Errorf("lease %s: %w at %s", sl.ID.Short(), market.ErrLeaseEnded, sl.End().UTC().Format(time.RFC3339))
	}
	if len(sl.Terms().JobSpecHash) != 0 {
		return nil, fmt.Errorf("lease %s was rented for one job (its spec is bound); rent one with gpumesh rent", sl.ID.Short())
	}
	if _, busy := c.jobsOnLease(sl.ID, now); busy != "" {
		return nil, fmt.Errorf("lease %s: %w (job %s); a lease takes one job at a time", sl.ID.Short(), market.ErrLeaseBusy, busy)
	}
	return sl.Lease, nil
}

// jobsOnLease looks at this renter's jobs on lease id: the highest
// attempt number any ran there (a job's attempts there follow it), and a
// job on it that has not finished ("": none).
func (c *Controller) jobsOnLease(id market.ID, now time.Time) (top uint32, busy string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, js := range c.jobs {
		js.mu.Lock()
		for _, a := range js.rec.Attempts {
			if leaseIDOf(&a, now) != id {
				continue
			}
			top = max(top, a.Attempt)
			if !js.rec.finished() {
				busy = js.rec.ID[:8]
			}
		}
		js.mu.Unlock()
	}
	return top, busy
}

// firstAttempt gives the job its first attempt: on l when set, else on
// a lease rented for it. On l its attempt number follows those of the
// jobs before it there, as the supplier's meter of the lease wants.
func (c *Controller) firstAttempt(ctx context.Context, js *jobState, l *market.Lease) error {
	if l == nil {
		return c.rentAttempt(ctx, js, nil)
	}
	top, _ := c.jobsOnLease(l.ID, c.cfg.Now())
	return c.addAttemptNumbered(js, l, top+1)
}

// leaseIDOf is the ID of the lease an attempt runs on (zero when its
// envelope no longer opens).
func leaseIDOf(a *attemptRec, now time.Time) market.ID {
	l, err := market.OpenLease(a.Lease, now)
	if err != nil {
		return market.ID{}
	}
	return l.ID
}

func reasonOf(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
