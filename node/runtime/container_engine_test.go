//go:build linux

package runtime_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/runtime"
)

// TestContainerRuntimes runs jobs through docker and podman where an
// engine answers and the test image (GPUMESH_TEST_IMAGE, default
// busybox:latest) is already present: tests pull nothing.
func TestContainerRuntimes(t *testing.T) {
	image := os.Getenv("GPUMESH_TEST_IMAGE")
	if image == "" {
		image = "busybox:latest"
	}
	for _, name := range []string{"docker", "podman"} {
		t.Run(name, func(t *testing.T) {
			rt, err := runtime.New(name, runtime.Options{Log: testLogger(t)})
			if err != nil {
				if !errors.Is(err, runtime.ErrUnavailable) {
					t.Fatalf("New(%q) = %v, want an error wrapping ErrUnavailable", name, err)
				}
				t.Skipf("%s engine not available: %v", name, err)
			}
			if rt.Name() != name {
				t.Errorf("Name() = %q, want %q", rt.Name(), name)
			}
			if err := exec.Command(name, "image", "inspect", image).Run(); err != nil {
				t.Skipf("image %s not present (pull it or set GPUMESH_TEST_IMAGE): %v", image, err)
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
