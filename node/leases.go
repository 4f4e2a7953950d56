package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
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
