package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/verify/cuda"
)

// TestNoDriver: without a driver gpucheck says so, as one JSON line and
// on stderr, exits 3 and still writes its report.
func TestNoDriver(t *testing.T) {
	var out, errb bytes.Buffer
	md := filepath.Join(t.TempDir(), "GPU.md")
	code := run(context.Background(), []string{"-lib", "/nonexistent/libcuda.so.1", "-md", md}, &out, &errb)
	if code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	if !strings.Contains(errb.String(), "no NVIDIA GPU/driver") {
		t.Errorf("stderr %q does not say no NVIDIA GPU/driver", errb.String())
	}
	var r errorResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Check != "driver" || r.OK || r.Error == "" {
		t.Errorf("stdout %q: want one driver line with the error (%v)", out.String(), err)
	}
	b, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(b), "## driver: failed") {
		t.Errorf("report %q, %v", b, err)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-kernel", "mma", "-small-n", "128", "-full=false"}, true},
		{[]string{"-kernel", "wgmma"}, false},
		{[]string{"-small-n", "100"}, false},
		{[]string{"extra"}, false},
	}
	for _, tt := range tests {
		_, err := parseFlags(tt.args, &bytes.Buffer{})
		if (err == nil) != tt.ok {
			t.Errorf("parseFlags(%q) = %v, want ok %v", tt.args, err, tt.ok)
		}
	}
}

func TestMarkdown(t *testing.T) {
	results := []any{
		driverResult{Check: "driver", OK: true, Library: "libcuda.so.1", Version: "12.8",
			Devices: []cuda.DeviceInfo{{Name: "NVIDIA H200", Major: 9, SMs: 132, ClockKHz: 1980000, MemoryBytes: 141 << 30}}, Models: []string{"h200"}},
		cuda.SelfTestResult{Check: "selftest", N: 256, T: 4, GPUs: 1, Kernel: "auto", Used: "tiled", Match: true},
		cuda.PeakResult{Check: "mma_peak", Model: "h200", TOPS: 1000, PeakTOPS: 1978.9, Fraction: 0.505, Runs: 3, Match: true},
		cuda.ChallengeResult{Check: "challenge", Model: "h200", N: 32768, T: 141, K: 66, Kernel: "tiled", ChainS: 12.5, CommitS: 13, TOPS: 791.6, Eta: 0.4, Verdict: "pass", Verified: true},
	}
	md := markdown(time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC), results, json.RawMessage(`[{"index":0}]`))
	for _, s := range []string{"2026-12-04 17:00 UTC", "| 0 | NVIDIA H200 | h200 | 9.0 | 132 | 1980 | 141.0 |",
		"byte-identical to the CPU prover", "**η = 0.400**", "1000 TOPS, 0.505 of the 1979 TOPS datasheet peak",
		"The chain kernel runs at 0.79 of the mma.sync ceiling", "| chain (device) | 12.500 |", `[{"index":0}]`, `"check":"selftest"`} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q:\n%s", s, md)
		}
	}
}
