package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/clock/clocktest"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	spb "github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

// stepScript counts to steps, one step per pause, keeping its position in
// $CHECKPOINT_DIR (written by rename, as jobs should) and resuming from it.
func stepScript(steps int, pause string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`s=0
[ -f "$CHECKPOINT_DIR/step" ] && s=$(cat "$CHECKPOINT_DIR/step")
echo "attempt $JOB_ATTEMPT starts at step $s on gpus $CUDA_VISIBLE_DEVICES"
while [ $s -lt %d ]; do
  s=$((s+1))
  echo $s > "$CHECKPOINT_DIR/step.tmp" && mv "$CHECKPOINT_DIR/step.tmp" "$CHECKPOINT_DIR/step"
  echo "step $s"
  sleep %s
done
echo finished`, steps, pause)}
}

// jobNet is two sellers of one rtx4090 each and a renter node without
// GPUs; node 0 bootstraps the others.
type jobNet struct {
	boot, cheap, renter *Node
	dirs                []string
	configs             []Config
}

// startJobNet starts a jobNet; tweaks change every node's config.
func startJobNet(t *testing.T, haltGrace time.Duration, tweaks ...func(*Config)) *jobNet {
	t.Helper()
	return startJobNetWith(t, haltGrace, nil, tweaks...)
}

// startJobNetWith is startJobNet with opts for every node (e.g. a shared
// clock).
func startJobNetWith(t *testing.T, haltGrace time.Duration, opts []Option, tweaks ...func(*Config)) *jobNet {
	t.Helper()
	root := t.TempDir()
	var jn jobNet
	mk := func(i int, c Config) *Node {
		c.DataDir = filepath.Join(root, "n"+strconv.Itoa(i))
		if i > 0 {
			setKey(t, &c, "bootstrap", bootstrapOf(jn.boot)...)
		}
		c.HaltGrace, c.AuditInterval = haltGrace, 0
		for _, tweak := range tweaks {
			tweak(&c)
		}
		jn.dirs, jn.configs = append(jn.dirs, c.DataDir), append(jn.configs, c)
		return startNode(t, c, opts...)
	}
	jn.boot = mk(0, sellerConfig(t, "unset", "sim:rtx4090:1", "eu-west", "fixed", []string{"rtx4090=0.50"}, nil))
	jn.cheap = mk(1, sellerConfig(t, "unset", "sim:rtx4090:1", "eu-west", "fixed", []string{"rtx4090=0.45"}, nil))
	jn.renter = mk(2, testConfig(t, "unset", "none", "eu-west", nil))
	waitAdvertised(t, jn.boot)
	waitAdvertised(t, jn.cheap)
	eventually(t, 20*time.Second, "both asks in the renter's book", func() bool {
		seen := map[string]bool{}
		for _, a := range jn.renter.Book().Asks("") {
			seen[a.Supplier.String()] = true
		}
		return len(seen) == 2
	})
	return &jn
}

func submit(t *testing.T, n *Node, argv []string, interval time.Duration) job.View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	v, err := n.Jobs().Submit(ctx, job.Request{AllowSimulated: true,
		Spec:   &pb.JobSpec{Argv: argv, Files: []*pb.File{{Path: "in/data.txt", Data: []byte("input-bytes-42\n")}}, CheckpointEveryS: 1},
		Filter: mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: maxP}, MinReputation: 0.5, AllowUnproven: true,
		ReceiptInterval: interval,
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return v
}

