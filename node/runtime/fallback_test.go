//go:build linux

package runtime

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestFallBack checks what a failed launch is retried without: the
// cgroup when the shim could not start in it, the user namespace when the
// kernel refused one (only where unsandboxed jobs are allowed), and
// nothing otherwise.
func TestFallBack(t *testing.T) {
	startErr := &shimError{stage: "start", err: errors.New("start shim: resource temporarily unavailable")}
	refused := &shimError{stage: "start", err: os.NewSyscallError("clone", unix.EPERM)}
	nsErr := &shimError{stage: stageNamespace, err: errors.New("map uid")}
	mountErr := &shimError{stage: stageMounts, err: errors.New("bind")}
	other := errors.New("pipes")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	both := launchMode{cgroup: true, userns: true}
	userns := launchMode{userns: true}
	for _, c := range []struct {
		name      string
		ctx       context.Context
		err       error
		m         launchMode
		inCgroup  bool
		allowBare bool
		retry     bool
		want      launchMode // retry: the next mode
		wantErr   error      // !retry: what the error wraps
		noUserNS  bool
	}{
		{"cgroup refused the shim", bg, startErr, both, true, false, true, userns, nil, false},
		{"cgroup refused the shim, userns too", bg, refused, both, true, false, true, userns, nil, false},
		{"context ended", canceled, startErr, both, true, true, false, both, startErr, false},
		{"userns refused, bare allowed", bg, refused, userns, false, true, true, launchMode{}, nil, true},
		{"userns refused, bare not allowed", bg, nsErr, userns, false, false, false, userns, ErrUnavailable, true},
		{"namespace stage, bare allowed", bg, nsErr, userns, false, true, true, launchMode{}, nil, true},
		{"start failed, not a refusal", bg, startErr, userns, false, true, false, userns, startErr, false},
		{"a later stage failed", bg, mountErr, both, true, true, false, both, mountErr, false},
		{"not a shim error", bg, other, both, true, true, false, both, other, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &processRuntime{log: slog.New(slog.DiscardHandler), allowBare: c.allowBare}
			got, err := r.fallBack(c.ctx, c.err, c.m, c.inCgroup, "job ab attempt 0", r.log)
			if c.retry {
				if err != nil || got != c.want {
					t.Fatalf("fallBack = %+v, %v; want %+v, retried", got, err, c.want)
				}
			} else if err == nil || !strings.HasPrefix(err.Error(), "job ab attempt 0: ") || !errors.Is(err, c.wantErr) {
				t.Fatalf("fallBack = %+v, %v; want an error wrapping %v", got, err, c.wantErr)
			}
			if r.noUserNS.Load() != c.noUserNS {
				t.Errorf("noUserNS = %v, want %v", r.noUserNS.Load(), c.noUserNS)
			}
		})
	}
}

// TestBPFFilterNeedsCgroup: where jobs get the BPF device filter, which
// lives on the job's cgroup v2 cgroup, a job that cannot have one is
// refused (ErrUnavailable, saying why), never run unfiltered: when the
// cgroup cannot be made, and when the shim cannot be started in it.
func TestBPFFilterNeedsCgroup(t *testing.T) {
	work := t.TempDir()
	r := &processRuntime{log: slog.New(slog.DiscardHandler), root: os.Geteuid() == 0, allowBare: true,
		cg: &cgroupRoot{root: filepath.Join(t.TempDir(), "no", "cgroup")}, filters: deviceFilters{bpf: true}}
	p, err := r.Start(context.Background(), Spec{JobID: "ab", Argv: []string{"true"}, WorkDir: work, CheckpointDir: work})
	if err == nil {
		<-p.Done()
		t.Fatal("the job ran without its cgroup, so without the device filter")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "device filter (cgroup v2 BPF) needs a cgroup of its own") {
		t.Errorf("err = %v, want ErrUnavailable naming the device filter", err)
	}

	startErr := &shimError{stage: "start", err: errors.New("start shim: clone3: operation not permitted")}
	m := launchMode{cgroup: true}
	if got, err := r.fallBack(context.Background(), startErr, m, true, "job ab attempt 0", r.log); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "device filter") {
		t.Errorf("fallBack after the shim could not start in its cgroup = %+v, %v; want ErrUnavailable naming the device filter", got, err)
	}
}

// TestFallBackWithoutDevpts: when the kernel refuses a job a devpts of
// its own, the job is started again without /dev/pts (never with the
// host's), later jobs start so at once, and the node says so once.
func TestFallBackWithoutDevpts(t *testing.T) {
	var logs lockedBuffer
	r := &processRuntime{log: slog.New(slog.NewTextHandler(&logs, nil))}
	refused := &shimError{stage: stageDevpts, err: errors.New("private /dev: a devpts of the job's own: permission denied")}
	for range 2 {
		got, err := r.fallBack(context.Background(), refused, launchMode{cgroup: true, devpts: true}, true, "job ab attempt 0", r.log)
		if err != nil || got != (launchMode{cgroup: true}) {
			t.Fatalf("fallBack = %+v, %v; want a retry without devpts", got, err)
		}
	}
	if !r.noDevpts.Load() {
		t.Error("noDevpts not set: later jobs would try a devpts again")
	}
	if n := strings.Count(logs.String(), "jobs get no /dev/pts"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestTerminalWithoutNamespace: without a PID namespace the shim itself
// leads the job's session on its terminal (setsid, TIOCSCTTY): Ctrl-C
// interrupts the interactive shell's foreground job, Ctrl-D ends it with
// its status, and a resize reaches it.
func TestTerminalWithoutNamespace(t *testing.T) {
	r := &processRuntime{log: slog.New(slog.DiscardHandler), allowBare: true}
	r.noUserNS.Store(true)
	work, ck := filepath.Join(t.TempDir(), "w"), filepath.Join(t.TempDir(), "c")
	for _, d := range []string{work, ck} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var out lockedBuffer
	in, keys := io.Pipe()
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := r.Start(ctx, Spec{JobID: "ab", Argv: []string{"sh", "-i"}, WorkDir: work, CheckpointDir: ck,
		Stdout: &out, Stderr: &out, Stdin: in, TTY: &WinSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(0)
	see := func(what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in %q", what, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := p.(Terminal).Resize(WinSize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(keys, "stty size; echo RE''ADY; sleep 100\n")
	see("50 132\r\n")
	see("READY\r\n")
	_, _ = io.WriteString(keys, "\x03")
	_, _ = io.WriteString(keys, "echo status $?\n")
	see("status 130\r\n")
	_, _ = io.WriteString(keys, "(exit 7)\n\x04")
	select {
	case <-p.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the shell did not end on Ctrl-D: %q", out.String())
	}
	if res := p.Result(); res.ExitCode != 7 {
		t.Errorf("result %+v, want exit 7 (%q)", res, out.String())
	}
}
