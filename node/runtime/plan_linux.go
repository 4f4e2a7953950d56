package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// shimConfig is everything the shim needs, sent as JSON on the config
// pipe. The shim trusts it: the node wrote it.
type shimConfig struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"` // the job's complete environment
	Dir  string   `json:"dir"` // the job's cwd
	// Namespace is set when the shim runs in a new mount namespace and
	// must set it up (Keep, Covers, read-only remount).
	Namespace bool `json:"namespace"`
	// PIDNamespace is set when the shim is the init of a new PID
	// namespace (always with Namespace): it mounts a /proc of that
	// namespace, starts the exec stage and supervises the job.
	PIDNamespace bool `json:"pid_namespace"`
	// NetNamespace is set when the shim runs in a new network namespace
	// (always with Namespace): it brings lo up; the node adds the rest
	// before sending this config.
	NetNamespace bool `json:"net_namespace"`
	// PrivateDev gives the job a /dev of its own (with Namespace): a
	// tmpfs holding DevBinds (host nodes bound in), with DevPTS a new
	// devpts on /dev/pts (and ptmx), /dev/shm and the fd, stdin, stdout
	// and stderr links.
	PrivateDev bool      `json:"private_dev"`
	DevBinds   []devBind `json:"dev_binds,omitempty"`
	DevPTS     bool      `json:"dev_pts"`
	// ResolvConf, when set, is mounted over /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf,omitempty"`
	// UTSNamespace is set when the shim runs in a new UTS namespace
	// (with NetNamespace), where it sets Hostname. Hosts, when set, is
	// mounted over /etc/hosts (with Namespace). A cluster job's.
	UTSNamespace bool     `json:"uts_namespace,omitempty"`
	Hostname     string   `json:"hostname,omitempty"`
	Hosts        string   `json:"hosts,omitempty"`
	Keep         []string `json:"keep"`   // dirs that stay reachable and writable, shallowest first
	Covers       []cover  `json:"covers"` // deepest first
	Rlimits      []rlimit `json:"rlimits"`
	User         *idPair  `json:"user,omitempty"` // RunAs; nil keeps the node's user
	NodePID      int      `json:"node_pid"`       // the shim dies if its parent is not this pid (the init, in a PID namespace)
	// TTY: the job's stdin (fd 0) is a terminal that becomes its
	// controlling terminal, in a session the job leads. In a PID
	// namespace the init starts the exec stage so; without one the node
	// starts the shim so.
	TTY bool `json:"tty,omitempty"`
}

type idPair struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// coverKind says what a cover puts over a path.
type coverKind string

const (
	coverDir     coverKind = "dir"     // empty read-only tmpfs
	coverFile    coverKind = "file"    // empty, mode 000, read-only file
	coverScratch coverKind = "scratch" // empty writable tmpfs (/tmp, /dev/shm)
)

// cover is one path the shim mounts over.
type cover struct {
	Path string    `json:"path"`
	Kind coverKind `json:"kind"`
	Mode uint32    `json:"mode"` // tmpfs root mode bits, e.g. 0o1777 (dir, scratch)
	Size int64     `json:"size"` // tmpfs size in bytes (scratch; 0: the kernel's default)
}