func jobView(t *testing.T, n *Node, id string) job.View {
	t.Helper()
	v, err := n.Jobs().Job(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func jobLogs(t *testing.T, n *Node, id string) string {
	t.Helper()
	var b strings.Builder
	if _, err := n.Jobs().Logs(context.Background(), id, 0, false, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func settledEverywhere(v job.View) bool {
	for _, a := range v.Attempts {
		if a.Outcome != job.StateLost && !a.Settled {
			return false
		}
	}
	return true
}

// verifyBill checks one lease's bill as a ledger keeps it.
func verifyBill(t *testing.T, led *settle.Ledger, lease string) settle.Report {
	t.Helper()
	return verifyBillAt(t, led, lease, time.Now())
}

// verifyBillAt is verifyBill at now by the nodes' clock.
func verifyBillAt(t *testing.T, led *settle.Ledger, lease string, now time.Time) settle.Report {
	t.Helper()
	reps, err := Receipts(led, lease, now)
	if err != nil || len(reps) != 1 {
		t.Fatalf("receipts of %s: %v (%d reports)", lease, err, len(reps))
	}
	if !reps[0].Valid {
		t.Fatalf("bill of lease %s is not valid: %v", lease[:12], reps[0].Problems)
	}
	return reps[0]
}

// TestJobRunsAndSettles runs a job end to end over real libp2p hosts: the
// renter's node rents the cheapest GPU with the spec's hash in the lease,
// the supplier runs the process with its input file, both sides meter it
// with receipts and vouchers and settle; the bill verifies on both sides
// and the GPU is free again.
func TestJobRunsAndSettles(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, time.Minute)
	v := submit(t, jn.renter, stepScript(6, "0.3"), 500*time.Millisecond)
	if v.Supplier != jn.cheap.ID().String() || v.Attempt != 1 || v.JobID == "" || v.LeaseID == "" {
		t.Fatalf("submitted job = %+v, want attempt 1 on the cheapest supplier %s", v, jn.cheap.ID())
	}
	eventually(t, 60*time.Second, "the job to succeed and settle", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.State == job.StateSucceeded && settledEverywhere(v)
	})
	logs := jobLogs(t, jn.renter, v.JobID)
	for _, want := range []string{"attempt 1 starts at step 0", "step 6", "finished"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if strings.Count(logs, "step 3\n") != 1 {
		t.Errorf("step 3 logged %d times, want once:\n%s", strings.Count(logs, "step 3\n"), logs)
	}
	rb := verifyBill(t, jn.renter.Ledger(), v.LeaseID)
	sb := verifyBill(t, jn.cheap.Ledger(), v.LeaseID)
	if !rb.Settled || !sb.Settled || rb.AmountMicros != sb.AmountMicros || rb.PaidMicros != rb.AmountMicros || rb.Receipts < 3 {
		t.Fatalf("bills disagree or are unsettled: renter %+v, supplier %+v", rb, sb)
	}
	if v.PaidMicros != money.Micros(rb.PaidMicros) || v.PaidMicros <= 0 {
		t.Fatalf("job view paid %d, bill %d", v.PaidMicros, rb.PaidMicros)
	}
	// Billing stays within wall-clock time: about 2 s of one GPU.
	if rb.GPUSeconds <= 0.5 || rb.GPUSeconds > 30 {
		t.Fatalf("billed %.2f GPU-seconds for a ~2 s job", rb.GPUSeconds)
	}
	if at := v.Attempts[0]; at.StartMs <= 0 {
		t.Fatalf("start latency not recorded: %+v", at)
	}
	eventually(t, 10*time.Second, "the GPU to be free again", func() bool {
		return jn.cheap.Supplier().Ledger().Free("rtx4090") == 1
	})
}

// TestJobFailsOverFromLostSupplier cuts the supplier off the network
// mid-job (its host closes; its process goes on, as on a partitioned
// machine). The renter's node notices, checks its own connectivity, rents
// from the other supplier and restarts the job from the last checkpoint it
// pulled with JOB_ATTEMPT=2. The bill covers only acknowledged receipts of
// each attempt, and the cut-off supplier, unpaid, halts its copy.
func TestJobFailsOverFromLostSupplier(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, 3*time.Second)
	v := submit(t, jn.renter, stepScript(40, "0.2"), 500*time.Millisecond)
	if v.Supplier != jn.cheap.ID().String() {
		t.Fatalf("job went to %s, want the cheap supplier", v.Supplier)
	}
	// A checkpoint pulled after step 5 was logged holds step 5 or later
	// (one pulled earlier may predate the job's first rename: receipt 1
	// comes as the job starts).
	var before string
	eventually(t, 30*time.Second, "step 5", func() bool {
		before = jobView(t, jn.renter, v.JobID).Checkpoint
		return strings.Contains(jobLogs(t, jn.renter, v.JobID), "step 5\n")
	})
	eventually(t, 30*time.Second, "a checkpoint pulled after step 5", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.Checkpoint != "" && v.Checkpoint != before
	})
	lost := v.LeaseID
	if err := jn.cheap.Network().Host.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the job to run on the other supplier", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.Attempt == 2 && v.Supplier == jn.boot.ID().String()
	})
	eventually(t, 90*time.Second, "the job to succeed", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.State == job.StateSucceeded
	})
	logs := jobLogs(t, jn.renter, v.JobID)
	resumed := ""
	for _, line := range strings.Split(logs, "\n") {
		if strings.HasPrefix(line, "attempt 2 starts at step ") {
			resumed, _, _ = strings.Cut(strings.TrimPrefix(line, "attempt 2 starts at step "), " ")
		}
	}
	if n, err := strconv.Atoi(resumed); err != nil || n < 1 {
		t.Fatalf("attempt 2 did not resume from a checkpoint (resumed at %q):\n%s", resumed, logs)
	}
	if !strings.Contains(logs, "step 40\nfinished") {
		t.Fatalf("job did not finish:\n%s", logs)
	}
	if v.Failovers != 1 || v.Attempts[0].Outcome != job.StateLost {
		t.Fatalf("job view after failover: %+v", v)
	}
	// The lost lease's bill: valid, every receipt acknowledged is paid,
	// nothing after the cut.
	lb := verifyBill(t, jn.renter.Ledger(), lost)
	if lb.PaidMicros != lb.AmountMicros || lb.Receipts == 0 {
		t.Fatalf("lost lease bill: %+v", lb)
	}
	nb := verifyBill(t, jn.renter.Ledger(), v.LeaseID)
	if !nb.Settled {
		t.Fatalf("new lease not settled: %+v", nb)
	}
	// The cut-off supplier's copy ran unpaid: it halted, then stopped.
	eventually(t, 30*time.Second, "the cut-off copy to stop", func() bool {
		for _, r := range jn.cheap.jobs.exec.Runs() {
			if r.LeaseID == lost {
				return job.Ended(r.State)
			}
		}
		return false
	})
}

