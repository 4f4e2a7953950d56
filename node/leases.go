package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/shell"
	"github.com/gpumesh/gpumesh/store"
)

// ViewLease describes a validated lease: verified means both signatures
// (the renter's on the proposal, the supplier's on the lease) checked out,
// which every market.Lease value guarantees.
func ViewLease(l *market.Lease, state market.LeaseState, role market.Role) api.LeaseView {
	return api.LeaseView{
		LeaseID: l.ID.String(), Supplier: l.Supplier.String(), Renter: l.Renter.String(),
		Model: l.Model, Count: int(l.Count), PriceMicros: l.PriceMicros, Price: money.Micros(l.PriceMicros).String(),
		Start: l.Start().UTC(), End: l.End().UTC(), GPUs: l.GpuUuids, Verified: true, State: state.String(), Role: role.String(),
	}
}

// OpenStore opens the Badger store of a data dir for a command that runs
// without a node (a renter's light client).
func OpenStore(dataDir string) (store.Store, error) {
	return store.OpenBadger(storeDir(dataDir), store.WithGCInterval(0))
}

// StoredLeases lists the leases kept in the store of dataDir, for a
// renter whose node is not running.
func StoredLeases(dataDir string, now time.Time) ([]api.LeaseView, error) {
	st, err := OpenStore(dataDir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return leaseViews(st, now)
}

// leaseViews lists the leases kept in st (market.Leases) as views.
func leaseViews(st store.Store, now time.Time) ([]api.LeaseView, error) {
	ls, err := market.Leases(st, now)
	if err != nil {
		return nil, err
	}
	out := make([]api.LeaseView, 0, len(ls))
	for _, l := range ls {
		v := ViewLease(l.Lease, l.State, l.Role)
		v.Reason = l.Reason
		out = append(out, v)
	}
	return out, nil
}

// Rent leases GPUs as req asks, as this node's renter (its reputation
// screening, never from itself), with no job bound to the lease.
func (b *apiBackend) Rent(ctx context.Context, req market.RentRequest) (api.LeaseView, error) {
	if b.n.jobs.renter == nil {
		return api.LeaseView{}, api.ErrNotStarted
	}
	l, err := b.n.rent(ctx, req)
	if err != nil {
		return api.LeaseView{}, err
	}
	return ViewLease(l, market.LeaseConfirmed, market.RoleRenter), nil
}

// ReleaseLease releases the lease this node rented whose ID starts with
// id, through its supplier (market.Renter.Release).
func (b *apiBackend) ReleaseLease(ctx context.Context, id string) (api.LeaseView, error) {
	if b.n.jobs.renter == nil {
		return api.LeaseView{}, api.ErrNotStarted
	}
	sl, err := market.FindLease(b.n.store, id, market.RoleRenter, b.n.now())
	if errors.Is(err, store.ErrNotFound) {
		return api.LeaseView{}, fmt.Errorf("%w: %w", api.ErrNoLease, err)
	}
	if err != nil {
		return api.LeaseView{}, err
	}
	at, err := b.n.jobs.renter.Release(ctx, sl.Lease)
	if err != nil {
		return api.LeaseView{}, err
	}
	v := ViewLease(sl.Lease, market.LeaseReleased, market.RoleRenter)
	v.Reason = market.ReleasedByRenter(at)
	return v, nil
}

// Shell starts req's job (a shell: it has a standard input) on the lease
// this node rented whose ID starts with lease, and attaches a shell
// stream to it (/gpumesh/shell/1.0.0). A stream the supplier refuses
// stops the job.
func (b *apiBackend) Shell(ctx context.Context, lease string, req job.Request) (api.ShellSession, error) {
	ctrl := b.n.jobs.ctrl
	if ctrl == nil {
		return api.ShellSession{}, api.ErrNotStarted
	}
	req.Lease = lease
	v, err := ctrl.Submit(ctx, req)
	if errors.Is(err, store.ErrNotFound) {
		return api.ShellSession{}, fmt.Errorf("%w: %w", api.ErrNoLease, err)
	}
	if err != nil {
		return api.ShellSession{}, err
	}
	st, err := b.attachShell(ctx, v, req)
	if err != nil {
		if _, serr := ctrl.Stop(v.JobID, "the shell did not attach"); serr != nil {
			b.n.log.Warn("stop a shell's job", "job", v.JobID, "err", serr)
		}
		return api.ShellSession{}, fmt.Errorf("shell on lease %s: %w", short(v.LeaseID), err)
	}
	return api.ShellSession{JobID: v.JobID, Conn: st}, nil
}

// attachShell opens the shell stream to the supplier of v's attempt.
func (b *apiBackend) attachShell(ctx context.Context, v job.View, req job.Request) (network.Stream, error) {
	id, err := market.ParseID(v.LeaseID)
	if err != nil {
		return nil, err
	}
	sup, err := peer.Decode(v.Supplier)
	if err != nil {
		return nil, fmt.Errorf("supplier %q: %w", v.Supplier, err)
	}
	o := shell.Open{LeaseID: id, Attempt: v.Attempt}
	if in := req.Spec.Stdin; in != nil && in.Tty {
		o.TTY, o.Size = true, shell.Size{Rows: uint16(in.Rows), Cols: uint16(in.Cols)}
	}
	return shell.Dial(ctx, jobDialer{b.n}, sup, o)
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
