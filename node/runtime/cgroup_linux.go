package runtime

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupParent is the cgroup, under the root, that holds every job's.
const cgroupParent = "gpumesh"

// initTasks is what pids.max allows beyond Limits.Procs: the threads of
// the job's init (the shim, a Go program) live in the job's cgroup too.
const initTasks = 16

// cgroupRoot is a usable cgroup v2 hierarchy.
type cgroupRoot struct {
	root        string
	controllers map[string]bool // available at the root
}

// detectCgroup returns the cgroup v2 hierarchy at root, or nil and why it
// cannot be used.
func detectCgroup(root string) (*cgroupRoot, string) {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Sprintf("no %s/cgroup.controllers (cgroup v1 or no cgroups): %v", root, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Sprintf("statfs %s: %v", root, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Sprintf("%s is not a cgroup2 mount", root)
	}
	if err := unix.Access(root, unix.W_OK); err != nil {
		return nil, fmt.Sprintf("%s is not writable: %v", root, err)
	}
	c := &cgroupRoot{root: root, controllers: map[string]bool{}}
	for _, name := range strings.Fields(string(b)) {
		c.controllers[name] = true
	}
	return c, ""
}

// jobCgroup is the cgroup of one job attempt.
type jobCgroup struct {
	path string
	dir  *os.File // for SysProcAttr.CgroupFD
	// memory is set when memory.max bounds the job.
	memory bool
}

// create makes <root>/gpumesh/<name> with the limits written; problems
// that only cost a limit are logged and the cgroup is still returned.
func (c *cgroupRoot) create(name string, l Limits, log *slog.Logger) (*jobCgroup, error) {
	parent := filepath.Join(c.root, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cgroup %s: %w", parent, err)
	}
	want := c.enableControllers(parent, l, log)
	path, err := makeCgroupDir(parent, name, log)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	dir, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		_ = unix.Rmdir(path)
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	cg := &jobCgroup{path: path, dir: dir}
	cg.writeLimits(l, want, log)
	return cg, nil
}

// enableControllers enables, for the children of the root and of parent,
// the controllers that l needs (memory, pids), and returns those enabled.
func (c *cgroupRoot) enableControllers(parent string, l Limits, log *slog.Logger) map[string]bool {
	want := map[string]bool{"memory": l.MemoryBytes > 0, "pids": l.Procs > 0}
	for _, ctl := range []string{"memory", "pids"} {
		if !want[ctl] {
			continue
		}
		if !c.controllers[ctl] {
			log.Warn("cgroup controller not available; its limit is not enforced by the cgroup", "controller", ctl, "root", c.root)
			want[ctl] = false
			continue
		}
		for _, dir := range []string{c.root, parent} {
			if err := writeCgroup(dir, "cgroup.subtree_control", "+"+ctl); err != nil {
				log.Warn("enable cgroup controller; its limit is not enforced by the cgroup", "controller", ctl, "cgroup", dir, "err", err)
				want[ctl] = false
				break
			}
		}
	}
	return want
}

// makeCgroupDir makes parent/name, or parent/name-<random> when another
// node's running job holds that name, and returns its path.
func makeCgroupDir(parent, name string, log *slog.Logger) (string, error) {
	path := filepath.Join(parent, name)
	err := os.Mkdir(path, 0o755)
	if errors.Is(err, fs.ErrExist) {
		// Left over by a node that died (then it is empty and goes), or in
		// use by another node on this machine (then it stays, untouched).
		if unix.Rmdir(path) == nil {
			err = os.Mkdir(path, 0o755)
		} else {
			log.Warn("cgroup name in use by a running job; using another", "cgroup", path)
			path, err = os.MkdirTemp(parent, name+"-")
		}
	}
	return path, err
}

// writeLimits writes memory.max (with no swap) and pids.max for the
// controllers in want; a limit that cannot be written is logged.
func (cg *jobCgroup) writeLimits(l Limits, want map[string]bool, log *slog.Logger) {
	if want["memory"] {
		err := cg.write("memory.max", strconv.FormatInt(l.MemoryBytes, 10))
		if err == nil {
			cg.memory = true
			if err := cg.write("memory.swap.max", "0"); err != nil && !errors.Is(err, fs.ErrNotExist) {
				log.Warn("cgroup memory.swap.max", "cgroup", cg.path, "err", err)
			}
		} else {
			log.Warn("cgroup memory.max; not enforced by the cgroup", "cgroup", cg.path, "err", err)
		}
	}
	if want["pids"] {
		if err := cg.write("pids.max", strconv.FormatInt(l.Procs+initTasks, 10)); err != nil {
			log.Warn("cgroup pids.max; not enforced by the cgroup", "cgroup", cg.path, "err", err)
		}
	}
}

func writeCgroup(dir, file, value string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(value), 0)
}

// The methods below reach the cgroup through its open directory, never
// by path again: were the path ever reused, they still act on this
// job's cgroup only.

func (cg *jobCgroup) write(file, value string) error {
	fd, err := unix.Openat(int(cg.dir.Fd()), file, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: filepath.Join(cg.path, file), Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return &fs.PathError{Op: "write", Path: filepath.Join(cg.path, file), Err: err}
	}
	return nil
}

func (cg *jobCgroup) read(file string) ([]byte, error) {
	fd, err := unix.Openat(int(cg.dir.Fd()), file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(cg.path, file))
	defer f.Close()
	return io.ReadAll(f)
}

// kill kills every process in the cgroup, setsid escapees included.
func (cg *jobCgroup) kill() {
	err := cg.write("cgroup.kill", "1")
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return
	}
	// Before Linux 5.14: one by one.
	b, _ := cg.read("cgroup.procs")
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// freeze freezes or thaws the whole cgroup.
func (cg *jobCgroup) freeze(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := cg.write("cgroup.freeze", v); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup freeze %s: %w", v, err)
	}
	return nil
}

// cpuTime is usage_usec from cpu.stat: every process the job ever had.
func (cg *jobCgroup) cpuTime() time.Duration {
	b, err := cg.read("cpu.stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Duration(n) * time.Microsecond
		}
	}
	return 0
}

// remove kills what is left in the cgroup and removes it, waiting (up to
// ten seconds) for the processes to go.
func (cg *jobCgroup) remove() error {
	defer cg.dir.Close()
	var want, got unix.Stat_t
	if err := unix.Fstat(int(cg.dir.Fd()), &want); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", cg.path, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	wait := 5 * time.Millisecond
	for {
		cg.kill()
		if err := unix.Stat(cg.path, &got); err != nil || got.Ino != want.Ino || got.Dev != want.Dev {
			return nil // gone, or no longer ours
		}
		err := unix.Rmdir(cg.path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", cg.path, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}