// TestJobSurvivesRenterRestart stops the renter's node mid-job. The
// supplier keeps billing, pauses the job once the renter owes more than
// the credit limit, and resumes it when the restarted renter node
// reattaches and pays the backlog; the output arrives once, complete.
func TestJobSurvivesRenterRestart(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, time.Minute)
	v := submit(t, jn.renter, stepScript(60, "0.2"), 500*time.Millisecond)
	eventually(t, 30*time.Second, "step 3", func() bool {
		return strings.Contains(jobLogs(t, jn.renter, v.JobID), "step 3\n")
	})
	if err := jn.renter.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the unpaid job to be paused", func() bool {
		for _, r := range jn.cheap.jobs.exec.Runs() {
			if r.LeaseID == v.LeaseID {
				return r.State == job.StateHalted
			}
		}
		return false
	})
	renter := startNode(t, jn.configs[2])
	eventually(t, 60*time.Second, "the job to succeed after the renter came back", func() bool {
		v = jobView(t, renter, v.JobID)
		return v.State == job.StateSucceeded && settledEverywhere(v)
	})
	logs := jobLogs(t, renter, v.JobID)
	for i := 1; i <= 60; i++ {
		if c := strings.Count(logs, fmt.Sprintf("\nstep %d\n", i)); c != 1 {
			t.Fatalf("step %d appears %d times:\n%s", i, c, logs)
		}
	}
	if v.Attempt != 1 || v.Failovers != 0 {
		t.Fatalf("a renter restart must not fail over: %+v", v)
	}
	verifyBill(t, renter.Ledger(), v.LeaseID)
}

