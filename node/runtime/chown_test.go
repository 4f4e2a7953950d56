//go:build linux

package runtime

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/internal/testenv"
)

// owner is the uid that owns p (the link itself for a symlink).
func owner(t *testing.T, p string) int {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// chownFixture is a work dir with a folder, a file, and symlinks to a
// folder and a file outside it; outside/f shares a name with a/f.
func chownFixture(t *testing.T) (work, outside string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "chown needs root")
	}
	work, outside = t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(work, "a", "f"), filepath.Join(outside, "f"), filepath.Join(outside, "g")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(work, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "g"), filepath.Join(work, "flink")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(work, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return work, outside
}

// TestChownTreeNeverFollowsSymlinks: RunAs hands the work dir to the
// job's user; symlinks in it are changed themselves, and what they point
// at keeps its owner.
func TestChownTreeNeverFollowsSymlinks(t *testing.T) {
	work, outside := chownFixture(t)
	u := jobUser{uid: 54321, gid: 54321}
	if err := chownTree(work, u); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "a", "a/f", "link", "flink", "fifo"} {
		if got := owner(t, filepath.Join(work, p)); got != u.uid {
			t.Errorf("%s owned by %d, want %d", p, got, u.uid)
		}
	}
	for _, p := range []string{"", "f", "g"} {
		if got := owner(t, filepath.Join(outside, p)); got != 0 {
			t.Errorf("outside/%s handed to %d through a symlink", p, got)
		}
	}
	link := filepath.Join(t.TempDir(), "work")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if err := chownTree(link, u); err == nil || owner(t, outside) != 0 {
		t.Fatal("chownTree accepted a work dir that is a symlink")
	}
}

// TestChownTreeSwapRace: a process of the job's user swaps a folder of
// the work dir with a symlink to a folder outside it (renameat2
// RENAME_EXCHANGE in a loop) while a root node hands the tree over. A
// path-based walk lists the outside folder through the symlink and chowns
// its files; nothing outside may ever change owner.
func TestChownTreeSwapRace(t *testing.T) {
	work, outside := chownFixture(t)
	stop := make(chan struct{})
	swapped := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		a, b := filepath.Join(work, "a"), filepath.Join(work, "link")
		for i := 0; ; i++ {
			select {
			case <-stop:
				swapped <- nil
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				swapped <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	n := 0
	for ; n < 300 && time.Now().Before(deadline); n++ {
		u := jobUser{uid: 50000 + n, gid: 50000 + n}
		if err := chownTree(work, u); err != nil {
			t.Errorf("chown %d: %v", n, err)
		}
		for _, p := range []string{"", "f", "g"} {
			if got := owner(t, filepath.Join(outside, p)); got != 0 {
				close(stop)
				t.Fatalf("walk %d handed outside/%s to %d", n, p, got)
			}
		}
	}
	close(stop)
	if err := <-swapped; err != nil {
		t.Fatalf("swapper: %v", err)
	}
	t.Logf("%d walks under the swap, nothing outside changed owner", n)
}