type rlimit struct {
	Name     string `json:"name"`
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// scratchDirs get a private writable tmpfs in every job: the host's are
// shared with everyone, and the rest of the filesystem is read-only.
var scratchDirs = []string{"/tmp", "/dev/shm"}

// defaultOpenFiles is RLIMIT_NOFILE when Limits.OpenFiles is 0.
const defaultOpenFiles = 1024

// planInput is what buildPlan needs besides the Spec.
type planInput struct {
	runAs  *jobUser // nil: the node's own user
	uid    int      // the user file permissions are checked against
	gid    int
	groups []int
	// memoryByCgroup is set when memory.max bounds the job.
	memoryByCgroup bool
	// devDir is where the GPU driver's control nodes are
	// (Options.DeviceDir).
	devDir string
}

// buildPlan turns a validated Spec into the shim's configuration, all but
// the rlimits (see rlimits). notes
// are things worth a log line (skipped hide paths ...).
func buildPlan(s Spec, in planInput) (cfg shimConfig, notes []string, err error) {
	workDir, ckDir, keep, err := keepDirs(s)
	if err != nil {
		return cfg, nil, err
	}
	// seen holds the paths covered so far: each is covered once.
	seen := map[string]bool{}
	covers, notes, err := hideCovers(s.Hide, keep, seen)
	if err != nil {
		return cfg, nil, err
	}
	ac, an, err := unsearchableCovers(keep, in, seen)
	if err != nil {
		return cfg, nil, err
	}
	covers, notes = append(covers, ac...), append(notes, an...)
	covers = append(covers, scratchCovers(seen, s.Limits.MemoryBytes, true)...)
	slices.SortStableFunc(covers, func(a, b cover) int { return depth(b.Path) - depth(a.Path) })

	cfg = shimConfig{
		Argv:       s.Argv,
		Env:        planEnv(s, workDir, ckDir),
		Dir:        workDir,
		Keep:       keep,
		Covers:     covers,
		PrivateDev: true,
		DevBinds:   jobDevBinds(s, in.devDir),
		TTY:        s.TTY != nil,
	}
	if in.runAs != nil {
		cfg.User = &idPair{UID: in.runAs.uid, GID: in.runAs.gid}
	}
	planCluster(&cfg, s.Cluster)
	return cfg, notes, nil
}

// keepDirs resolves the work and checkpoint dirs. keep holds them once
// each, shallowest first: the dirs that stay reachable and writable.
func keepDirs(s Spec) (workDir, ckDir string, keep []string, err error) {
	workDir, err = filepath.EvalSymlinks(s.WorkDir)
	if err != nil {
		return "", "", nil, fmt.Errorf("work dir: %w", err)
	}
	ckDir, err = filepath.EvalSymlinks(s.CheckpointDir)
	if err != nil {
		return "", "", nil, fmt.Errorf("checkpoint dir: %w", err)
	}
	keep = []string{workDir}
	if ckDir != workDir {
		keep = append(keep, ckDir)
	}
	slices.SortStableFunc(keep, func(a, b string) int { return depth(a) - depth(b) })
	return workDir, ckDir, keep, nil
}

// hideCovers covers each existing path of hide, resolved, once: a
// directory with an empty one (searchable where the way to a kept dir
// leads through it), a file with an empty file. Hiding a kept dir itself
// is refused.
func hideCovers(hide, keep []string, seen map[string]bool) (covers []cover, notes []string, err error) {
	for _, h := range hide {
		p, err := filepath.EvalSymlinks(filepath.Clean(h))
		if errors.Is(err, fs.ErrNotExist) {
			notes = append(notes, fmt.Sprintf("hide %s: does not exist, nothing to hide", h))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("hide %s: %w", h, err)
		}
		if seen[p] {
			continue
		}
		for _, k := range keep {
			if p == k {
				return nil, nil, fmt.Errorf("%w: hide %s: that is the job's own work or checkpoint dir", ErrInvalidSpec, h)
			}
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("hide %s: %w", h, err)
		}
		seen[p] = true
		c := cover{Path: p, Kind: coverFile}
		if fi.IsDir() {
			c.Kind, c.Mode = coverDir, 0
			if ancestorOfAny(p, keep) {
				c.Mode = 0o711 // the way down to WorkDir is recreated in it
			}
		}
		covers = append(covers, c)
	}
	return covers, notes, nil
}

// unsearchableCovers covers the shallowest ancestor of each kept dir
// that the job's user cannot search, unless a cover already lies on the
// way: nothing in it was reachable for the job anyway, and the covering
// tmpfs holds a searchable path down to WorkDir and CheckpointDir.
func unsearchableCovers(keep []string, in planInput, seen map[string]bool) (covers []cover, notes []string, err error) {
	for _, k := range keep {
		for _, a := range ancestors(k) {
			if seen[a] {
				break
			}
			ok, err := searchable(a, in.uid, in.gid, in.groups)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				seen[a] = true
				covers = append(covers, cover{Path: a, Kind: coverDir, Mode: 0o711})
				notes = append(notes, fmt.Sprintf("%s is not searchable by uid %d: the job sees an empty directory there with only the way to %s", a, in.uid, k))
				break
			}
		}
	}
	return covers, notes, nil
}

