package testnet

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/job"
)

// countJob counts to 40, one step every 0.25 s, resuming from the step
// kept in $CHECKPOINT_DIR.
const countJob = `s=0
[ -f "$CHECKPOINT_DIR/step" ] && s=$(cat "$CHECKPOINT_DIR/step")
echo "attempt $JOB_ATTEMPT starts at step $s"
while [ "$s" -lt 40 ]; do
  s=$((s+1))
  echo "$s" > "$CHECKPOINT_DIR/step.tmp" && mv "$CHECKPOINT_DIR/step.tmp" "$CHECKPOINT_DIR/step"
  echo "step $s"
  sleep 0.25
done
echo finished`

// TestJobSurvivesKills runs a job from node 0 on a network of real node
// processes, then kills its supplier with SIGKILL: the job finishes on
// another supplier from its last checkpoint. Midway through the second
// attempt the renter's own node is killed too: the supplier pauses the
// unpaid job, and the restarted renter node resumes it to the end. Both
// leases' bills then verify.
func TestJobSurvivesKills(t *testing.T) {
	st, dir := up(t, 3)
	renter := st.Nodes[0]
	cli := func(args ...string) (string, error) {
		cmd := exec.CommandContext(t.Context(), st.Binary, append([]string{args[0], "--data", renter.DataDir, "--api", renter.API}, args[1:]...)...)
		cmd.Env = childEnv()
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			t.Logf("%s: %s", strings.Join(args, " "), ee.Stderr)
		}
		return string(out), err
	}
	script := filepath.Join(dir, "count.sh")
	if err := os.WriteFile(script, []byte(countJob), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nobody on the fresh testnet has been challenged: --allow-unproven.
	out, err := cli("run", "vram>=24", "--count", "1", "--max-price", "1.50", "--allow-unproven", "--allow-simulated", "--receipt-interval", "500ms",
		"--checkpoint-every", "1s", "--file", script+":count.sh", "--detach", "--json", "--", "sh", "count.sh")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var started struct {
		JobID    string `json:"job_id"`
		LeaseID  string `json:"lease_id"`
		Supplier string `json:"supplier"`
	}
	if err := json.Unmarshal([]byte(out), &started); err != nil || started.JobID == "" {
		t.Fatalf("run --detach --json printed %q: %v", out, err)
	}
	type attempt struct {
		Attempt  uint32    `json:"attempt"`
		Outcome  job.State `json:"outcome"`
		LeaseID  string    `json:"lease_id"`
		Supplier string    `json:"supplier"`
	}
	type view struct {
		State      job.State `json:"state"`
		Attempt    uint32    `json:"attempt"`
		Supplier   string    `json:"supplier"`
		Checkpoint string    `json:"checkpoint"`
		Attempts   []attempt `json:"attempts"`
	}
	jobView := func() (v view) {
		out, err := cli("jobs", started.JobID, "--json")
		if err == nil {
			_ = json.Unmarshal([]byte(out), &v)
		}
		return v
	}
	logs := func() string {
		out, _ := cli("logs", started.JobID)
		return out
	}
	waitUntil := func(limit time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for %s; logs:\n%s", limit, what, logs())
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	pidOf := func(peerID string) (int, int) {
		for i, n := range st.Nodes {
			if n.PeerID == peerID {
				return i, n.PID
			}
		}
		t.Fatalf("supplier %s is not a testnet node", peerID)
		return -1, 0
	}
	// A checkpoint pulled after step 6 was logged holds step 6 or later
	// (one pulled earlier may predate the job's first rename: receipt 1
	// comes as the job starts).
	var before string
	waitUntil(60*time.Second, "step 6", func() bool {
		before = jobView().Checkpoint
		return strings.Contains(logs(), "step 6\n")
	})
	waitUntil(60*time.Second, "a checkpoint pulled after step 6", func() bool {
		c := jobView().Checkpoint
		return c != "" && c != before
	})
	first, pid := pidOf(started.Supplier)
	if first == 0 {
		t.Fatal("the renter's node leased from itself")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var v view
	waitUntil(60*time.Second, "attempt 2 on another supplier", func() bool {
		v = jobView()
		return v.Attempt == 2 && v.Supplier != started.Supplier && strings.Contains(logs(), "attempt 2 starts at step")
	})
	if strings.Contains(logs(), "attempt 2 starts at step 0\n") {
		t.Fatalf("attempt 2 started from scratch:\n%s", logs())
	}
	// Now the renter's node dies; the new supplier must pause the unpaid
	// job, and the restarted renter node resume it.
	if err := syscall.Kill(renter.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, err := Restart(t.Context(), dir, 0); err != nil {
		t.Fatalf("restart the renter's node: %v", err)
	}
	waitUntil(90*time.Second, "the job to succeed", func() bool {
		v = jobView()
		return v.State == job.StateSucceeded
	})
	l := logs()
	if !strings.Contains(l, "step 40\nfinished") || strings.Count(l, "step 40\n") != 1 {
		t.Fatalf("job output incomplete or repeated:\n%s", l)
	}
	if len(v.Attempts) != 2 || v.Attempts[0].Outcome != job.StateLost || v.Attempts[1].Outcome != job.StateSucceeded {
		t.Fatalf("attempts = %+v, want lost then succeeded", v.Attempts)
	}
	out, err = cli("receipts", "--verify", "--json")
	if err != nil {
		t.Fatalf("receipts --verify: %v\n%s", err, out)
	}
	var reps []struct {
		LeaseID      string   `json:"lease_id"`
		Receipts     int      `json:"receipts"`
		AmountMicros int64    `json:"amount_micros"`
		PaidMicros   int64    `json:"paid_micros"`
		Valid        bool     `json:"valid"`
		Problems     []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &reps); err != nil || len(reps) != 2 {
		t.Fatalf("receipts --verify --json printed %q: %v", out, err)
	}
	for _, r := range reps {
		if !r.Valid || r.Receipts == 0 || r.PaidMicros != r.AmountMicros {
			t.Fatalf("bill %+v", r)
		}
	}
}