// TestJobUnpaidIsStopped: a renter that never comes back gets its job
// paused, then stopped after the halt grace, and billed only up to then.
func TestJobUnpaidIsStopped(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, 2*time.Second)
	v := submit(t, jn.renter, []string{"sleep", "300"}, 500*time.Millisecond)
	time.Sleep(time.Second)
	if err := jn.renter.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the unpaid job to be stopped", func() bool {
		for _, r := range jn.cheap.jobs.exec.Runs() {
			if r.LeaseID == v.LeaseID {
				return r.State == job.StateStopped
			}
		}
		return false
	})
	rep := verifyBill(t, jn.cheap.Ledger(), v.LeaseID)
	if rep.AmountMicros-rep.PaidMicros > 0 && rep.GPUSeconds > 20 {
		t.Fatalf("billed far past the halt: %+v", rep)
	}
	// An unpaid lease is not held to its end: its GPU is free again.
	eventually(t, 10*time.Second, "the unpaid lease's GPU to be free again", func() bool {
		return jn.cheap.Supplier().Ledger().Free("rtx4090") == 1
	})
}

// TestJobStop: the renter stops a running job; it ends as stopped and
// settles.
func TestJobStop(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, time.Minute)
	v := submit(t, jn.renter, []string{"sleep", "300"}, 500*time.Millisecond)
	time.Sleep(time.Second)
	if _, err := jn.renter.Jobs().Stop(v.JobID, ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the job to stop and settle", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.State == job.StateStopped && settledEverywhere(v)
	})
	verifyBill(t, jn.renter.Ledger(), v.LeaseID)
}

