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

// TestFakeDriverTensorRefused: a driver whose JIT refuses the tensor-core
// kernels fails the check, saying so, and the simple kernel and the fold
// are still tested.
func TestFakeDriverTensorRefused(t *testing.T) {
	var out, errb bytes.Buffer
	md := filepath.Join(t.TempDir(), "GPU.md")
	args := []string{"-lib", cudatest.FakeLib(t, "FAKE_REJECT_MMA"), "-small-n", "128", "-small-t", "1", "-full=false", "-mem=false", "-md", md}
	if code := run(context.Background(), args, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out.String())
	}
	for _, s := range []string{`"tensor_errors":["module tensor (sm_80): cuda: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX`, `"check":"selftest"`, `"used":"simple","match":true`, `"check":"foldtest"`} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %s:\n%s", s, out.String())
		}
	}
	if b, _ := os.ReadFile(md); !strings.Contains(string(b), "the tensor-core kernels did not load") {
		t.Errorf("report:\n%s", b)
	}
}
