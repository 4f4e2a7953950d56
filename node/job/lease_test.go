package job

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/store"
)

// TestControllerRunsJobsOnHeldLease: a lease rented with no job bound
// (as `gpumesh rent` makes one) runs jobs started with its ID prefix, on
// its supplier, with nothing rented, one after another on the lease's
// one meter: a job while another runs is refused as busy, the next one
// after it runs as attempt 2, billed on from where the first stopped.
// An unknown lease is refused.
func TestControllerRunsJobsOnHeldLease(t *testing.T) {
	m := newMesh(t, 1, nil)
	sup := m.sups[0]
	l, err := m.lease(sup, 1000, market.Terms{ReceiptInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := market.KeepLease(m.ctrl.cfg.Store, l, market.LeaseConfirmed, market.RoleRenter, time.Now()); err != nil {
		t.Fatal(err)
	}
	onLease := func(script string) Request {
		return Request{Spec: &pb.JobSpec{Argv: []string{"sh", "-c", script}}, Lease: l.ID.String()[:12]}
	}
	v := m.submit(onLease(`echo "first on the lease"; sleep 1`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.ctrl.Submit(ctx, onLease("true")); !errors.Is(err, market.ErrLeaseBusy) {
		t.Errorf("a second job while the first runs: %v, want ErrLeaseBusy", err)
	}
	v = m.waitJob(v.JobID, StateSucceeded)
	if len(v.Attempts) != 1 || v.Attempts[0].LeaseID != l.ID.String() || v.Attempts[0].Supplier != sup.host.ID().String() || v.Attempts[0].Attempt != 1 {
		t.Fatalf("want one attempt on lease %s: %s", l.ID.Short(), describe(v))
	}
	if got := m.logs(v.JobID); got != "first on the lease\n" {
		t.Errorf("logs %q", got)
	}
	first := v.Attempts[0].PaidMicros

	w := m.submit(onLease(`echo "second, attempt $JOB_ATTEMPT"`))
	w = m.waitJob(w.JobID, StateSucceeded)
	if len(w.Attempts) != 1 || w.Attempts[0].LeaseID != l.ID.String() || w.Attempts[0].Attempt != 2 {
		t.Fatalf("the second job: %s; want attempt 2 on the same lease", describe(w))
	}
	if got := m.logs(w.JobID); got != "second, attempt 2\n" {
		t.Errorf("logs of the second job %q", got)
	}
	if w.Attempts[0].PaidMicros <= first {
		t.Errorf("the lease's meter paid %d after the second job, %d after the first: it should go on", w.Attempts[0].PaidMicros, first)
	}
	if n := len(m.rentCalls()); n != 0 {
		t.Errorf("%d leases rented for jobs on a held lease, want none", n)
	}
	if _, err := m.ctrl.Submit(ctx, Request{Spec: &pb.JobSpec{Argv: []string{"true"}}, Lease: "00ff00ff"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a job on an unknown lease: %v, want not found", err)
	}
}

// TestControllerJobOnHeldLeaseHasNoOtherAttempt: a job on a held lease
// that fails is not restarted on another lease, whatever its policy.
func TestControllerJobOnHeldLeaseHasNoOtherAttempt(t *testing.T) {
	m := newMesh(t, 1, nil)
	l, err := m.lease(m.sups[0], 1001, market.Terms{ReceiptInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := market.KeepLease(m.ctrl.cfg.Store, l, market.LeaseConfirmed, market.RoleRenter, time.Now()); err != nil {
		t.Fatal(err)
	}
	v := m.submit(Request{Spec: &pb.JobSpec{Argv: []string{"sh", "-c", "exit 3"}, Restart: &pb.Restart{Policy: "on-failure", MaxRestarts: 3}}, Lease: l.ID.String()})
	v = m.waitJob(v.JobID, StateFailed)
	if len(v.Attempts) != 1 || v.ExitCode != 3 || len(m.rentCalls()) != 0 {
		t.Fatalf("want one failed attempt (exit 3) and nothing rented: %s", describe(v))
	}
}
