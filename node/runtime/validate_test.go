package runtime

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateMessages pins validate's message for each property of a
// Spec, and the order of its checks: where a Spec breaks two rules, the
// earlier check's message is the one given.
func TestValidateMessages(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	valid := func() Spec {
		return Spec{JobID: "ab12", Attempt: 1, Argv: []string{"true", "x"}, Env: []string{"A=b"},
			WorkDir: dir, CheckpointDir: dir, GPUs: []string{"0"}, Hide: []string{"/etc/shadow"}}
	}
	for _, c := range []struct {
		name   string
		change func(*Spec)
		want   string
	}{
		{"job id", func(s *Spec) { s.JobID = "../x" }, `job id "../x": want 1 to 128 hex digits`},
		{"attempt", func(s *Spec) { s.Attempt = -1 }, "attempt -1: want >= 0"},
		{"empty argv0", func(s *Spec) { s.Argv[0] = "" }, "empty argv"},
		{"NUL in arg", func(s *Spec) { s.Argv[1] = "a\x00" }, "argv[1] contains NUL"},
		{"env without =", func(s *Spec) { s.Env = []string{"A=b", "C"} }, "env[1]: want KEY=VALUE, got no '='"},
		{"env empty name", func(s *Spec) { s.Env = []string{"=x"} }, "env[0]: empty name"},
		{"env NUL", func(s *Spec) { s.Env = []string{"A=b\x00"} }, "env[0] A: contains NUL"},
		{"env CUDA_VISIBLE_DEVICES", func(s *Spec) { s.Env = []string{"A=b", "CUDA_VISIBLE_DEVICES=0,1"} }, "env[1] CUDA_VISIBLE_DEVICES: set by the node to the leased GPUs"},
		{"env NVIDIA_VISIBLE_DEVICES", func(s *Spec) { s.Env = []string{"NVIDIA_VISIBLE_DEVICES=all"} }, "env[0] NVIDIA_VISIBLE_DEVICES: NVIDIA_* variables choose a container's GPUs"},
		{"env NVIDIA_NVSWITCH", func(s *Spec) { s.Env = []string{"NVIDIA_NVSWITCH=enabled"} }, "env[0] NVIDIA_NVSWITCH: NVIDIA_* variables"},
		{"env unknown capability", func(s *Spec) { s.Env = []string{"NVIDIA_DRIVER_CAPABILITIES=compute,gpus"} }, `env[0] NVIDIA_DRIVER_CAPABILITIES: capability "gpus": want a comma list of all, compute`},
		{"relative work dir", func(s *Spec) { s.WorkDir = "work" }, `work dir "work": want an absolute path`},
		{"missing checkpoint dir", func(s *Spec) { s.CheckpointDir = filepath.Join(dir, "no") }, "checkpoint dir: stat "},
		{"checkpoint dir a file", func(s *Spec) { s.CheckpointDir = file }, "checkpoint dir " + file + ": not a directory"},
		{"gpu with comma", func(s *Spec) { s.GPUs = []string{"0,1"} }, `gpu[0] "0,1": want a device index or UUID`},
		{"empty gpu", func(s *Spec) { s.GPUs = []string{"0", ""} }, `gpu[1] "": want a device index or UUID`},
		{"relative gpu device", func(s *Spec) { s.GPUDevices = []string{"nvidia0"} }, `gpu device[0] "nvidia0": want an absolute path`},
		{"missing gpu device", func(s *Spec) { s.GPUDevices = []string{filepath.Join(dir, "nvidia0")} }, "gpu device[0]: stat "},
		{"gpu device a file", func(s *Spec) { s.GPUDevices = []string{file} }, "gpu device[0] " + file + ": not a character device"},
		{"gpu device named like a standard node", func(s *Spec) { s.GPUDevices = []string{"/dev/null"} }, "gpu device[0] /dev/null: /dev/null is taken"},
		{"relative hide", func(s *Spec) { s.Hide = []string{"secret"} }, `hide "secret": want an absolute path`},
		{"hide root", func(s *Spec) { s.Hide = []string{"/a/.."} }, "hide /: would hide everything"},
		{"negative limit", func(s *Spec) { s.Limits.Procs = -1 }, "negative limit in"},
		// Two rules broken: the earlier check wins.
		{"id before argv", func(s *Spec) { s.JobID = ""; s.Argv = nil }, "job id"},
		{"argv before env", func(s *Spec) { s.Argv[1] = "\x00"; s.Env = []string{"C"} }, "argv[1]"},
		{"env before dirs", func(s *Spec) { s.Env = []string{"C"}; s.WorkDir = "w" }, "env[0]"},
		{"dirs before gpus", func(s *Spec) { s.WorkDir = "w"; s.GPUs = []string{""} }, "work dir"},
		{"gpus before gpu devices", func(s *Spec) { s.GPUs = []string{""}; s.GPUDevices = []string{"x"} }, "gpu[0]"},
		{"gpu devices before hide", func(s *Spec) { s.GPUDevices = []string{"x"}; s.Hide = []string{"/"} }, "gpu device[0]"},
		{"hide before limits", func(s *Spec) { s.Hide = []string{"/"}; s.Limits.OpenFiles = -1 }, "hide /"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := valid()
			c.change(&s)
			err := validate(&s)
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalidSpec saying %q", err, c.want)
			}
		})
	}
	s := valid()
	s.Env = append(s.Env, "NVIDIA_DRIVER_CAPABILITIES=compute,utility,video", "NVIDIA_REQUIRE_CUDA=cuda>=12.4", "NVIDIA_DISABLE_REQUIRE=1", "NVIDIAX=1")
	if err := validate(&s); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	if s.Stdout != io.Discard || s.Stderr != io.Discard {
		t.Error("validate left a nil Stdout or Stderr")
	}
}
