package job

import (
	"context"
	"net"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/tunnel"
)

// Tunnel admits a renter's tunnel to a port of the attempt that runs on
// req's lease (tunnel.Resolver; docs/PROTOCOL.md §39.3), in order: an
// attempt runs here on that lease, for from, with that attempt number
// (else no-attempt, whichever failed); it is not ending (not-running); it
// is not halted for payment and the renter is within its credit (unpaid);
// it is running (not-running);
// its spec declares the port (port); its runtime gives it a network of
// its own (no-network). The target's Done closes when the attempt ends
// or is halted: its tunnels are cut then.
func (e *Executor) Tunnel(from peer.ID, req tunnel.Request) (tunnel.Target, *tunnel.Refusal) {
	e.mu.Lock()
	r := e.runs[market.ID(req.LeaseID)]
	e.mu.Unlock()
	if r == nil || r.lease.Renter != from || r.attempt != req.Attempt {
		return tunnel.Target{}, tunnel.Refuse(tunnel.RefusedNoAttempt, "no attempt %d of yours runs on lease %x here", req.Attempt, req.LeaseID[:8])
	}
	r.mu.Lock()
	state, paused, ending, cut := r.state, r.paused, r.endState != "", r.cut
	r.mu.Unlock()
	switch {
	case ending:
		return tunnel.Target{}, tunnel.Refuse(tunnel.RefusedNotRunning, "the attempt is ending")
	case paused || r.meter.OverCredit():
		return tunnel.Target{}, tunnel.Refuse(tunnel.RefusedUnpaid, "the job waits for payment: %d micros owed, credit limit %d", r.meter.Owed(), r.terms.CreditLimit)
	case state != StateRunning:
		return tunnel.Target{}, tunnel.Refuse(tunnel.RefusedNotRunning, "the attempt is %s", state)
	case !r.spec.Serves(req.Port):
		return tunnel.Target{}, tunnel.Refuse(tunnel.RefusedPort, "the job's spec does not declare port %d", req.Port)
	}
	d, ok := r.proc.(runtime.PortDialer)
	if err := runtime.NetworkIsolation(e.cfg.Runtimes[runtimeName(r.spec)]); !ok || err != nil {
		return tunnel.Target{}, tunnel.Refuse(tunnel.RefusedNoNetwork, "the job has no network of its own on this supplier")
	}
	return tunnel.Target{
		Dial:    func(ctx context.Context) (net.Conn, error) { return d.DialPort(ctx, req.Port) },
		Done:    cut,
		Attempt: r.lease.ID.String(),
	}, nil
}

// cutTunnels closes the attempt's open tunnels (the job halted or ended).
// New ones get a fresh channel, and are admitted only while the attempt
// runs and is paid for.
func (r *run) cutTunnels() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.cut)
	r.cut = make(chan struct{})
}