// scratchCovers gives each scratch dir this machine has, and that is not
// covered yet, a private writable tmpfs of size bytes (0: the kernel's
// default). With privateDev /dev/shm is one whatever the host has: the
// shim makes it in the job's /dev.
func scratchCovers(seen map[string]bool, size int64, privateDev bool) []cover {
	var covers []cover
	for _, d := range scratchDirs {
		if seen[d] {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() || privateDev && d == "/dev/shm" {
			seen[d] = true
			covers = append(covers, cover{Path: d, Kind: coverScratch, Mode: 0o1777, Size: size})
		}
	}
	return covers
}

// planEnv is the job's environment: defaults, the renter's Env, then
// what the renter may not change (home, GPUs, checkpoint dir, attempt
// and job ID).
func planEnv(s Spec, workDir, ckDir string) []string {
	gpus := strings.Join(s.GPUs, ",")
	fixed := [][2]string{{"HOME", workDir}, {"CUDA_VISIBLE_DEVICES", gpus}, {"CHECKPOINT_DIR", ckDir},
		{"JOB_ATTEMPT", fmt.Sprint(s.Attempt)}, {"GPUMESH_JOB_ID", s.JobID}}
	return jobEnv(
		[][2]string{{"PATH", DefaultPath}, {"HOME", workDir}, {"LANG", "C.UTF-8"}, {"TMPDIR", filepath.Join(workDir, "tmp")}},
		s.Env, append(fixed, outputEnv(workDir, s)...),
	)
}

// rlimits turns Limits into setrlimit calls for the shim.
func rlimits(s Spec, in planInput, notes []string) ([]rlimit, []string) {
	l := s.Limits
	out := []rlimit{{Name: "core", Resource: unix.RLIMIT_CORE}}
	if l.MemoryBytes > 0 {
		if len(s.GPUs) == 0 {
			out = append(out, rlimit{Name: "as", Resource: unix.RLIMIT_AS, Cur: uint64(l.MemoryBytes), Max: uint64(l.MemoryBytes)})
		} else if !in.memoryByCgroup {
			notes = append(notes, "memory limit not enforced: RLIMIT_AS breaks CUDA and cgroup v2 memory.max is not available")
		}
	}
	if l.CPUSeconds > 0 {
		out = append(out, rlimit{Name: "cpu", Resource: unix.RLIMIT_CPU, Cur: uint64(l.CPUSeconds), Max: uint64(l.CPUSeconds) + 1})
	}
	if l.Procs > 0 {
		if in.runAs != nil && in.runAs.uid != 0 {
			out = append(out, rlimit{Name: "nproc", Resource: unix.RLIMIT_NPROC, Cur: uint64(l.Procs), Max: uint64(l.Procs)})
		} else {
			notes = append(notes, "RLIMIT_NPROC not applied: it counts every process of the node's user; use RunAs or cgroup v2")
		}
	}
	if l.FileBytes > 0 {
		out = append(out, rlimit{Name: "fsize", Resource: unix.RLIMIT_FSIZE, Cur: uint64(l.FileBytes), Max: uint64(l.FileBytes)})
	}
	n := uint64(l.OpenFiles)
	if n == 0 {
		n = defaultOpenFiles
	}
	out = append(out, rlimit{Name: "nofile", Resource: unix.RLIMIT_NOFILE, Cur: n, Max: n})
	return out, notes
}

// depth is the number of elements in a clean absolute path ("/" is 0).
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// under reports whether p is strictly below dir.
func under(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}

func ancestorOfAny(dir string, paths []string) bool {
	for _, p := range paths {
		if under(p, dir) {
			return true
		}
	}
	return false
}

// ancestors returns the directories above p, below "/", shallowest first.
func ancestors(p string) []string {
	var out []string
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

// searchable reports whether uid/gid/groups may search dir by its mode
// bits alone: the job has no capabilities, so DAC applies even to uid 0.
// ACLs are ignored (at worst an ancestor is covered needlessly).
func searchable(dir string, uid, gid int, groups []int) (bool, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true, nil
	}
	perm := fi.Mode().Perm()
	switch {
	case int(st.Uid) == uid:
		return perm&0o100 != 0, nil
	case int(st.Gid) == gid || slices.Contains(groups, int(st.Gid)):
		return perm&0o010 != 0, nil
	default:
		return perm&0o001 != 0, nil
	}
}