// TestJobSpecMustMatchLease: a supplier refuses a spec other than the one
// whose hash the lease carries, and a start on a lease it never made.
func TestJobSpecMustMatchLease(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, time.Minute)
	good, err := job.EncodeSpec(&pb.JobSpec{JobId: job.NewJobID(), Argv: []string{"true"}, Gpus: 1})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := job.EncodeSpec(&pb.JobSpec{JobId: good.JobId, Argv: []string{"sh", "-c", "cat /etc/passwd"}, Gpus: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	l, err := jn.renter.rent(ctx, market.RentRequest{AllowSimulated: true, Filter: mustFilter(t, "model=rtx4090"), Count: 1, Duration: time.Hour, MaxPrice: maxP, AllowUnproven: true, Terms: market.Terms{JobSpecHash: good.Hash[:]}})
	if err != nil {
		t.Fatal(err)
	}
	hello := func(h *pb.Hello, spec, checkpoint []byte) string {
		if len(h.Lease) > 0 {
			h.SpecSize, h.CheckpointSize = uint32(len(spec)), uint64(len(checkpoint))
		}
		st, err := jn.renter.Network().Host.NewStream(ctx, l.Supplier, job.SessionProtocol)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		w, err := job.Handshake(st, h, spec, checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		return w.Refused
	}
	if r := hello(&pb.Hello{Lease: l.Raw, Attempt: 1}, bad.Raw, nil); !strings.Contains(r, "does not match") {
		t.Fatalf("mismatched spec: refusal %q", r)
	}
	if r := hello(&pb.Hello{Lease: l.Raw, Attempt: 0}, good.Raw, nil); !strings.Contains(r, "attempt") {
		t.Fatalf("attempt 0: refusal %q", r)
	}
	if r := hello(&pb.Hello{LeaseId: make([]byte, 32), Attempt: 1}, nil, nil); !strings.Contains(r, "no job") {
		t.Fatalf("attach to nothing: refusal %q", r)
	}
	if r := hello(&pb.Hello{Lease: l.Raw, Attempt: 1, CheckpointHash: make([]byte, 32)}, good.Raw, []byte("x")); !strings.Contains(r, "hash") {
		t.Fatalf("checkpoint with a wrong hash: refusal %q (want a hash complaint)", r)
	}
	if r := hello(&pb.Hello{Lease: l.Raw, Attempt: 1, CheckpointHash: make([]byte, 32)}, good.Raw, make([]byte, job.MaxCheckpointSize+1)); !strings.Contains(r, "checkpoint_size") {
		t.Fatalf("checkpoint over the limit: refusal %q (want it refused on its announced size)", r)
	}
	if r := hello(&pb.Hello{Lease: l.Raw, Attempt: 1}, good.Raw, nil); r != "" {
		t.Fatalf("the right spec was refused: %q", r)
	}
}

// TestJobRestartsOnItsOwnFailure: under restart=on-failure a job that
// exits non-zero runs again as attempt 2, on a lease of its own, from the
// checkpoint of attempt 1 (kept in a checkpoint_dir inside its working
// dir); every lease settles.
func TestJobRestartsOnItsOwnFailure(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	script := `echo "attempt $JOB_ATTEMPT saw: $(cat "$CHECKPOINT_DIR/note" 2>/dev/null)"
[ "$CHECKPOINT_DIR" = "$HOME/state/ckpt" ] || echo "CHECKPOINT_DIR is $CHECKPOINT_DIR, not in the working dir"
echo "from attempt $JOB_ATTEMPT" > "$CHECKPOINT_DIR/note"
sleep 1.5
[ "$JOB_ATTEMPT" = 1 ] && exit 3
echo ok`
	v, err := jn.renter.Jobs().Submit(ctx, job.Request{AllowSimulated: true,
		Spec: &pb.JobSpec{Argv: []string{"sh", "-c", script}, CheckpointEveryS: 1, CheckpointDir: "state/ckpt",
			Restart: &pb.Restart{Policy: "on-failure", MaxRestarts: 1, ExitCodes: []int32{3}}},
		Filter: mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: maxP}, MinReputation: 0.5, AllowUnproven: true, ReceiptInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the job to succeed on its second attempt", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.State == job.StateSucceeded && settledEverywhere(v)
	})
	if v.Restarts != 1 || v.Failovers != 0 || len(v.Attempts) != 2 || v.Attempts[0].Outcome != job.StateFailed || v.Attempts[0].LeaseID == v.Attempts[1].LeaseID {
		t.Fatalf("job after a restart: %+v", v)
	}
	logs := jobLogs(t, jn.renter, v.JobID)
	if !strings.Contains(logs, "attempt 2 saw: from attempt 1") || !strings.HasSuffix(logs, "ok\n") || strings.Contains(logs, "not in the working dir") {
		t.Fatalf("attempt 2 did not resume from attempt 1's checkpoint:\n%s", logs)
	}
	for _, a := range v.Attempts {
		if rep := verifyBill(t, jn.renter.Ledger(), a.LeaseID); !rep.Settled {
			t.Fatalf("lease of attempt %d not settled: %+v", a.Attempt, rep)
		}
	}
}

// TestJobKilledAtLeaseEnd: a job still running when its lease ends is
// stopped by its supplier, and no receipt bills past the lease's end. The
// nodes share a clock the test moves past the lease's end, so the
// one-minute lease (the least the wire allows) ends without a minute's
// wait.
func TestJobKilledAtLeaseEnd(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	clk := clocktest.New()
	jn := startJobNetWith(t, time.Minute, []Option{WithClock(clk)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	v, err := jn.renter.Jobs().Submit(ctx, job.Request{AllowSimulated: true,
		Spec:   &pb.JobSpec{Argv: []string{"sleep", "600"}},
		Filter: mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: market.MinDuration, MaxPrice: maxP}, MinReputation: 0.5, AllowUnproven: true, ReceiptInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	first := v.LeaseID
	runState := func() job.State {
		for _, r := range jn.cheap.jobs.exec.Runs() {
			if r.LeaseID == first {
				return r.State
			}
		}
		return ""
	}
	eventually(t, 30*time.Second, "the job running on the supplier", func() bool { return runState() == job.StateRunning })
	if s := runState(); s != job.StateRunning {
		t.Fatalf("job %s before the lease's end", s)
	}
	clk.Advance(market.MinDuration)
	eventually(t, 30*time.Second, "the supplier to stop the job at the lease's end", func() bool {
		return runState() == job.StateExpired
	})
	// The renter's node counts the expiry as an infrastructure failure
	// and moves on; stop the job there.
	if _, err := jn.renter.Jobs().Stop(v.JobID, "test over"); err != nil {
		t.Fatal(err)
	}
	l, err := market.GetLease(jn.cheap.store, mustID(t, first), clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	rcpts, err := jn.cheap.Ledger().Receipts(l.ID)
	if err != nil || len(rcpts) == 0 {
		t.Fatalf("receipts: %v (%d)", err, len(rcpts))
	}
	last := rcpts[len(rcpts)-1]
	if !last.Final || job.State(last.State) != job.StateExpired || last.EndMs > l.EndMs {
		t.Fatalf("last receipt: final %v, state %q, ends %d ms after the lease", last.Final, last.State, last.EndMs-l.EndMs)
	}
	if rep := verifyBillAt(t, jn.cheap.Ledger(), first, clk.Now()); rep.GPUSeconds > 61 || rep.GPUSeconds < 59 {
		t.Fatalf("billed %.1f GPU-seconds on a one-minute lease of one GPU", rep.GPUSeconds)
	}
}

func mustID(t *testing.T, s string) market.ID {
	t.Helper()
	id, err := market.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestEvidenceGossip: evidence a node finds is gossiped and kept by the
// others; forged evidence (two receipts signed by different keys) is
// refused at the first hop and kept nowhere.
func TestEvidenceGossip(t *testing.T) {
	root := t.TempDir()
	a := startNode(t, func() Config {
		c := testConfig(t, filepath.Join(root, "a"), "none", "eu-west", nil)
		c.AuditInterval = 0
		return c
	}())
	b := startNode(t, func() Config {
		c := testConfig(t, filepath.Join(root, "b"), "none", "eu-west", bootstrapOf(a))
		c.AuditInterval = 0
		return c
	}())
	cheat, other, renter := newTestKey(t), newTestKey(t), newTestKey(t)
	rid, _ := peer.IDFromPrivateKey(renter)
	receipt := func(key crypto.PrivKey, gpuMs int64) []byte {
		raw, err := settle.SealReceipt(&spb.Receipt{
			Renter: []byte(rid), LeaseId: make([]byte, 32), JobId: make([]byte, 16), Attempt: 1, Seq: 1,
			StartMs: 1_800_000_000_000, EndMs: 1_800_000_001_000, Gpus: 1, GpuMs: gpuMs, CumGpuMs: gpuMs,
			PriceMicros: 3_600_000, CumAmountMicros: market.AmountMicros(3_600_000, gpuMs), State: "running",
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	evidence := func(x, y []byte) []byte {
		raw, err := settle.SealEvidence(&spb.Evidence{Kind: settle.KindReceiptEquivocation, A: x, B: y, CreatedMs: time.Now().UnixMilli()}, a.key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	// Wait until a and b know each other on the evidence topic.
	eventually(t, 20*time.Second, "a and b on the evidence topic", func() bool {
		return len(a.jobs.evidence.Peers()) > 0 && len(b.jobs.evidence.Peers()) > 0
	})
	forged := evidence(receipt(cheat, 1000), receipt(other, 900))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.jobs.evidence.Publish(ctx, forged); err == nil {
		t.Fatal("forged evidence was published")
	}
	if err := a.Ledger().AddEvidence(evidence(receipt(cheat, 1000), receipt(cheat, 900)), time.Now()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the evidence at b", func() bool {
		es, err := b.Ledger().Evidence()
		return err == nil && len(es) == 1
	})
	es, _ := b.Ledger().Evidence()
	cid, _ := peer.IDFromPrivateKey(cheat)
	if es[0].Accused != cid || es[0].Reporter != a.ID() {
		t.Fatalf("evidence at b accuses %s, reported by %s", es[0].Accused, es[0].Reporter)
	}
}
