package chain

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpumesh/gpumesh/internal/testenv"
)

// TestContractsUpToDate recompiles the contracts with contracts/build.sh
// (solc-js 0.8.37 through npx) into a temporary folder and compares each
// output with the committed contracts/build/, so that the embedded ABI
// and bytecode are those of the committed Solidity. Without npx, or when
// npx cannot run the pinned compiler, it skips (capability solc).
func TestContractsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("recompiles the contracts (-short)")
	}
	if _, err := exec.LookPath("npx"); err != nil {
		testenv.Skip(t, testenv.Solc, "no npx on PATH (Debian's nodejs and npm)")
	}
	if out, err := exec.Command("npx", "--yes", "solc@0.8.37", "--version").CombinedOutput(); err != nil {
		testenv.Skip(t, testenv.Solc, "npx cannot run solc@0.8.37: %v: %s", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("contracts/build.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("contracts/build.sh: %v\n%s", err, out)
	}
	want, _ := filepath.Glob("contracts/build/*")
	got, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("build.sh wrote %d files, contracts/build/ holds %d", len(got), len(want))
	}
	for _, w := range want {
		wb, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := os.ReadFile(filepath.Join(dir, filepath.Base(w)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gb, wb) {
			t.Errorf("%s differs from a fresh compile: run chain/contracts/build.sh and commit contracts/build/", w)
		}
	}
}
