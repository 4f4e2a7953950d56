package job

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
)

func TestResolveLimits(t *testing.T) {
	sup := Limits{
		Default: LimitSet{MemoryBytes: 1 << 30, Procs: 100, DiskBytes: 1 << 20, OpenFiles: 50},
		Max:     LimitSet{MemoryBytes: 4 << 30, Procs: 1000, DiskBytes: 8 << 20, OpenFiles: 500},
	}
	for _, tc := range []struct {
		name     string
		spec     *pb.Limits
		want     runtime.Limits
		wantDisk int64
		err      string
	}{
		{"no limits: the defaults", nil, runtime.Limits{MemoryBytes: 1 << 30, Procs: 100, FileBytes: 1 << 20, OpenFiles: 50}, 1 << 20, ""},
		{"asked within the maxima", &pb.Limits{MemoryBytes: 2 << 30, CpuSeconds: 9, Procs: 1000, FileBytes: 1000, DiskBytes: 4 << 20},
			runtime.Limits{MemoryBytes: 2 << 30, CPUSeconds: 9, Procs: 1000, FileBytes: 1000, OpenFiles: 50}, 4 << 20, ""},
		{"file size at most the disk", &pb.Limits{FileBytes: 1 << 30}, runtime.Limits{MemoryBytes: 1 << 30, Procs: 100, FileBytes: 1 << 20, OpenFiles: 50}, 1 << 20, ""},
		{"memory above the maximum", &pb.Limits{MemoryBytes: 5 << 30}, runtime.Limits{}, 0, "memory_bytes 5368709120 is above this supplier's maximum (4294967296)"},
		{"disk above the maximum", &pb.Limits{DiskBytes: 9 << 20}, runtime.Limits{}, 0, "disk_bytes"},
		{"negative", &pb.Limits{Procs: -1}, runtime.Limits{}, 0, "negative procs"},
	} {
		got, disk, err := sup.resolve(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || disk != tc.wantDisk {
			t.Errorf("%s: got %+v disk %d err %v, want %+v disk %d", tc.name, got, disk, err, tc.want, tc.wantDisk)
		}
	}
	if err := (Limits{Default: LimitSet{Procs: 10}, Max: LimitSet{Procs: 5}}).Validate(); err == nil {
		t.Error("a default above its maximum validated")
	}
}

// TestDiskUsage: the measure counts blocks, each inode once, never follows
// a symlink, and refuses what it cannot read or what nests too deep.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i) | 1 // not a hole
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a", "b", "f"), filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	// A symlink to a big tree outside must count as the link, not the tree.
	if err := os.Symlink("/usr", filepath.Join(dir, "a", "usr")); err != nil {
		t.Fatal(err)
	}
	n, err := diskUsage([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if n < 1<<20 || n > 1<<20+64<<10 {
		t.Errorf("usage = %d, want about 1 MiB (one file, linked twice, and a few dirs)", n)
	}
	if _, err := diskUsage([]string{filepath.Join(dir, "a", "usr")}); err == nil {
		t.Error("a symlinked top dir was followed")
	}

	deep := t.TempDir()
	p := deep
	for range maxDiskDepth + 2 {
		p = filepath.Join(p, "d")
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := diskUsage([]string{deep}); !errors.Is(err, errTooDeep) {
		t.Errorf("a tree %d deep: err = %v, want errTooDeep", maxDiskDepth+2, err)
	}
}
