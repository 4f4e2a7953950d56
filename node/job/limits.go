package job

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
)

// LimitSet is one set of per-job limits. In a supplier's Limits a 0 field
// means "none of that kind".
type LimitSet struct {
	MemoryBytes int64
	Procs       int64
	DiskBytes   int64 // the working and checkpoint dirs together
	OpenFiles   int64
}

// Limits are a supplier's per-job limits: Default fills what a spec leaves
// at 0, Max bounds what a spec may ask.
type Limits struct {
	Default, Max LimitSet
}

// Validate checks that every default is within its maximum.
func (l Limits) Validate() error {
	for _, f := range limitFields(&pb.Limits{}) {
		d, m := f.supplier(l.Default), f.supplier(l.Max)
		if d < 0 || m < 0 {
			return fmt.Errorf("job limits: negative %s", f.name)
		}
		if m > 0 && d > m {
			return fmt.Errorf("job limits: default %s %d is above the maximum %d", f.name, d, m)
		}
	}
	return nil
}

// limitField ties a spec's limit to the supplier's.
type limitField struct {
	name     string
	spec     *int64
	supplier func(LimitSet) int64
}

func limitFields(l *pb.Limits) []limitField {
	return []limitField{
		{"memory_bytes", &l.MemoryBytes, func(s LimitSet) int64 { return s.MemoryBytes }},
		{"procs", &l.Procs, func(s LimitSet) int64 { return s.Procs }},
		{"disk_bytes", &l.DiskBytes, func(s LimitSet) int64 { return s.DiskBytes }},
		{"open_files", &l.OpenFiles, func(s LimitSet) int64 { return s.OpenFiles }},
	}
}

// ErrOverLimit is returned, wrapped, when a spec asks more than the
// supplier allows.
var ErrOverLimit = errors.New("above this supplier's maximum")

// resolve applies the supplier's limits to a spec's: a 0 takes the
// default, anything above the maximum is refused. It returns the limits
// the job runs under and its disk limit. RLIMIT_FSIZE (FileBytes) is at
// most the disk limit: no single file may outgrow the dirs it lives in.
func (l Limits) resolve(spec *pb.Limits) (runtime.Limits, int64, error) {
	var s pb.Limits
	if spec != nil {
		s.MemoryBytes, s.CpuSeconds, s.Procs, s.FileBytes, s.OpenFiles, s.DiskBytes =
			spec.MemoryBytes, spec.CpuSeconds, spec.Procs, spec.FileBytes, spec.OpenFiles, spec.DiskBytes
	}
	for _, f := range limitFields(&s) {
		if *f.spec < 0 {
			return runtime.Limits{}, 0, fmt.Errorf("job limits: negative %s", f.name)
		}
		m := f.supplier(l.Max)
		if *f.spec == 0 {
			*f.spec = f.supplier(l.Default)
		}
		if *f.spec == 0 {
			// No default ("none"), but a maximum: the maximum, never
			// more than the supplier allows.
			*f.spec = m
		}
		if m > 0 && *f.spec > m {
			return runtime.Limits{}, 0, fmt.Errorf("job limits: %s %d is %w (%d)", f.name, *f.spec, ErrOverLimit, m)
		}
	}
	if s.DiskBytes > 0 && (s.FileBytes == 0 || s.FileBytes > s.DiskBytes) {
		s.FileBytes = s.DiskBytes
	}
	rl := runtime.Limits{MemoryBytes: s.MemoryBytes, CPUSeconds: s.CpuSeconds, Procs: s.Procs, FileBytes: s.FileBytes, OpenFiles: s.OpenFiles}
	return rl, s.DiskBytes, nil
}

// Disk usage is measured by walking the job's dirs every diskInterval; a
// tree deeper than maxDiskDepth counts as over the limit (the walk holds
// one descriptor per level).
const (
	diskInterval = 2 * time.Second
	maxDiskDepth = 512
)

// Errors of diskUsage that stop the job: what cannot be measured counts
// as over the limit.
var (
	errTooDeep      = errors.New("directories nested too deep to measure")
	errUnmeasurable = errors.New("a directory the node cannot read")
)

// watchDisk stops the attempt once its dirs use more than limit bytes,
// checking every diskInterval until the process ends.
func (r *run) watchDisk(limit int64, dirs []string) {
	t := time.NewTicker(diskInterval)
	defer t.Stop()
	for {
		select {
		case <-r.proc.Done():
			return
		case <-t.C:
		}
		used, err := diskUsage(dirs)
		why := ""
		switch {
		case errors.Is(err, errTooDeep) || errors.Is(err, errUnmeasurable):
			why = fmt.Sprintf("disk limit exceeded: %v", err)
		case err != nil:
			r.logger.Warn("measure job disk usage", "err", err)
		case used > limit:
			why = fmt.Sprintf("disk limit exceeded: the job's dirs use %d bytes, the limit is %d", used, limit)
		}
		if why != "" {
			r.stop(StateFailed, why)
			// No grace: every moment it runs on, it may write more.
			_ = r.proc.Stop(0)
			return
		}
	}
}

// diskUsage is the space the trees at dirs take on disk (st_blocks, each
// inode once). It never follows a symlink: every directory is opened
// relative to its parent with O_NOFOLLOW, so a job that swaps a directory
// for a symlink mid-walk cannot make the node walk anything else. Entries
// that vanish meanwhile are skipped.
func diskUsage(dirs []string) (int64, error) {
	seen := map[[2]uint64]bool{}
	var total int64
	for _, d := range dirs {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("open %s: %w", d, err)
		}
		n, err := dirUsage(fd, d, 0, seen)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// dirUsage measures the directory open on fd (and closes it).
func dirUsage(fd int, name string, depth int, seen map[[2]uint64]bool) (int64, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if depth > maxDiskDepth {
		return 0, fmt.Errorf("%s: %w (more than %d levels)", name, errTooDeep, maxDiskDepth)
	}
	var total int64
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil {
		total += blocks(&st, seen)
	}
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			if e.IsDir() {
				sub, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
					// A job may not hide what it stores from the count.
					return 0, fmt.Errorf("%s: %w: %v", filepath.Join(name, e.Name()), errUnmeasurable, err)
				}
				if err != nil {
					continue // gone, or no longer a directory: it is counted next time
				}
				n, err := dirUsage(sub, filepath.Join(name, e.Name()), depth+1, seen)
				if err != nil {
					return 0, err
				}
				total += n
				continue
			}
			if unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				total += blocks(&st, seen)
			}
		}
		if err != nil || len(ents) == 0 {
			return total, nil
		}
	}
}

// blocks is the space st takes, at least one 4 KiB block (so that the
// byte limit also bounds how many inodes a job can make); 0 for a hard
// link to an inode already counted. Only inodes with several links are
// remembered, so the map does not grow with the number of files.
func blocks(st *unix.Stat_t, seen map[[2]uint64]bool) int64 {
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		k := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if seen[k] {
			return 0
		}
		seen[k] = true
	}
	return max(int64(st.Blocks)*512, 4096)
}
