package chaos

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// gpumeshBinary builds the gpumesh binary once for the package's tests.
func gpumeshBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpumesh")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/gpumesh/gpumesh/cmd/gpumesh")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build gpumesh: %v\n%s", err, out)
	}
	return bin
}

// TestChaos is a short chaos run on 13 nodes (one clock 30 s ahead, one
// 30 s behind): a flood, then kills and restarts of random nodes, the
// renters' own included, under rents and jobs. Every check of the report
// must hold.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 13 node processes for about two minutes")
	}
	bin := gpumeshBinary(t)
	dir := t.TempDir()
	rep, err := Run(t.Context(), Options{
		Binary: bin, Dir: dir, Nodes: 13,
		Calm: 15 * time.Second, Flood: 20 * time.Second, Kills: 45 * time.Second,
		KillEvery: 9 * time.Second, Downtime: 3 * time.Second, FloodRate: 100,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown("test run"))
	for _, f := range rep.Failures {
		t.Error(f)
	}
	if len(rep.Kills) < 3 {
		t.Errorf("%d kills in the kills phase, want at least 3", len(rep.Kills))
	}
	if rep.FloodSent < 100 {
		t.Errorf("the flooder published %d asks, want a flood", rep.FloodSent)
	}
	if rep.Ledger.Receipts == 0 || rep.Ledger.Paired == 0 {
		t.Errorf("the ledgers hold %d acknowledged receipts over %d paired leases: the audit checked nothing", rep.Ledger.Receipts, rep.Ledger.Paired)
	}
	ok := 0
	for _, s := range rep.Stats() {
		ok += s.RentsOK
	}
	if ok == 0 {
		t.Error("no rent succeeded")
	}
}
