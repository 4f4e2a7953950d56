//go:build linux

package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
)

// writableCgroup2 returns a cgroup2 hierarchy this test may write, or
// skips.
func writableCgroup2(t *testing.T) *cgroupRoot {
	t.Helper()
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if c, _ := detectCgroup(r); c != nil {
			return c
		}
	}
	testenv.Skip(t, testenv.Cgroup, "no writable cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	return nil
}

func TestDetectCgroupRejectsPlainDirs(t *testing.T) {
	dir := t.TempDir()
	if c, why := detectCgroup(dir); c != nil || why == "" {
		t.Errorf("empty dir: detected %v (%q)", c, why)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, why := detectCgroup(dir); c != nil || why == "" {
		t.Errorf("dir with a cgroup.controllers file: detected %v (%q)", c, why)
	}
}

func TestCgroupNameInUse(t *testing.T) {
	root := writableCgroup2(t)
	log := slog.New(slog.DiscardHandler)
	b := make([]byte, 6)
	rand.Read(b)
	name := "job-" + hex.EncodeToString(b) + "-0"

	first, err := root.create(name, Limits{}, log)
	if err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "100")
	sleep.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(first.dir.Fd())}
	if err := sleep.Start(); err != nil {
		first.remove()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sleep.Wait(); close(exited) }()

	// A second job of the same name (another node on this machine) gets
	// another cgroup and leaves the first alone.
	second, err := root.create(name, Limits{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if second.path == first.path {
		t.Errorf("second cgroup reuses %s, which holds a running job", first.path)
	}
	if err := second.remove(); err != nil {
		t.Errorf("remove second: %v", err)
	}
	select {
	case <-exited:
		t.Fatal("removing the second cgroup killed the first's process")
	case <-time.After(100 * time.Millisecond):
	}

	if err := first.remove(); err != nil {
		t.Errorf("remove first: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("process survived the removal of its cgroup")
	}
	if _, err := os.Stat(first.path); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", first.path, err)
	}

	// A stale, empty cgroup of the same name is taken over.
	stale := filepath.Join(root.root, cgroupParent, name)
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	third, err := root.create(name, Limits{}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer third.remove()
	if third.path != stale {
		t.Errorf("stale cgroup not reused: got %s, want %s", third.path, stale)
	}
}

// TestCgroupCreateSteps runs create's steps on plain directories, where
// files written stay as written: what a cgroup2 hierarchy would be told.
func TestCgroupCreateSteps(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}

	// Only the controllers a limit needs, and only those the root has.
	root := t.TempDir()
	parent := filepath.Join(root, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cgroupRoot{root: root, controllers: map[string]bool{"memory": true}}
	want := c.enableControllers(parent, Limits{MemoryBytes: 1 << 20, Procs: 5}, log)
	if !want["memory"] || want["pids"] {
		t.Errorf("enabled %v, want memory only (pids is not available)", want)
	}
	for _, d := range []string{root, parent} {
		if got := read(filepath.Join(d, "cgroup.subtree_control")); got != "+memory" {
			t.Errorf("%s subtree_control = %q, want +memory", d, got)
		}
	}
	if want := c.enableControllers(t.TempDir(), Limits{}, log); want["memory"] || want["pids"] {
		t.Errorf("no limits: enabled %v", want)
	}

	// A name left over empty is taken again; one in use gets a suffix.
	path, err := makeCgroupDir(parent, "job-ab-0", log)
	if err != nil || path != filepath.Join(parent, "job-ab-0") {
		t.Fatalf("makeCgroupDir = %q, %v", path, err)
	}
	if again, err := makeCgroupDir(parent, "job-ab-0", log); err != nil || again != path {
		t.Errorf("left-over empty dir: makeCgroupDir = %q, %v; want %q", again, err, path)
	}
	if err := os.WriteFile(filepath.Join(path, "cgroup.procs"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := makeCgroupDir(parent, "job-ab-0", log)
	if err != nil || filepath.Dir(other) != parent || !strings.HasPrefix(filepath.Base(other), "job-ab-0-") {
		t.Errorf("name in use: makeCgroupDir = %q, %v; want %s/job-ab-0-<random>", other, err, parent)
	}

	// The limits the controllers allow, pids.max with the init's tasks.
	for _, f := range []string{"memory.max", "pids.max"} {
		if err := os.WriteFile(filepath.Join(path, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	cg := &jobCgroup{path: path, dir: dir}
	cg.writeLimits(Limits{MemoryBytes: 1 << 20, Procs: 5}, map[string]bool{"memory": true, "pids": true}, log)
	if got := read(filepath.Join(path, "memory.max")); got != "1048576" || !cg.memory {
		t.Errorf("memory.max = %q, memory %v; want 1048576, true", got, cg.memory)
	}
	if got := read(filepath.Join(path, "pids.max")); got != "21" {
		t.Errorf("pids.max = %q, want 21 (5 + %d)", got, initTasks)
	}
	cg2 := &jobCgroup{path: path, dir: dir}
	cg2.writeLimits(Limits{MemoryBytes: 1 << 20}, map[string]bool{"memory": false}, log)
	if cg2.memory {
		t.Error("memory set though the controller is not enabled")
	}
}
