package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

// TestTaskGroupSurvivesLostSupplier: 20 tasks over 4 suppliers, at most
// 4 at once; one supplier is closed hard while tasks run on it. Its tasks
// fail over to the others, and every task's output arrives exactly once,
// in the group's tasks/<index> folder, written by the attempt that
// succeeded.
func TestTaskGroupSurvivesLostSupplier(t *testing.T) {
	t.Parallel() // waits on its tasks' sleeps, not the CPU
	root := t.TempDir()
	var boot *Node
	mk := func(i int, c Config) *Node {
		c.DataDir = filepath.Join(root, "n"+strconv.Itoa(i))
		if i > 0 {
			setKey(t, &c, "bootstrap", bootstrapOf(boot)...)
		}
		c.HaltGrace, c.AuditInterval = 3*time.Second, 0
		return startNode(t, c)
	}
	var sups []*Node
	for i := range 4 {
		n := mk(i, sellerConfig(t, "unset", "sim:rtx4090:2", "eu-west", "fixed", []string{"rtx4090=0.50"}, nil))
		if i == 0 {
			boot = n
		}
		sups = append(sups, n)
	}
	renter := mk(4, testConfig(t, "unset", "none", "eu-west", nil))
	for _, s := range sups {
		waitAdvertised(t, s)
	}
	eventually(t, 30*time.Second, "every ask in the renter's book", func() bool {
		seen := map[string]bool{}
		for _, a := range renter.Book().Asks("") {
			seen[a.Supplier.String()] = true
		}
		return len(seen) == 4
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := renter.Jobs().Submit(ctx, job.Request{AllowSimulated: true, AllowUnproven: true, MinReputation: 0.5,
		Spec:   &pb.JobSpec{Argv: []string{"sh", "-c", `echo "$TASK_INDEX $JOB_ATTEMPT" > "$OUTPUT_DIR/out.txt"; sleep 2`}},
		Filter: mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: money.Unit},
		ReceiptInterval: 500 * time.Millisecond, Tasks: 20, Parallel: 4,
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	// Kill a supplier that runs a task, once a few tasks are done.
	var victim *Node
	eventually(t, 60*time.Second, "tasks done and one running on a supplier", func() bool {
		v := jobView(t, renter, g.JobID)
		if v.Done < 3 {
			return false
		}
		for _, tv := range v.Tasks {
			if tv.State != job.StateRunning {
				continue
			}
			for _, s := range sups {
				if s.ID().String() == tv.Supplier {
					victim = s
					return true
				}
			}
		}
		return false
	})
	if err := victim.Network().Host.Close(); err != nil {
		t.Fatal(err)
	}
	var v job.View
	eventually(t, 150*time.Second, "the group to end", func() bool {
		v = jobView(t, renter, g.JobID)
		return v.State == job.StateSucceeded || v.State == job.StateFailed
	})
	if v.State != job.StateSucceeded || v.Done != 20 {
		t.Fatalf("group %s (%s): %d done, %d failed, %+v", v.State, v.Message, v.Done, v.Failed, v.Tasks)
	}
	dir := filepath.Join(renter.cfg.DataDir, "outputs", g.JobID)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 20 {
		t.Fatalf("%d task folders in %s (%v), want 20", len(entries), dir, err)
	}
	failedOver := 0
	for i, tv := range v.Tasks {
		tj := jobView(t, renter, tv.JobID)
		got, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i), "out.txt"))
		if want := fmt.Sprintf("%d %d\n", i, tj.Attempt); err != nil || string(got) != want {
			t.Fatalf("task %d out.txt %q, %v; want %q (its succeeding attempt's)", i, got, err, want)
		}
		if tj.Failovers > 0 {
			failedOver++
		}
	}
	if failedOver == 0 {
		t.Fatal("no task failed over from the closed supplier")
	}
}
