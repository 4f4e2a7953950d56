//go:build linux && cgo

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/verify/cuda/cudatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	cudatest.Cleanup()
	os.Exit(code)
}

// TestFakeDriver runs gpucheck's self-tests end to end on the fake
// driver (the full-size runs are for a real GPU): a driver line, a
// self-test per kernel and a fold test per device, all passing, and the
// report.
func TestFakeDriver(t *testing.T) {
	var out, errb bytes.Buffer
	md := filepath.Join(t.TempDir(), "GPU.md")
	args := []string{"-lib", cudatest.FakeLib(t), "-small-n", "128", "-small-t", "2", "-full=false", "-mem=false", "-md", md}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	var checks []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var line struct {
			Check string `json:"check"`
			Match *bool  `json:"match"`
			Used  string `json:"used"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if line.Match != nil && !*line.Match {
			t.Errorf("check failed: %s", sc.Text())
		}
		checks = append(checks, line.Check+line.Used)
	}
	if got, want := strings.Join(checks, " "), "driver selftestsimple selftestmma selftesttiled foldtest foldtest"; got != want {
		t.Errorf("checks %q, want %q", got, want)
	}
	b, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(b), "Fake GPU 1") || !strings.Contains(string(b), "byte-identical to the CPU prover") {
		t.Errorf("report:\n%s\n%v", b, err)
	}
}
