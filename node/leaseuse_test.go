package node

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	jpb "github.com/gpumesh/gpumesh/node/job/pb"
)

// TestRentRunOnLeaseRelease: a renter node rents with no job bound (the
// API's rent), and the supplier then refuses another renter saying what
// is true (GPUs held by leases with no job yet, and when to retry), not
// "fully booked". Jobs started on the lease run there one after another
// with nothing rented, and its renter then releases it. A second lease
// is released with no job run: the supplier frees its GPUs at once, both
// sides keep it as released, and the renter is not barred as for an
// unclaimed lease: it rents again.
func TestRentRunOnLeaseRelease(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	root := t.TempDir()
	bn := startNode(t, testConfig(t, filepath.Join(root, "boot"), "none", "eu-west", nil))
	sc := h100Seller(t, "sim:h100-sxm:4", nil)
	sc.DataDir, sc.AuditInterval = filepath.Join(root, "sup"), 0
	setKey(t, &sc, "bootstrap", bootstrapOf(bn)...)
	sup := startNode(t, sc)
	rcfg := testConfig(t, filepath.Join(root, "renter"), "none", "eu-west", bootstrapOf(bn))
	rcfg.AuditInterval = 0
	renter := startNode(t, rcfg)
	waitAdvertised(t, sup)
	eventually(t, 20*time.Second, "the ask in the renter's book", func() bool { return len(renter.Book().Asks("h100-sxm")) == 1 })
	b := &apiBackend{n: renter}
	rent := func(count int) (api.LeaseView, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return b.Rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=h100-sxm"),
			Count: count, Duration: time.Hour, MaxPrice: 3_000_000, Wait: quoteWait})
	}
	held, err := rent(2)
	if err != nil {
		t.Fatalf("rent: %v", err)
	}

	// Another renter: 2 of 4 GPUs are free, but half are held with no
	// job on them, so it is told so, with a time to retry.
	other := newRentClientOf(t, bn)
	_, err = rentH100(t, other, 1, time.Hour)
	var nm *market.NoMatch
	if !errors.As(err, &nm) || !strings.Contains(strings.Join(nm.Reasons, "\n"), "2 of 4 held by leases with no job yet (2 free); retry in ") {
		t.Fatalf("another renter while half is held: %v; want told the GPUs are held, and when to retry", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runOn := func(lease, script string) job.View {
		t.Helper()
		v, err := renter.jobs.ctrl.Submit(ctx, job.Request{Spec: &jpb.JobSpec{Argv: []string{"sh", "-c", script}}, Lease: lease})
		if err != nil {
			t.Fatalf("run on the lease: %v", err)
		}
		eventually(t, time.Minute, "the job on the lease to succeed", func() bool {
			v, _ = renter.jobs.ctrl.Job(v.JobID)
			return v.State == job.StateSucceeded
		})
		if v.LeaseID != held.LeaseID || v.Supplier != sup.ID().String() {
			t.Fatalf("job ran on lease %s of %s, want %s of %s", v.LeaseID, v.Supplier, held.LeaseID, sup.ID())
		}
		return v
	}
	// Jobs one after another on the lease: its GPUs stay reserved between
	// them, and it is never released as unclaimed.
	runOn(held.LeaseID[:12], "echo first")
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 2 {
		t.Errorf("%d free between jobs on the lease, want 2 (it keeps its GPUs)", free)
	}
	if v := runOn(held.LeaseID, "echo second"); v.Attempt != 2 {
		t.Errorf("the second job on the lease is attempt %d, want 2", v.Attempt)
	}
	// Released between jobs: its GPUs are free at once.
	if _, err := b.ReleaseLease(ctx, held.LeaseID); err != nil {
		t.Fatalf("release of the lease after its jobs: %v", err)
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 4 {
		t.Errorf("%d free after the release, want 4", free)
	}

	rel, err := rent(1)
	if err != nil {
		t.Fatalf("rent to release: %v", err)
	}
	free := sup.Supplier().Ledger().Free("h100-sxm")
	got, err := b.ReleaseLease(ctx, rel.LeaseID[:12])
	if err != nil || got.State != string(market.LeaseReleased) || !strings.HasPrefix(got.Reason, "released by its renter at ") {
		t.Fatalf("release = %+v, %v", got, err)
	}
	if now := sup.Supplier().Ledger().Free("h100-sxm"); now != free+1 {
		t.Errorf("%d free after the release, want %d", now, free+1)
	}
	id, _ := market.ParseID(rel.LeaseID)
	if sl := supplierLease(t, sup, id); sl.State != market.LeaseReleased || !strings.HasPrefix(sl.Reason, "released by its renter") {
		t.Errorf("the supplier keeps the released lease as %s (%s)", sl.State, sl.Reason)
	}
	if sl, err := market.GetLease(renter.store, id, time.Now()); err != nil || sl.State != market.LeaseReleased {
		t.Errorf("the renter keeps the released lease as %v (%v)", sl.State, err)
	}
	var refused *market.ReleaseRefused
	if _, err := b.ReleaseLease(ctx, rel.LeaseID); !errors.As(err, &refused) || !strings.Contains(err.Error(), market.ErrLeaseEnded.Error()) {
		t.Errorf("a second release: %v, want refused as ended", err)
	}
	if _, err := b.ReleaseLease(ctx, "00ff00ff"); !errors.Is(err, api.ErrNoLease) {
		t.Errorf("release of an unknown lease: %v, want ErrNoLease", err)
	}
	if _, err := rent(1); err != nil {
		t.Fatalf("rent after a release (the renter must not be barred): %v", err)
	}
}
