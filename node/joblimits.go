package node

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/p2p/pb"
)

// Sizes take a binary (KiB, MiB, GiB, TiB) or decimal (kB, MB, GB, TB)
// unit, or none for bytes.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// parseSize parses a positive size such as 8GiB, 512MiB or 1000000.
func parseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (e.g. 512MiB, 8GiB, 50GB or a number of bytes)", s)
	}
	return n * mult, nil
}

// formatSize writes n in the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// sizeKey sets a size key; "auto" (when allowed) stores 0.
func sizeKey(field func(*Config) *int64, auto bool) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		if auto && v[0] == "auto" {
			*field(c) = 0
			return nil
		}
		n, err := parseSize(v[0])
		if err != nil {
			if auto {
				return fmt.Errorf("%w, or auto", err)
			}
			return err
		}
		*field(c) = n
		return nil
	}
}

// countKey sets a positive count key.
func countKey(field func(*Config) *int64) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || n < 1 || n > 1<<30 {
			return fmt.Errorf("%q is not a count between 1 and %d", v[0], 1<<30)
		}
		*field(c) = n
		return nil
	}
}

// jobLimitKeys are the supplier's per-job limit keys.
func jobLimitKeys() []Key {
	auto := func(n int64) string {
		if n == 0 {
			return "auto"
		}
		return formatSize(n)
	}
	return []Key{
		{Name: "job_memory", Arg: "size", IntOK: true, Default: []string{"auto"}, DefaultDoc: "`auto` (`job_memory_max` ÷ the node's GPUs)",
			Help: "memory of a job whose spec sets none: a size (`8GiB`, `512MiB`, `50GB`) or `auto`",
			set:  sizeKey(func(c *Config) *int64 { return &c.JobMemory }, true),
			show: func(c Config) any { return auto(c.JobMemory) }},
		{Name: "job_memory_max", Arg: "size", IntOK: true, Default: []string{"auto"}, DefaultDoc: "`auto` (¾ of the host's RAM)",
			Help: "the most memory a job may ask",
			set:  sizeKey(func(c *Config) *int64 { return &c.JobMemoryMax }, true),
			show: func(c Config) any { return auto(c.JobMemoryMax) }},
		{Name: "job_procs", Arg: "int", Kind: KindInt, Default: []string{"4096"},
			Help: "processes (and threads) of a job whose spec sets none",
			set:  countKey(func(c *Config) *int64 { return &c.JobProcs }),
			show: func(c Config) any { return c.JobProcs }},
		{Name: "job_procs_max", Arg: "int", Kind: KindInt, Default: []string{"16384"},
			Help: "the most processes a job may ask",
			set:  countKey(func(c *Config) *int64 { return &c.JobProcsMax }),
			show: func(c Config) any { return c.JobProcsMax }},
		{Name: "job_disk", Arg: "size", IntOK: true, Default: []string{"20GiB"},
			Help: "disk of a job's working and checkpoint dirs when its spec sets none",
			set:  sizeKey(func(c *Config) *int64 { return &c.JobDisk }, false),
			show: func(c Config) any { return formatSize(c.JobDisk) }},
		{Name: "job_disk_max", Arg: "size", IntOK: true, Default: []string{"50GiB"},
			Help: "the most disk a job may ask",
			set:  sizeKey(func(c *Config) *int64 { return &c.JobDiskMax }, false),
			show: func(c Config) any { return formatSize(c.JobDiskMax) }},
		{Name: "job_open_files", Arg: "int", Kind: KindInt, Default: []string{"4096"},
			Help: "open files per process of a job whose spec sets none",
			set:  countKey(func(c *Config) *int64 { return &c.JobOpenFiles }),
			show: func(c Config) any { return c.JobOpenFiles }},
		{Name: "job_open_files_max", Arg: "int", Kind: KindInt, Default: []string{"65536"},
			Help: "the most open files a job may ask",
			set:  countKey(func(c *Config) *int64 { return &c.JobOpenFilesMax }),
			show: func(c Config) any { return c.JobOpenFilesMax }},
	}
}

// JobLimits resolves the supplier's per-job limits on a host with
// hostMemory bytes of RAM (0: unknown) offering gpus GPUs. job_memory_max
// auto is 3/4 of the host's RAM (none when that is unknown); job_memory
// auto is job_memory_max shared between the GPUs, so that a job on each
// GPU fits at once.
func (c Config) JobLimits(hostMemory int64, gpus int) (job.Limits, error) {
	maxMem := c.JobMemoryMax
	if maxMem == 0 {
		maxMem = hostMemory / 4 * 3
	}
	defMem := c.JobMemory
	if defMem == 0 {
		defMem = maxMem / int64(max(gpus, 1))
	}
	l := job.Limits{
		Default: job.LimitSet{MemoryBytes: defMem, Procs: c.JobProcs, DiskBytes: c.JobDisk, OpenFiles: c.JobOpenFiles},
		Max:     job.LimitSet{MemoryBytes: maxMem, Procs: c.JobProcsMax, DiskBytes: c.JobDiskMax, OpenFiles: c.JobOpenFilesMax},
	}
	if err := l.Validate(); err != nil {
		return l, fmt.Errorf("config: %w (set job_memory, job_procs, job_disk and job_open_files at most their _max keys)", err)
	}
	return l, nil
}

// hostMemory is MemTotal from /proc/meminfo in bytes, 0 when unknown.
func hostMemory(readFile func(string) ([]byte, error)) int64 {
	b, err := readFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n << 10
				}
			}
		}
	}
	return 0
}

// profileLimits is the wire form of a supplier's job limits.
func profileLimits(l job.Limits) (def, maximum *pb.JobLimits) {
	conv := func(s job.LimitSet) *pb.JobLimits {
		return &pb.JobLimits{MemoryBytes: uint64(s.MemoryBytes), Procs: uint64(s.Procs), DiskBytes: uint64(s.DiskBytes), OpenFiles: uint64(s.OpenFiles)}
	}
	return conv(l.Default), conv(l.Max)
}
