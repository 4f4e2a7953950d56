//go:build linux

package runtime_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/runtime/runtimetest"
)

// TestContainerRuntimes runs jobs through docker and podman where an
// engine answers, in the test image (runtimetest.Engine): tests pull
// nothing. Without Options.Net containers keep the engine's network, and
// NetworkIsolation says so.
func TestContainerRuntimes(t *testing.T) {
	for _, name := range []string{"docker", "podman"} {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath(name); err == nil && exec.Command(name, "info").Run() != nil {
				if _, err := runtime.New(name, runtime.Options{Log: testLogger(t)}); !errors.Is(err, runtime.ErrUnavailable) {
					t.Errorf("New(%q) with no engine answering = %v, want an error wrapping ErrUnavailable", name, err)
				}
			}
			image := runtimetest.Engine(t, name)
			rt, err := runtime.New(name, runtime.Options{Log: testLogger(t)})
			if err != nil {
				t.Fatalf("New(%q): %v", name, err)
			}
			if rt.Name() != name {
				t.Errorf("Name() = %q, want %q", rt.Name(), name)
			}
			if err := runtime.NetworkIsolation(rt); !errors.Is(err, runtime.ErrNotIsolated) {
				t.Errorf("NetworkIsolation without Options.Net = %v, want ErrNotIsolated", err)
			}

			var out syncBuffer
			s := spec(t, &out, "sh", "-c", `echo hi; echo "$CHECKPOINT_DIR $JOB_ATTEMPT $HOME"; echo data > /work/out.txt; env; exit 3`)
			s.Image = image
			s.Env = []string{"FOO=bar", "CHECKPOINT_DIR=/evil"}
			t.Setenv("GPUMESH_TEST_NODE_SECRET", "node-secret-value")
			res := runJob(t, rt, s)
			if res.ExitCode != 3 {
				t.Errorf("result = %+v, want exit 3\n%s", res, out.String())
			}
			got := out.String()
			for _, want := range []string{"hi\n", "/checkpoint 1 /work\n", "FOO=bar\n"} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if strings.Contains(got, "node-secret-value") {
				t.Errorf("the node's environment reached the container")
			}
			if b, err := os.ReadFile(filepath.Join(s.WorkDir, "out.txt")); err != nil || string(b) != "data\n" {
				t.Errorf("work dir not mounted at /work: %q %v", b, err)
			}

			out = syncBuffer{}
			lines := newLines()
			s = spec(t, lines, "sh", "-c", "echo up; sleep 100")
			s.Image = image
			p := start(t, rt, s)
			lines.next(t)
			if err := p.Pause(); err != nil {
				t.Errorf("Pause: %v", err)
			}
			if err := p.Resume(); err != nil {
				t.Errorf("Resume: %v", err)
			}
			if err := p.Stop(time.Second); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if res := p.Result(); res.ExitCode == 0 {
				t.Errorf("stopped container: result %+v, want a failure", res)
			}
		})
	}
}

// TestContainerNvidiaEnv runs, in docker and podman, an image whose ENV
// asks the NVIDIA container toolkit for every GPU (as every nvidia/cuda
// image does) and for NVSwitch nodes: inside, NVIDIA_VISIBLE_DEVICES is
// what the node set ("void" for a job without GPUs) and the others are
// empty. A job that sets one itself is refused before anything runs.
func TestContainerNvidiaEnv(t *testing.T) {
	for _, name := range []string{"docker", "podman"} {
		t.Run(name, func(t *testing.T) {
			image := runtimetest.ImageWithEnv(t, name, runtimetest.Engine(t, name), "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_NVSWITCH=enabled")
			rt, err := runtime.New(name, runtime.Options{Log: testLogger(t)})
			if err != nil {
				t.Fatalf("New(%q): %v", name, err)
			}
			var out syncBuffer
			s := spec(t, &out, "env")
			s.Image = image
			res := runJob(t, rt, s)
			if res.ExitCode != 0 {
				t.Fatalf("result %+v: %s", res, out.String())
			}
			env := envOf(out.String())
			for k, want := range map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "NVIDIA_NVSWITCH": "", "CUDA_VISIBLE_DEVICES": ""} {
				if got, ok := env[k]; !ok || got != want {
					t.Errorf("%s = %q (set %v) in the container, want %q, which the node set over the image's", k, got, ok, want)
				}
			}
			s = spec(t, &out, "env")
			s.Image = image
			s.Env = []string{"NVIDIA_VISIBLE_DEVICES=all"}
			if p, err := rt.Start(context.Background(), s); !errors.Is(err, runtime.ErrInvalidSpec) {
				if err == nil {
					p.Stop(0)
				}
				t.Errorf("Start with NVIDIA_VISIBLE_DEVICES in the job's env = %v, want ErrInvalidSpec", err)
			}
		})
	}
}
