//go:build linux

package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
	t.Skip("no writable cgroup2 hierarchy")
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
