package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

// TestJobCannotRedirectItsCheckpoint is issue 9's first attack, end to
// end: a real job on a real supplier keeps its checkpoint in a
// checkpoint_dir inside its working dir, then moves the folder above it
// away and puts a symlink to the supplier's files in its place (here a
// folder outside the job standing in for the node's data dir, with an
// identity.key). The supplier goes on archiving the folder it gave the
// job, and what the renter pulls never holds the supplier's file.
func TestJobCannotRedirectItsCheckpoint(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	jn := startJobNet(t, time.Minute)
	secrets := t.TempDir()
	secret := []byte("SUPPLIER-IDENTITY-KEY-" + strings.Repeat("k", 20))
	if err := os.MkdirAll(filepath.Join(secrets, "ckpt"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "ckpt", "identity.key"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `echo mine > "$CHECKPOINT_DIR/identity.key"
sleep 1.5
mv "$HOME/state" "$HOME/moved" && ln -s "$SECRETS" "$HOME/state" || { echo "could not redirect"; exit 9; }
echo after > "$HOME/moved/ckpt/after-swap"
echo redirected
sleep 5
echo done`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	maxP := money.Unit // 1.00 per GPU-hour
	v, err := jn.renter.Jobs().Submit(ctx, job.Request{AllowSimulated: true, AllowUnproven: true,
		Spec: &pb.JobSpec{Argv: []string{"sh", "-c", script}, CheckpointEveryS: 1, CheckpointDir: "state/ckpt",
			Env: []*pb.EnvVar{{Name: "SECRETS", Value: secrets}}},
		Filter: mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: maxP}, MinReputation: 0.5, ReceiptInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every checkpoint the renter pulls is checked until one taken after
	// the redirect has come.
	eventually(t, 90*time.Second, "a checkpoint taken after the job redirected its folder", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		if v.State == job.StateFailed {
			t.Fatalf("job failed: %+v\n%s", v, jobLogs(t, jn.renter, v.JobID))
		}
		if v.Checkpoint == "" {
			return false
		}
		a, err := os.ReadFile(filepath.Join(jn.dirs[2], "renter-jobs", v.JobID, "checkpoint-"+v.Checkpoint+".tar"))
		if err != nil {
			return false // replaced by a newer one meanwhile
		}
		if bytes.Contains(a, secret) {
			t.Fatalf("the renter pulled the supplier's identity.key in checkpoint %s", v.Checkpoint[:12])
		}
		return bytes.Contains(a, []byte("after-swap"))
	})
	if logs := jobLogs(t, jn.renter, v.JobID); !strings.Contains(logs, "redirected") {
		t.Fatalf("the job did not redirect its folder:\n%s", logs)
	}
	if _, err := jn.renter.Jobs().Stop(v.JobID, "test over"); err != nil {
		t.Fatal(err)
	}
}
