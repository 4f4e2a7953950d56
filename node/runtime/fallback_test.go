//go:build linux

package runtime

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWithoutNamespace runs the shim the way a node that is not root and
// has no user namespaces does: no mount namespace, the rest unchanged.
func TestWithoutNamespace(t *testing.T) {
	r := &processRuntime{log: slog.New(slog.DiscardHandler), allowBare: true}
	r.noUserNS.Store(true)
	work, ck := filepath.Join(t.TempDir(), "w"), filepath.Join(t.TempDir(), "c")
	for _, d := range []string{work, ck} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Without AllowUnsandboxed, a node that is not root and has no user
	// namespace refuses jobs rather than run them unhidden.
	strict := &processRuntime{log: slog.New(slog.DiscardHandler)}
	strict.noUserNS.Store(true)
	if _, err := strict.Start(context.Background(), Spec{JobID: "ab", Argv: []string{"true"}, WorkDir: work, CheckpointDir: ck}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no user namespace, not allowed: err = %v, want ErrUnavailable", err)
	}
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := r.Start(ctx, Spec{JobID: "ab", Argv: []string{"sh", "-c", "readlink /proc/self/ns/mnt; pwd; ulimit -n"},
		WorkDir: work, CheckpointDir: ck, Stdout: &out, Stderr: &out, Limits: Limits{OpenFiles: 55}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(2 * time.Minute):
		p.Stop(0)
		t.Fatal("job did not end")
	}
	if res := p.Result(); res.ExitCode != 0 {
		t.Fatalf("result %+v: %s", res, out.String())
	}
	mine, _ := os.Readlink("/proc/self/ns/mnt")
	want := mine + "\n" + work + "\n55\n"
	if got := out.String(); got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	if !strings.HasPrefix(mine, "mnt:") {
		t.Errorf("own mount namespace %q", mine)
	}
}
