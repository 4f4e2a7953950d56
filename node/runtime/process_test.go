//go:build linux

package runtime_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node/runtime"
)

// helperEnv selects a helper mode of the test binary, run as a job (or as
// a stand-in node) instead of the tests.
const helperEnv = "GPUMESH_RUNTIME_TEST_HELPER"

func TestMain(m *testing.M) {
	runtime.MaybeShim()
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Args[1:]))
	}
	leakcheck.Main(m)
}

// helper runs one helper mode and returns the exit code.
func helper(mode string, args []string) int {
	switch mode {
	case "node": // node WORKDIR CKDIR: start "sleep 1000" as a job, print its pid, wait to be killed
		rt, err := runtime.New("process", runtime.Options{Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		p, err := rt.Start(context.Background(), runtime.Spec{
			JobID: "feed", Argv: []string{"sleep", "1000"}, WorkDir: args[0], CheckpointDir: args[1],
		})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("pid", p.Pid())
		<-p.Done()
		return 0
	case "run": // run WORKDIR CKDIR SCRIPT HIDE...: run sh -c SCRIPT as a job, print its output and "EXIT <code>"
		rt, err := runtime.New("process", runtime.Options{Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		p, err := rt.Start(context.Background(), runtime.Spec{
			JobID: "feed", Argv: []string{"sh", "-c", args[2]}, WorkDir: args[0], CheckpointDir: args[1],
			Hide: args[3:], Stdout: os.Stdout, Stderr: os.Stdout,
		})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		<-p.Done()
		fmt.Println("EXIT", p.Result().ExitCode)
		return 0
	case "netrun": // see netHelper
		return netHelper(args)
	case "netpool": // see netPoolHelper
		return netPoolHelper()
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// syncBuffer is a bytes.Buffer safe for the runtime's copy goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newRuntime(t *testing.T) runtime.Runtime {
	t.Helper()
	rt, err := runtime.New("process", runtime.Options{Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// jobDirs makes a WorkDir and CheckpointDir under base.
func jobDirs(t *testing.T, base string) (work, ck string) {
	t.Helper()
	work, ck = filepath.Join(base, "work"), filepath.Join(base, "checkpoint")
	for _, d := range []string{work, ck} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return work, ck
}

// spec is a Spec with fresh dirs and both streams into out.
func spec(t *testing.T, out io.Writer, argv ...string) runtime.Spec {
	work, ck := jobDirs(t, t.TempDir())
	return runtime.Spec{JobID: "c0ffee", Attempt: 1, Argv: argv, WorkDir: work, CheckpointDir: ck, Stdout: out, Stderr: out}
}

const waitLimit = 2 * time.Minute

func start(t *testing.T, rt runtime.Runtime, s runtime.Spec) runtime.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	p, err := rt.Start(ctx, s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(0) })
	return p
}

func wait(t *testing.T, p runtime.Process) runtime.Result {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(waitLimit):
		_ = p.Stop(0)
		t.Fatalf("job %d still running after %v", p.Pid(), waitLimit)
	}
	return p.Result()
}

func runJob(t *testing.T, rt runtime.Runtime, s runtime.Spec) runtime.Result {
	t.Helper()
	return wait(t, start(t, rt, s))
}

func TestOutputAndExitCode(t *testing.T) {
	rt := newRuntime(t)
	var out, errOut syncBuffer
	s := spec(t, &out, "sh", "-c", "echo hi; echo err >&2; exit 3")
	s.Stderr = &errOut
	res := runJob(t, rt, s)
	if res.ExitCode != 3 || res.Signal != "" || res.Err != nil {
		t.Errorf("result = %+v, want exit 3", res)
	}
	if got := out.String(); got != "hi\n" {
		t.Errorf("stdout = %q, want %q", got, "hi\n")
	}
	if got := errOut.String(); got != "err\n" {
		t.Errorf("stderr = %q, want %q", got, "err\n")
	}
}

func TestSharedWriterKeepsOrder(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	res := runJob(t, rt, spec(t, &out, "sh", "-c", "echo 1; echo 2 >&2; echo 3; echo 4 >&2"))
	if res.ExitCode != 0 {
		t.Fatalf("result = %+v", res)
	}
	if got, want := out.String(), "1\n2\n3\n4\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

// envOf parses the output of env.
func envOf(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestEnvironment(t *testing.T) {
	t.Setenv("GPUMESH_TEST_NODE_SECRET", "node-secret-value")
	rt := newRuntime(t)
	for _, tc := range []struct {
		name string
		gpus []string
		want string
	}{
		{"gpus", []string{"GPU-1111", "GPU-2222"}, "GPU-1111,GPU-2222"},
		{"no-gpus", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out syncBuffer
			s := spec(t, &out, "env")
			s.GPUs = tc.gpus
			s.Env = []string{"FOO=bar=baz", "LANG=de_DE.UTF-8", "CHECKPOINT_DIR=/evil", "HOME=/evil", "JOB_ATTEMPT=99",
				"GPUMESH_JOB_ID=evil", "EMPTY="}
			res := runJob(t, rt, s)
			if res.ExitCode != 0 {
				t.Fatalf("result = %+v, output %q", res, out.String())
			}
			env := envOf(out.String())
			want := map[string]string{
				"PATH":                 runtime.DefaultPath,
				"HOME":                 s.WorkDir,
				"LANG":                 "de_DE.UTF-8",
				"TMPDIR":               filepath.Join(s.WorkDir, "tmp"),
				"CUDA_VISIBLE_DEVICES": tc.want,
				"CHECKPOINT_DIR":       s.CheckpointDir,
				"JOB_ATTEMPT":          "1",
				"GPUMESH_JOB_ID":       "c0ffee",
				"FOO":                  "bar=baz",
				"EMPTY":                "",
			}
			for k, v := range want {
				if got, ok := env[k]; !ok || got != v {
					t.Errorf("%s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			for k := range env {
				if _, ok := want[k]; !ok {
					t.Errorf("unexpected variable %s=%q reached the job", k, env[k])
				}
			}
			if strings.Contains(out.String(), "node-secret-value") {
				t.Errorf("the node's environment leaked into the job")
			}
			if fi, err := os.Stat(filepath.Join(s.WorkDir, "tmp")); err != nil || !fi.IsDir() {
				t.Errorf("TMPDIR not created: %v", err)
			}
		})
	}
}

func TestRenterPathIsUsed(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	s := spec(t, &out, "myprog")
	bin := filepath.Join(s.WorkDir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "myprog"), []byte("#!/bin/sh\necho from-renter-path \"$PWD\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.Env = []string{"PATH=" + bin + ":" + runtime.DefaultPath}
	res := runJob(t, rt, s)
	if res.ExitCode != 0 {
		t.Fatalf("result = %+v, output %q", res, out.String())
	}
	if got, want := out.String(), "from-renter-path "+s.WorkDir+"\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestCommandNotFound(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	res := runJob(t, rt, spec(t, &out, "no-such-command-gpumesh"))
	if res.ExitCode != 127 || res.Err != nil {
		t.Errorf("result = %+v, want exit 127", res)
	}
	if got := out.String(); !strings.Contains(got, "no-such-command-gpumesh: command not found") {
		t.Errorf("stderr = %q, want a command-not-found message", got)
	}

	out = syncBuffer{}
	s := spec(t, &out, "./not-executable")
	if err := os.WriteFile(filepath.Join(s.WorkDir, "not-executable"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = runJob(t, rt, s)
	if res.ExitCode != 127 {
		t.Errorf("result = %+v, want exit 127", res)
	}
	if got := out.String(); !strings.Contains(got, "not-executable") || !strings.Contains(got, "permission denied") {
		t.Errorf("stderr = %q, want a permission-denied message", got)
	}
}

func TestInvalidSpec(t *testing.T) {
	rt := newRuntime(t)
	ok := spec(t, io.Discard, "true")
	for _, tc := range []struct {
		name   string
		change func(*runtime.Spec)
	}{
		{"env without =", func(s *runtime.Spec) { s.Env = []string{"FOO"} }},
		{"env empty name", func(s *runtime.Spec) { s.Env = []string{"=x"} }},
		{"env NUL", func(s *runtime.Spec) { s.Env = []string{"A=b\x00c"} }},
		{"no argv", func(s *runtime.Spec) { s.Argv = nil }},
		{"job id", func(s *runtime.Spec) { s.JobID = "../x" }},
		{"relative work dir", func(s *runtime.Spec) { s.WorkDir = "work" }},
		{"missing checkpoint dir", func(s *runtime.Spec) { s.CheckpointDir = "/nonexistent/gpumesh" }},
		{"relative hide", func(s *runtime.Spec) { s.Hide = []string{"secret"} }},
		{"hide work dir", func(s *runtime.Spec) { s.Hide = []string{s.WorkDir} }},
		{"gpu with comma", func(s *runtime.Spec) { s.GPUs = []string{"0,1"} }},
		{"negative limit", func(s *runtime.Spec) { s.Limits.MemoryBytes = -1 }},
		{"bad run-as", func(s *runtime.Spec) { s.RunAs = "x:y" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.change(&s)
			p, err := rt.Start(context.Background(), s)
			if err == nil {
				<-p.Done()
				t.Fatalf("Start succeeded, want an error")
			}
			if !errors.Is(err, runtime.ErrInvalidSpec) {
				t.Errorf("error %v does not wrap ErrInvalidSpec", err)
			}
		})
	}
}

// secretFiles is a node data dir as the executor lays it out, with
// secrets in it, and one job's dirs inside.
type secretFiles struct {
	data, key, token, store, storeFile, other, otherFile string
	work, ck                                             string
	secrets                                              []string
}

func makeDataDir(t *testing.T, base string) secretFiles {
	t.Helper()
	secret := func() string {
		b := make([]byte, 24)
		rand.Read(b)
		return "SECRET-" + hex.EncodeToString(b)
	}
	d := secretFiles{data: filepath.Join(base, "data")}
	d.key = filepath.Join(d.data, "identity.key")
	d.token = filepath.Join(d.data, "api.token")
	d.store = filepath.Join(d.data, "store")
	d.storeFile = filepath.Join(d.store, "000001.vlog")
	d.other = filepath.Join(d.data, "jobs", "beef", "1")
	d.otherFile = filepath.Join(d.other, "work", "renter-data.bin")
	d.work = filepath.Join(d.data, "jobs", "c0ffee", "1", "work")
	d.ck = filepath.Join(d.data, "jobs", "c0ffee", "1", "checkpoint")
	for _, dir := range []string{d.store, filepath.Dir(d.otherFile), d.work, d.ck} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Files the job is never told about: only a listing can name them.
	for _, f := range []string{filepath.Join(d.store, "MANIFEST-unlisted"), filepath.Join(d.other, "unlisted-file")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{d.key, 0o600}, {d.token, 0o644}, {d.storeFile, 0o644}, {d.otherFile, 0o644}} {
		s := secret()
		d.secrets = append(d.secrets, s)
		if err := os.WriteFile(f.path, []byte(s), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// probeScript tries to read every secret (directly and through the node's
// /proc entries), to list the hidden dirs, to get out of the sandbox, and
// to write where it may.
const probeScript = `
for f in "$KEY" "$TOKEN" "$STOREFILE" "$OTHERFILE" "/proc/$PPID/root$KEY" "/proc/$PPID/environ"; do
  if cat "$f"; then echo "READ-OK $f"; else echo "READ-FAIL $f"; fi
done
if ls -la "$STORE"; then echo "LS-OK store"; else echo "LS-FAIL store"; fi
if ls -la "$OTHER"; then echo "LS-OK other"; else echo "LS-FAIL other"; fi
umount "$STORE" 2>/dev/null && echo "UMOUNT-OK" || echo "UMOUNT-FAIL"
if echo x > "$DATA/escape"; then echo "ESCAPE-OK"; else echo "ESCAPE-FAIL"; fi
if echo work > "$HOME/work.txt" && echo tmp > "$TMPDIR/t" && echo t > /tmp/t; then echo "WRITE-WORK-OK"; fi
if echo ck > "$CHECKPOINT_DIR/ck.txt"; then echo "WRITE-CK-OK"; fi
id -u
`

func TestSandboxHidesNodeSecrets(t *testing.T) {
	// Outside /tmp, which every job gets a private copy of anyway: this
	// test is about Hide.
	base, err := os.MkdirTemp("/var/tmp", "gpumesh-runtime-test-")
	if err != nil {
		t.Skipf("no /var/tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t)
	for _, tc := range []struct {
		name  string
		runAs string
		jobs  bool // hide the whole jobs dir (an ancestor of WorkDir) instead of the other job's
	}{
		{"node-user/jobs-dir", "", true},
		{"node-user/other-job", "", false},
		{"nobody/jobs-dir", "nobody", true},
		{"nobody/other-job", "nobody", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.runAs != "" && os.Geteuid() != 0 {
				testenv.Skip(t, testenv.Root, "RunAs needs root")
			}
			d := makeDataDir(t, filepath.Join(base, strings.ReplaceAll(tc.name, "/", "-")))
			hide := []string{d.key, d.token, d.store}
			if tc.jobs {
				hide = append(hide, filepath.Join(d.data, "jobs"))
			} else {
				hide = append(hide, d.other)
			}
			s := runtime.Spec{
				JobID: "c0ffee", Attempt: 1, WorkDir: d.work, CheckpointDir: d.ck, RunAs: tc.runAs,
				Argv: []string{"sh", "-c", probeScript},
				Env: []string{"KEY=" + d.key, "TOKEN=" + d.token, "STORE=" + d.store, "STOREFILE=" + d.storeFile,
					"OTHER=" + d.other, "OTHERFILE=" + d.otherFile, "DATA=" + d.data},
			}

			// Control: without Hide the same job reads what the node
			// user's (or nobody's) permissions allow.
			var control syncBuffer
			s.Stdout, s.Stderr = &control, &control
			if res := runJob(t, rt, s); res.ExitCode != 0 {
				t.Fatalf("control job: %+v\n%s", res, control.String())
			}
			readable := d.secrets[1:] // 0644 files
			if tc.runAs == "" {
				readable = d.secrets // root or the node's user owns the 0600 key too
			}
			for _, sec := range readable {
				if !strings.Contains(control.String(), sec) {
					t.Fatalf("control job could not read a secret the test expects readable without Hide; the test proves nothing:\n%s", control.String())
				}
			}
			if err := os.RemoveAll(filepath.Join(d.data, "escape")); err != nil {
				t.Fatal(err)
			}

			var out syncBuffer
			s.Stdout, s.Stderr, s.Hide = &out, &out, hide
			res := runJob(t, rt, s)
			got := out.String()
			t.Logf("job output:\n%s", got)
			if res.ExitCode != 0 {
				t.Fatalf("result = %+v", res)
			}
			for _, sec := range d.secrets {
				if strings.Contains(got, sec) {
					t.Errorf("a secret reached the job")
				}
			}
			for _, f := range []string{d.key, d.token, d.storeFile, d.otherFile} {
				if !strings.Contains(got, "READ-FAIL "+f+"\n") {
					t.Errorf("job could read %s", f)
				}
			}
			for _, want := range []string{"LS-FAIL store", "LS-FAIL other", "UMOUNT-FAIL", "ESCAPE-FAIL", "WRITE-WORK-OK", "WRITE-CK-OK"} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if strings.Contains(got, "READ-OK /proc/") {
				t.Errorf("job could read the node's /proc entries")
			}
			if !strings.Contains(control.String(), "MANIFEST-unlisted") || !strings.Contains(control.String(), "unlisted-file") {
				t.Errorf("control job could not list the dirs; the listing check proves nothing")
			}
			if strings.Contains(got, "unlisted") {
				t.Errorf("job could list a hidden dir")
			}
			if _, err := os.Stat(filepath.Join(d.data, "escape")); err == nil {
				t.Errorf("job wrote outside its dirs")
			}
			for _, f := range []string{filepath.Join(d.work, "work.txt"), filepath.Join(d.work, "tmp", "t"), filepath.Join(d.ck, "ck.txt")} {
				fi, err := os.Stat(f)
				if err != nil {
					t.Errorf("job's file: %v", err)
					continue
				}
				if tc.runAs == "nobody" && fi.Sys().(*syscall.Stat_t).Uid != 65534 {
					t.Errorf("%s owned by uid %d, want nobody", f, fi.Sys().(*syscall.Stat_t).Uid)
				}
			}
			// The node's view is untouched.
			for i, f := range []string{d.key, d.token, d.storeFile, d.otherFile} {
				b, err := os.ReadFile(f)
				if err != nil || string(b) != d.secrets[i] {
					t.Errorf("node's %s changed: %v", f, err)
				}
			}
			if err := os.WriteFile(filepath.Join(base, "host-still-writable"), nil, 0o644); err != nil {
				t.Errorf("the host filesystem is no longer writable: %v", err)
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	rt := newRuntime(t)
	// dd allocates its block: 512 MiB.
	var out syncBuffer
	s := spec(t, &out, "dd", "if=/dev/zero", "of=/dev/null", "bs=512M", "count=1")
	s.Limits.MemoryBytes = 2 << 30
	if res := runJob(t, rt, s); res.ExitCode != 0 {
		t.Fatalf("512 MiB within a 2 GiB limit: %+v\n%s", res, out.String())
	}
	out = syncBuffer{}
	s.Limits.MemoryBytes = 256 << 20
	res := runJob(t, rt, s)
	if res.ExitCode == 0 {
		t.Errorf("512 MiB within a 256 MiB limit succeeded: %+v\n%s", res, out.String())
	}
	if !strings.Contains(out.String(), "memory exhausted") {
		t.Errorf("output = %q, want dd's memory exhausted", out.String())
	}
}

func TestFileSizeLimit(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	s := spec(t, &out, "dd", "if=/dev/zero", "of=big", "bs=1024", "count=4096")
	s.Limits.FileBytes = 1 << 20
	res := runJob(t, rt, s)
	if res.ExitCode == 0 {
		t.Errorf("a 4 MiB write under a 1 MiB limit succeeded: %+v", res)
	}
	if res.Signal != syscall.SIGXFSZ.String() && res.ExitCode <= 0 {
		t.Errorf("result = %+v, want SIGXFSZ or a failed exit", res)
	}
	fi, err := os.Stat(filepath.Join(s.WorkDir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 1<<20 {
		t.Errorf("file grew to %d bytes, over the 1 MiB limit", fi.Size())
	}
}

func TestOpenFilesLimit(t *testing.T) {
	rt := newRuntime(t)
	for _, tc := range []struct {
		limit int64
		want  string
	}{{0, "1024"}, {77, "77"}} {
		var out syncBuffer
		s := spec(t, &out, "sh", "-c", "ulimit -n")
		s.Limits.OpenFiles = tc.limit
		if res := runJob(t, rt, s); res.ExitCode != 0 {
			t.Fatalf("result = %+v", res)
		}
		if got := strings.TrimSpace(out.String()); got != tc.want {
			t.Errorf("OpenFiles %d: ulimit -n = %q, want %s", tc.limit, got, tc.want)
		}
	}
}

func TestCPULimit(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	s := spec(t, &out, "sh", "-c", "while :; do :; done")
	s.Limits.CPUSeconds = 1
	res := runJob(t, rt, s)
	if res.Signal != syscall.SIGXCPU.String() && res.Signal != syscall.SIGKILL.String() {
		t.Errorf("result = %+v, want SIGXCPU or SIGKILL", res)
	}
	if res.CPUTime < 500*time.Millisecond {
		t.Errorf("CPUTime = %v, want about a second", res.CPUTime)
	}
}

func TestProcsLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "RLIMIT_NPROC needs RunAs, which needs root")
	}
	rt := newRuntime(t)
	var out syncBuffer
	s := spec(t, &out, "sh", "-c", "echo started; for i in 1 2 3 4 5 6 7 8; do sleep 2 & done; wait; echo done")
	s.RunAs = "nobody"
	s.Limits.Procs = 3
	res := runJob(t, rt, s)
	t.Logf("result %+v, output %q", res, out.String())
	if !strings.HasPrefix(out.String(), "started\n") {
		t.Fatalf("job did not start under a limit of 3 processes: %+v %q", res, out.String())
	}
	if !strings.Contains(out.String(), "fork") {
		t.Errorf("8 background processes under a limit of 3: no fork failure in %q", out.String())
	}
}

// lines is a writer that reports each complete line on a channel.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	n   int
	ch  chan string
}

func newLines() *lines { return &lines{ch: make(chan string, 1000)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			break
		}
		l.n++
		select {
		case l.ch <- strings.TrimSpace(line):
		default:
		}
	}
	return len(p), nil
}

func (l *lines) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *lines) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-l.ch:
		return s
	case <-time.After(waitLimit):
		t.Fatal("no output line")
		return ""
	}
}

// gone reports whether pid no longer runs (absent or a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// state is the state letter of pid ("" when gone).
func state(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// paused reports whether pid can no longer run: stopped by a signal
// ("T") or about to be (stopPending), or in a frozen cgroup. Pause does both where the job has a
// cgroup, and a freeze that lands before the stop signal is delivered
// (a busy machine may not schedule the process in between) leaves it
// frozen, not stopped.
func paused(pid int) bool {
	if state(pid) == "T" || stopPending(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			ev, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "cgroup.events"))
			return err == nil && bytes.Contains(ev, []byte("frozen 1"))
		}
	}
	return false
}

// stopPending reports whether pid has a SIGSTOP pending: it can no longer
// run its own code, since the kernel delivers the signal, and stops it,
// before returning to it. A shell that forked with vfork waits (state D)
// until its child execs, and cannot stop before; when the child was
// stopped first, the shell stays in that wait with the stop pending
// until Resume's SIGCONT discards it.
func stopPending(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(syscall.SIGSTOP-1)) != 0 {
			return true
		}
	}
	return false
}

// hostPid is the pid, as this test sees it, of the process that has pid
// nsPid in the PID namespace of the job whose shim is shimPid (a job
// without a PID namespace of its own prints host pids: they map to
// themselves).
func hostPid(t *testing.T, shimPid, nsPid int) int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", shimPid))
	if err != nil {
		t.Fatalf("pid namespace of job %d: %v", shimPid, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 && f[len(f)-1] == strconv.Itoa(nsPid) {
					return pid
				}
			}
		}
	}
	t.Fatalf("no process with pid %d in the namespace of job %d", nsPid, shimPid)
	return 0
}

// printedPid reads a pid the job printed and maps it to this test's view.
func printedPid(t *testing.T, p runtime.Process, out *lines) int {
	t.Helper()
	line := out.next(t)
	n, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("job printed %q, want a pid", line)
	}
	return hostPid(t, p.Pid(), n)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStopKillsTheGroup(t *testing.T) {
	rt := newRuntime(t)
	out := newLines()
	p := start(t, rt, spec(t, out, "sh", "-c", "sleep 100 & echo $!; sleep 100"))
	child := printedPid(t, p, out)
	if gone(child) {
		t.Fatalf("grandchild %d not running", child)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before Done")
	}
	if res := p.Result(); res.Signal != syscall.SIGTERM.String() {
		t.Errorf("result = %+v, want terminated", res)
	}
	eventually(t, "the grandchild to die", func() bool { return gone(child) })
}

func TestStopEscalatesToKill(t *testing.T) {
	rt := newRuntime(t)
	out := newLines()
	p := start(t, rt, spec(t, out, "sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"))
	out.next(t)
	if err := p.Stop(200 * time.Millisecond); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if res := p.Result(); res.Signal != syscall.SIGKILL.String() {
		t.Errorf("result = %+v, want killed", res)
	}
}

func TestLeftoversAreKilledWhenTheLeaderExits(t *testing.T) {
	rt := newRuntime(t)
	out := newLines()
	s := spec(t, out, "sh", "-c", "sleep 100 & echo $!; while [ ! -e go ]; do sleep 0.05; done")
	p := start(t, rt, s)
	child := printedPid(t, p, out)
	if err := os.WriteFile(filepath.Join(s.WorkDir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := wait(t, p) // would hang on the open pipe if the sleep lived on
	if res.ExitCode != 0 {
		t.Errorf("result = %+v", res)
	}
	eventually(t, "the background child to die", func() bool { return gone(child) })
}

func TestPauseResume(t *testing.T) {
	rt := newRuntime(t)
	out := newLines()
	p := start(t, rt, spec(t, out, "sh", "-c", "echo $$; i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done"))
	main := printedPid(t, p, out)
	eventually(t, "output", func() bool { return out.count() >= 3 })
	if err := p.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	eventually(t, "the job to stop", func() bool { return paused(main) })
	time.Sleep(300 * time.Millisecond) // let output already in the pipe arrive
	paused := out.count()
	time.Sleep(time.Second)
	if got := out.count(); got != paused {
		t.Errorf("paused job printed %d more lines", got-paused)
	}
	if err := p.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	eventually(t, "output after Resume", func() bool { return out.count() >= paused+3 })
	if err := p.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := p.Pause(); !errors.Is(err, runtime.ErrExited) {
		t.Errorf("Pause after exit = %v, want ErrExited", err)
	}
}

func TestStopPausedJob(t *testing.T) {
	rt := newRuntime(t)
	out := newLines()
	p := start(t, rt, spec(t, out, "sh", "-c", "echo ready; sleep 100"))
	out.next(t)
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if res := p.Result(); res.Signal == "" {
		t.Errorf("result = %+v, want a signal", res)
	}
}

func TestResultUsage(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	res := runJob(t, rt, spec(t, &out, "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"))
	if res.ExitCode != 0 {
		t.Fatalf("result = %+v", res)
	}
	if res.CPUTime <= 0 || res.MaxRSS <= 0 {
		t.Errorf("CPUTime %v, MaxRSS %d: want both > 0", res.CPUTime, res.MaxRSS)
	}
}

func TestKillGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 100 & sleep 100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := runtime.KillGroup(cmd.Process.Pid); err != nil {
		t.Fatalf("KillGroup: %v", err)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("group still running after KillGroup")
	}
	if err := runtime.KillGroup(cmd.Process.Pid); err != nil {
		t.Errorf("KillGroup on a gone group = %v, want nil", err)
	}
	for _, bad := range []int{0, 1, -5, syscall.Getpgrp()} {
		if err := runtime.KillGroup(bad); err == nil {
			t.Errorf("KillGroup(%d) = nil, want an error", bad)
		}
	}
}

// TestJobDiesWithItsNode starts a stand-in node (this binary in helper
// mode) that starts a job, kills the node with SIGKILL, and checks the
// job dies too (Pdeathsig).
func TestJobDiesWithItsNode(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work, ck := jobDirs(t, t.TempDir())
	node := exec.Command(self, work, ck)
	node.Env = append(os.Environ(), helperEnv+"=node")
	out := newLines()
	node.Stdout, node.Stderr = out, out
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer node.Process.Kill()
	line := out.next(t)
	pidStr, ok := strings.CutPrefix(line, "pid ")
	if !ok {
		t.Fatalf("node said %q", line)
	}
	pid, _ := strconv.Atoi(pidStr)
	if gone(pid) {
		t.Fatalf("job %d not running", pid)
	}
	if err := node.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = node.Wait()
	eventually(t, "the job to die with its node", func() bool { return gone(pid) })
}

func TestStartContextBoundsOnlyTheStart(t *testing.T) {
	rt := newRuntime(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := newLines()
	p, err := rt.Start(ctx, spec(t, out, "sh", "-c", "echo up; sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(0) })
	cancel()
	out.next(t)
	select {
	case <-p.Done():
		t.Fatal("cancelling Start's context ended the job")
	case <-time.After(200 * time.Millisecond):
	}

	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := rt.Start(done, spec(t, io.Discard, "true")); err == nil {
		t.Error("Start with a cancelled context succeeded")
	}
}

func TestRunAsNeedsKnownUser(t *testing.T) {
	rt := newRuntime(t)
	s := spec(t, io.Discard, "true")
	s.RunAs = "no-such-user-gpumesh"
	if _, err := rt.Start(context.Background(), s); err == nil {
		t.Fatal("Start succeeded with an unknown RunAs user")
	}
}

// TestSandboxWithoutRoot runs a stand-in node as nobody: jobs then get a
// user namespace, and Hide must still hold against files the node's own
// user may read.
func TestSandboxWithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root to start the stand-in node as another user")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("/var/tmp", "gpumesh-runtime-test-")
	if err != nil {
		t.Skipf("no /var/tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	bin := filepath.Join(base, "node")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	d := makeDataDir(t, base)
	for _, p := range []string{base, d.data} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.WalkDir(d.data, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	}); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
for f in %[1]q %[2]q; do if cat "$f"; then echo "READ-OK $f"; else echo "READ-FAIL $f"; fi; done
if ls %[3]q; then echo LS-OK; else echo LS-FAIL; fi
if echo x > %[4]q; then echo ESCAPE-OK; else echo ESCAPE-FAIL; fi
if echo w > "$HOME/w" && echo c > "$CHECKPOINT_DIR/c"; then echo WRITE-OK; fi
if echo x > /dev/null; then echo NULL-OK; fi
`, d.key, d.storeFile, d.store, filepath.Join(d.data, "escape"))
	node := func(hide ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{d.work, d.ck, script}, hide...)...)
		cmd.Env = []string{helperEnv + "=run", "PATH=" + runtime.DefaultPath}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		var stderr syncBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		t.Logf("node log:\n%s", stderr.String())
		if err != nil {
			t.Fatalf("stand-in node: %v\n%s", err, out)
		}
		return string(out)
	}

	control := node()
	if !strings.Contains(control, d.secrets[0]) || !strings.Contains(control, "MANIFEST-unlisted") {
		t.Fatalf("control job (no Hide) could not read the node user's files; the test proves nothing:\n%s", control)
	}
	os.Remove(filepath.Join(d.data, "escape"))

	got := node(d.key, d.store)
	t.Logf("job output:\n%s", got)
	for _, sec := range d.secrets[:3] {
		if strings.Contains(got, sec) {
			t.Errorf("a secret reached the job")
		}
	}
	for _, want := range []string{"READ-FAIL " + d.key + "\n", "READ-FAIL " + d.storeFile + "\n", "LS-FAIL", "ESCAPE-FAIL", "WRITE-OK", "NULL-OK", "EXIT 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(got, "unlisted") {
		t.Errorf("job could list the hidden store")
	}
}

// TestCgroupV2 runs jobs in a real cgroup2 hierarchy when the machine has
// one we may write (the hybrid layout's /sys/fs/cgroup/unified counts: it
// has no memory or pids controller, but placement, kill and freeze work).
func TestCgroupV2(t *testing.T) {
	root := cgroupV2Root(t)
	rt, err := runtime.New("process", runtime.Options{Log: testLogger(t), CgroupRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	out := newLines()
	s := spec(t, out, "sh", "-c", "grep '^0::' /proc/self/cgroup; setsid sleep 100 & echo $!; echo $$; i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done")
	id := make([]byte, 8)
	rand.Read(id)
	s.JobID = hex.EncodeToString(id) // unique: another test binary may run this test too
	s.Limits = runtime.Limits{MemoryBytes: 1 << 30, Procs: 100}
	p := start(t, rt, s)
	cgPath := "/" + filepath.Join("gpumesh", fmt.Sprintf("job-%s-%d", s.JobID, s.Attempt))
	if got := out.next(t); got != "0::"+cgPath {
		t.Errorf("job's cgroup = %q, want 0::%s", got, cgPath)
	}
	escapee := printedPid(t, p, out)
	printedPid(t, p, out)
	dir := filepath.Join(root, cgPath)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("cgroup dir: %v", err)
	}
	if err := p.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	eventually(t, "the cgroup to freeze", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		return strings.Contains(string(b), "frozen 1")
	})
	if err := p.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	n := out.count()
	eventually(t, "output after Resume", func() bool { return out.count() > n+2 })
	if err := p.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	eventually(t, "the setsid escapee to die", func() bool { return gone(escapee) })
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s still there after Done: %v", dir, err)
	}
	if res := p.Result(); res.CPUTime <= 0 {
		t.Errorf("CPUTime = %v, want > 0", res.CPUTime)
	}
}

func TestStartRefusesInAShim(t *testing.T) {
	rt := newRuntime(t)
	t.Setenv("GPUMESH_JOB_SHIM", "1") // as in a shim whose main forgot MaybeShim
	_, err := rt.Start(context.Background(), spec(t, io.Discard, "true"))
	if err == nil || !strings.Contains(err.Error(), "MaybeShim") {
		t.Errorf("Start = %v, want an error naming MaybeShim", err)
	}
}

// TestJobSeesOnlyItsOwnProcesses: a job lists /proc and runs ps; it must
// find only its own processes (its init, pid 1, included), never the
// node's or anyone else's.
func TestJobSeesOnlyItsOwnProcesses(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	script := `sleep 100 & echo "PROC $(ls /proc | grep -c '^[0-9][0-9]*$')"; echo "INIT $(tr '\0' ' ' < /proc/1/cmdline)"
if command -v ps >/dev/null; then echo "PS $(ps -e -o pid= | wc -l)"; else echo "PS 3"; fi`
	res := runJob(t, rt, spec(t, &out, "sh", "-c", script))
	if res.ExitCode != 0 {
		t.Fatalf("result %+v: %s", res, out.String())
	}
	t.Logf("job output:\n%s", out.String())
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	// init, sh, sleep, and the pipeline or ps of the moment: a handful.
	for _, k := range []string{"PROC", "PS"} {
		n, err := strconv.Atoi(got[k])
		if err != nil || n < 3 || n > 8 {
			t.Errorf("%s: the job saw %q processes, want only its own (3 to 8)", k, got[k])
		}
	}
	if !strings.HasPrefix(got["INIT"], "gpumesh-job-shim") {
		t.Errorf("pid 1 of the job is %q, want its own init (the shim)", got["INIT"])
	}
}

// TestEscapeesDieWithTheJob: a child that called setsid and a
// double-forked daemon are dead as soon as Stop returns, and as soon as
// the job's main process has exited, with or without cgroup v2.
func TestEscapeesDieWithTheJob(t *testing.T) {
	rt := newRuntime(t)
	const script = `setsid sleep 100 & echo $!
sh -c 'sleep 100 & echo $!'
echo ready
while [ ! -e go ]; do sleep 0.05; done`
	for _, how := range []string{"stop", "exit"} {
		t.Run(how, func(t *testing.T) {
			out := newLines()
			s := spec(t, out, "sh", "-c", script)
			p := start(t, rt, s)
			escapees := []int{printedPid(t, p, out), printedPid(t, p, out)}
			if line := out.next(t); line != "ready" {
				t.Fatalf("job said %q", line)
			}
			for _, pid := range escapees {
				if gone(pid) {
					t.Fatalf("escapee %d not running before the end of the job", pid)
				}
			}
			if how == "stop" {
				if err := p.Stop(5 * time.Second); err != nil {
					t.Errorf("Stop: %v", err)
				}
			} else {
				if err := os.WriteFile(filepath.Join(s.WorkDir, "go"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if res := wait(t, p); res.ExitCode != 0 {
					t.Errorf("result = %+v, want exit 0", res)
				}
			}
			for _, pid := range escapees {
				if !gone(pid) {
					t.Errorf("%s: process %d the job started still runs after the job ended", how, pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// TestSameAttemptTwoLeasesOneMachine: the members of a cluster share job
// ID and attempt, and in a testnet their suppliers share one machine.
// Two nodes (a runtime each) starting the same attempt on two leases at
// once each get cgroups of their own: with one name for both, one node
// removed the other's new, still empty cgroup and its start failed
// ("devices cgroup: ... no such file or directory").
func TestSameAttemptTwoLeasesOneMachine(t *testing.T) {
	root := cgroupV2Root(t)
	id := make([]byte, 8)
	rand.Read(id)
	const members = 2
	outs := make([]*lines, members)
	for round := range 5 { // the collision was a race: try it a few times
		var wg sync.WaitGroup
		procs := make([]runtime.Process, members)
		errs := make([]error, members)
		for m := range members {
			rt, err := runtime.New("process", runtime.Options{Log: testLogger(t), CgroupRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			outs[m] = newLines()
			s := spec(t, outs[m], "sh", "-c", "grep '^0::' /proc/self/cgroup; sleep 100")
			s.JobID, s.Attempt = hex.EncodeToString(id), round+1
			lease := make([]byte, 32)
			rand.Read(lease)
			s.Lease = hex.EncodeToString(lease)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				procs[m], errs[m] = rt.Start(ctx, s)
			})
		}
		wg.Wait()
		for m := range members {
			if errs[m] != nil {
				t.Fatalf("round %d: member %d: Start: %v", round, m, errs[m])
			}
			t.Cleanup(func() { _ = procs[m].Stop(0) })
		}
		a, b := outs[0].next(t), outs[1].next(t)
		if a == b || !strings.HasPrefix(a, "0::/gpumesh/job-") || !strings.HasPrefix(b, "0::/gpumesh/job-") {
			t.Fatalf("round %d: the two leases' jobs are in cgroups %q and %q, want two of their own", round, a, b)
		}
		for _, p := range procs {
			_ = p.Stop(0)
		}
	}
}

// cgroupV2Root is the writable cgroup2 hierarchy the cgroup tests use:
// /sys/fs/cgroup (unified) or /sys/fs/cgroup/unified (hybrid).
func cgroupV2Root(t *testing.T) string {
	t.Helper()
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st syscall.Statfs_t
		if syscall.Statfs(r, &st) == nil && st.Type == 0x63677270 && syscall.Access(r, 2) == nil {
			return r
		}
	}
	testenv.Skip(t, testenv.Cgroup, "no writable cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	return ""
}
