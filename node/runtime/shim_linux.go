package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The node starts a shim as /proc/self/exe with only shimEnv=shimEnvValue
// in its environment, the config pipe on configFD and the status pipe on
// statusFD; a shim that is the init of the job's PID namespace also gets
// the result pipe on resultFD and the control pipe on controlFD. That
// init starts the exec stage (shimEnv=shimExecValue), which sets the
// limits, drops privileges and execs the job, with its config on configFD
// and the same status pipe on statusFD.
const (
	shimEnv       = "GPUMESH_JOB_SHIM"
	shimEnvValue  = "1"
	shimExecValue = "exec"
	configFD      = 3
	statusFD      = 4
	resultFD      = 5
	controlFD     = 6
	// maxConfig bounds what the shim reads from the config pipe.
	maxConfig = 64 << 20
)

// Exit codes of the shim itself.
const (
	exitSetup    = 126 // the sandbox could not be set up (reported on the status pipe)
	exitNotFound = 127 // argv[0] not found or not executable
)

// shimMsg is one line the shim writes on the status pipe. The node reads
// lines until EOF, which comes when the job has been exec'd (the pipe is
// close-on-exec) or the shim has exited.
type shimMsg struct {
	Warn  string `json:"warn,omitempty"`
	Fatal string `json:"fatal,omitempty"`
	Stage string `json:"stage,omitempty"` // with Fatal: which step failed
	Ready bool   `json:"ready,omitempty"` // sandbox done, exec follows
}

// Stages a fatal error can come from. stageNamespace means the mount
// namespace is unusable, so a node that is not root may retry without.
const (
	stageConfig    = "config"
	stageNamespace = "namespace"
	stageMounts    = "mounts"
	stageProc      = "proc"
	stageUser      = "user"
	stageExec      = "exec"
	stageNetwork   = "network"
	// stageDevpts: the kernel refused the job a devpts of its own; the
	// node starts it again without /dev/pts.
	stageDevpts = "devpts"
)

// MaybeShim must be the first thing main (and the TestMain of every package
// whose tests start jobs) calls. When the process was started by the
// runtime as a job shim it sets up the sandbox and execs the job (or, as
// the init of the job's PID namespace, supervises it), never returning;
// otherwise it returns at once.
func MaybeShim() {
	stage := os.Getenv(shimEnv)
	if stage != shimEnvValue && stage != shimExecValue {
		return
	}
	// Capabilities, the bounding set and the parent-death signal belong
	// to a thread: set them on the thread that execs the job.
	goruntime.LockOSThread()
	os.Exit(runShim(stage == shimExecValue))
}

// reporter writes shimMsgs on the status pipe.
type reporter struct{ status *os.File }

func (r reporter) say(m shimMsg) {
	b, _ := json.Marshal(m)
	_, _ = r.status.Write(append(b, '\n'))
}

func (r reporter) warn(format string, args ...any) {
	r.say(shimMsg{Warn: fmt.Sprintf(format, args...)})
}

func (r reporter) fatal(stage string, err error) int {
	r.say(shimMsg{Fatal: err.Error(), Stage: stage})
	fmt.Fprintf(os.Stderr, "gpumesh: job sandbox: %s: %v\n", stage, err)
	return exitSetup
}

// runShim returns only on failure (or, as init, when the job has ended),
// with the exit code. execStage is set in the exec stage started by the
// init of a PID namespace: the sandbox's mounts are already in place.
func runShim(execStage bool) int {
	unix.CloseOnExec(configFD)
	unix.CloseOnExec(statusFD)
	rep := reporter{status: os.NewFile(statusFD, "gpumesh-shim-status")}

	cfgFile := os.NewFile(configFD, "gpumesh-shim-config")
	data, err := io.ReadAll(io.LimitReader(cfgFile, maxConfig))
	cfgFile.Close()
	if err != nil {
		return rep.fatal(stageConfig, fmt.Errorf("read config: %w", err))
	}
	var cfg shimConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return rep.fatal(stageConfig, fmt.Errorf("decode config: %w", err))
	}
	if len(cfg.Argv) == 0 {
		return rep.fatal(stageConfig, errors.New("empty argv"))
	}
	if execStage {
		return execJob(&cfg, rep)
	}
	if cfg.NetNamespace {
		if err := loopbackUp(); err != nil {
			return rep.fatal(stageNetwork, err)
		}
	}
	if cfg.UTSNamespace && cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return rep.fatal(stageNetwork, fmt.Errorf("set hostname: %w", err))
		}
	}
	if cfg.Namespace {
		if stage, err := setupMounts(&cfg, rep.warn); err != nil {
			return rep.fatal(stage, err)
		}
		if cfg.ResolvConf != "" {
			if err := mountResolvConf(cfg.ResolvConf, cfg.Keep); err != nil {
				rep.warn("job DNS: %v", err)
			}
		}
		if cfg.Hosts != "" {
			if err := mountEtcFile("/etc/hosts", cfg.Hosts, cfg.Keep); err != nil {
				return rep.fatal(stageNetwork, err)
			}
		}
	}
	if cfg.PIDNamespace {
		return runInit(&cfg, rep)
	}
	return execJob(&cfg, rep)
}

// execJob sets the limits, drops privileges and execs the job. It returns
// only on failure.
func execJob(cfg *shimConfig, rep reporter) int {
	// Most limits now, while raising a hard limit is still allowed.
	// RLIMIT_NPROC after the change of user: it counts the shim's threads,
	// and a user over it at setuid cannot exec. RLIMIT_AS last: the shim
	// is a Go program with a large address space.
	var asLimit, nprocLimit *rlimit
	for i, r := range cfg.Rlimits {
		switch r.Resource {
		case unix.RLIMIT_AS:
			asLimit = &cfg.Rlimits[i]
		case unix.RLIMIT_NPROC:
			nprocLimit = &cfg.Rlimits[i]
		default:
			if err := setRlimit(r); err != nil {
				rep.warn("%v", err)
			}
		}
	}
	if err := dropPrivileges(cfg, rep.warn); err != nil {
		return rep.fatal(stageUser, err)
	}
	if nprocLimit != nil {
		if err := setRlimit(*nprocLimit); err != nil {
			rep.warn("%v", err)
		}
	}
	if err := os.Chdir(cfg.Dir); err != nil {
		return rep.fatal(stageUser, fmt.Errorf("enter work dir: %w", err))
	}
	// Nothing of the shim's may reach the job: every descriptor above
	// stderr (the status pipe included) closes on exec.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		cloexecAll()
	}

	path, lookErr := lookPath(cfg.Argv[0], cfg.Env)
	rep.say(shimMsg{Ready: true})
	if lookErr != nil {
		fmt.Fprintf(os.Stderr, "gpumesh: job: %v\n", lookErr)
		return exitNotFound
	}
	if asLimit != nil {
		if err := setRlimit(*asLimit); err != nil {
			fmt.Fprintf(os.Stderr, "gpumesh: job: %v\n", err)
		}
	}
	err := syscall.Exec(path, cfg.Argv, cfg.Env)
	// Only reached when exec failed.
	os.Stderr.WriteString("gpumesh: job: exec " + path + ": " + err.Error() + "\n")
	return exitNotFound
}

// setupMounts builds the job's view of the filesystem in the shim's new
// mount namespace. It returns the failing stage with its error.
func setupMounts(cfg *shimConfig, warn func(string, ...any)) (string, error) {
	// Nothing done here may reach the node's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return stageNamespace, fmt.Errorf("make / private: %w", err)
	}
	// Hold the dirs the job needs, and the nodes of its /dev, before
	// anything covers them.
	keep, err := holdDirs(cfg.Keep)
	if err != nil {
		return stageMounts, err
	}
	var devs []int
	if cfg.PrivateDev {
		if devs, err = holdDevs(cfg.DevBinds); err != nil {
			return stageMounts, err
		}
	}
	readOnlyAll(warn)
	if err := cgroupsReadOnly(); err != nil {
		return stageMounts, err
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	if cfg.PrivateDev {
		if err := mountPrivateDev(cfg.DevBinds, devs, cfg.DevPTS); errors.Is(err, errNoDevpts) {
			return stageDevpts, err
		} else if err != nil {
			return stageMounts, err
		}
	}
	if err := coverFiles(cfg, warn); err != nil {
		return stageMounts, err
	}
	relock, err := mountCovers(cfg.Covers)
	if err != nil {
		return stageMounts, err
	}
	if err := restoreKept(cfg.Keep, keep, warn); err != nil {
		return stageMounts, err
	}
	relockCovers(relock, warn)
	if cfg.PrivateDev {
		// Nothing more is made in the job's /dev: its nodes, pts and
		// shm are mounts of their own and keep their flags.
		if err := remount("/dev", true, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			warn("make the job's /dev read-only: %v", err)
		}
	}
	return "", nil
}

// holdDevs opens an O_PATH descriptor on each bind's source, before
// /dev (and /tmp ...) are covered: one per bind.
func holdDevs(binds []devBind) ([]int, error) {
	var fds []int
	for _, b := range binds {
		fd, err := unix.Open(b.Src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", b.Src, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// errNoDevpts is mountPrivateDev's error when the kernel refuses the job
// a devpts of its own.
var errNoDevpts = errors.New("a devpts of the job's own")

// mountPrivateDev mounts a tmpfs over /dev holding only the nodes of
// binds (held by fds, which it closes), with devpts a devpts of the job's
// own on /dev/pts and ptmx linked to its ptmx (never the host's: a job
// the kernel refuses one fails with errNoDevpts), an empty shm for the
// scratch tmpfs, and the fd, stdin, stdout and stderr links.
func mountPrivateDev(binds []devBind, fds []int, devpts bool) error {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	// The tmpfs itself holds no device: each node is a bind of its own.
	if err := unix.Mount("gpumesh-dev", hostDev, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=1024"); err != nil {
		return fmt.Errorf("private /dev: %w", err)
	}
	if err := unix.Mkdir(hostDev+"/shm", 0o1777); err != nil {
		return fmt.Errorf("private /dev: shm: %w", err)
	}
	for i, b := range binds {
		if err := bindDev(hostDev+"/"+b.Dst, fds[i], b.Dir); err != nil {
			return fmt.Errorf("private /dev: %s: %w", b.Src, err)
		}
	}
	links := [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}}
	if devpts {
		if err := unix.Mkdir(hostDev+"/pts", 0o755); err != nil {
			return fmt.Errorf("private /dev: pts: %w", err)
		}
		if err := unix.Mount("devpts", hostDev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
			return fmt.Errorf("private /dev: %w: %w", errNoDevpts, err)
		}
		links = append(links, [2]string{"ptmx", "pts/ptmx"})
	}
	for _, l := range links {
		if err := unix.Symlink(l[1], hostDev+"/"+l[0]); err != nil {
			return fmt.Errorf("private /dev: %s: %w", l[0], err)
		}
	}
	return nil
}

// bindInto makes an empty file (or directory) at dst and binds the node
// (or directory) held by fd on it.
func bindInto(dst string, fd int, dir bool) error {
	if dir {
		if err := unix.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else {
		f, err := unix.Open(dst, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		unix.Close(f)
	}
	return unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), dst, "", unix.MS_BIND|unix.MS_REC, "")
}

// bindDev binds the node (or directory of nodes) held by fd at dst, as
// bindInto, and lets its devices open: the bind took the flags of its
// source's mount, which readOnlyAll made nodev. It stays read-only,
// nosuid and noexec (a device opens for writing on a read-only mount).
func bindDev(dst string, fd int, dir bool) error {
	if err := bindInto(dst, fd, dir); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	flags := unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NOEXEC | mountFlags(st.Flags)&^unix.MS_NODEV
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("allow devices: %w", err)
	}
	return nil
}

// holdDirs opens an O_PATH descriptor on each of paths.
func holdDirs(paths []string) ([]int, error) {
	fds := make([]int, len(paths))
	for i, p := range paths {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		fds[i] = fd
	}
	return fds, nil
}

// mountCovers mounts the dir and scratch covers (file covers are
// coverFiles'). relock holds a descriptor on each hidden dir mounted, to
// make read-only once the kept dirs are back.
func mountCovers(covers []cover) (relock []int, err error) {
	for _, c := range covers {
		switch c.Kind {
		case coverDir:
			fd, err := mountHiddenDir(c)
			if err != nil {
				return nil, err
			}
			if fd >= 0 {
				relock = append(relock, fd)
			}
		case coverScratch:
			if err := mountScratch(c); err != nil {
				return nil, err
			}
		}
	}
	return relock, nil
}

// mountHiddenDir mounts a small empty tmpfs over c.Path and returns a
// descriptor on it, or -1 when c.Path is gone since the node looked, or
// lies under another cover.
func mountHiddenDir(c cover) (int, error) {
	opts := fmt.Sprintf("mode=%04o,size=%d,nr_inodes=%d", c.Mode, 64<<10, 1024)
	if err := unix.Mount("gpumesh-hidden", c.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return -1, nil // gone since the node looked, or under another cover
		}
		return -1, fmt.Errorf("hide %s: %w", c.Path, err)
	}
	fd, err := unix.Open(c.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("hide %s: %w", c.Path, err)
	}
	return fd, nil
}

// mountScratch mounts a private writable tmpfs over c.Path.
func mountScratch(c cover) error {
	opts := fmt.Sprintf("mode=%04o", c.Mode)
	if c.Size > 0 {
		opts += fmt.Sprintf(",size=%d", c.Size)
	}
	if err := unix.Mount("gpumesh-scratch", c.Path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("private %s: %w", c.Path, err)
	}
	return nil
}

// restoreKept puts WorkDir and CheckpointDir (paths, held by fds) back,
// writable, where the job expects them, recreating the way down inside
// any cover above them.
func restoreKept(paths []string, fds []int, warn func(string, ...any)) error {
	for i, p := range paths {
		var want, got unix.Stat_t
		if err := unix.Fstat(fds[i], &want); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if err := unix.Stat(p, &got); err != nil || got.Dev != want.Dev || got.Ino != want.Ino {
			if err := os.MkdirAll(p, 0o711); err != nil {
				return fmt.Errorf("recreate %s: %w", p, err)
			}
		}
		src := "/proc/self/fd/" + strconv.Itoa(fds[i])
		if err := unix.Mount(src, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := remount(p, false, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			warn("make %s writable: %v", p, err)
		}
		unix.Close(fds[i])
	}
	return nil
}

// relockCovers makes the hidden dirs held by fds read-only, and closes
// the fds.
func relockCovers(fds []int, warn func(string, ...any)) {
	for _, fd := range fds {
		p := "/proc/self/fd/" + strconv.Itoa(fd)
		if err := remount(p, true, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
			warn("make hidden dir read-only: %v", err)
		}
		unix.Close(fd)
	}
}

// coverFiles puts an empty, mode 000, read-only file over every file
// cover. The empty file lives on a small tmpfs mounted for the moment on
// a directory none of them is under.
func coverFiles(cfg *shimConfig, warn func(string, ...any)) error {
	var files []cover
	for _, c := range cfg.Covers {
		if c.Kind == coverFile {
			files = append(files, c)
		}
	}
	if len(files) == 0 {
		return nil
	}
	stage := stagingDir(files, cfg.Keep)
	if stage == "" {
		return errors.New("hide files: no directory to stage the empty file on")
	}
	if err := unix.Mount("gpumesh-stage", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=4k,nr_inodes=8"); err != nil {
		return fmt.Errorf("hide files: stage on %s: %w", stage, err)
	}
	empty, err := emptyFile(stage)
	if err != nil {
		return fmt.Errorf("hide files: create empty file: %w", err)
	}
	for _, f := range files {
		if err := unix.Mount(empty, f.Path, "", unix.MS_BIND, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("hide %s: %w", f.Path, err)
		}
		if err := remount(f.Path, true, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
			warn("make hidden file %s read-only: %v", f.Path, err)
		}
	}
	if err := unix.Unmount(stage, unix.MNT_DETACH); err != nil {
		warn("unmount stage %s: %v", stage, err)
	}
	return nil
}

// stagingDir is the first existing directory of /dev/shm, /tmp, /mnt,
// /run and the kept dirs that no file of files is, or lies under; "" when
// there is none.
func stagingDir(files []cover, keep []string) string {
	for _, d := range append([]string{"/dev/shm", "/tmp", "/mnt", "/run"}, keep...) {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		clear := true
		for _, f := range files {
			if f.Path == d || under(f.Path, d) {
				clear = false
				break
			}
		}
		if clear {
			return d
		}
	}
	return ""
}

// emptyFile creates an empty file of mode 000 in dir and returns its path.
func emptyFile(dir string) (string, error) {
	empty := filepath.Join(dir, "empty")
	fd, err := unix.Open(empty, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		err = unix.Chmod(empty, 0)
	}
	return empty, err
}

// readOnlyAll makes every mount of the namespace read-only and nodev, so
// that no device node opens but those the private /dev binds (bindDev):
// not one on the host's /dev or another devtmpfs, a chroot's /dev, nor
// one planted where the job reaches it. Per-mount flags only (MS_BIND):
// the filesystems stay writable, and their devices usable, for everyone
// else. Mounts the shim cannot reach are left alone: the job cannot reach
// them either.
func readOnlyAll(warn func(string, ...any)) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		warn("read mountinfo: %v; the filesystem stays writable", err)
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if err := remount(mp, true, unix.MS_NODEV); err != nil && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.ENOENT) {
			warn("make %s read-only and nodev: %v", mp, err)
		}
	}
}

// cgroupsReadOnly fails unless every cgroup mount of the namespace is
// read-only once readOnlyAll has run: a job running as uid 0 (RunAs "")
// passes the permission checks of a root-owned cgroup.procs, and could
// otherwise move itself into its cgroup's parent, away from its device
// filter (and its limits).
func cgroupsReadOnly() error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("check the cgroup mounts are read-only: %w", err)
	}
	return checkCgroupsReadOnly(data, func(p string) (int64, error) {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		return st.Flags, err
	})
}

// checkCgroupsReadOnly checks, for each cgroup and cgroup2 mount of
// mountinfo, that statfs gives it ST_RDONLY. A mount statfs cannot
// reach (EACCES, ENOENT) the job cannot reach either.
func checkCgroupsReadOnly(mountinfo []byte, statfs func(string) (int64, error)) error {
	for _, line := range strings.Split(string(mountinfo), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(b) < 1 || b[0] != "cgroup" && b[0] != "cgroup2" {
			continue
		}
		mp := unescapeMount(a[4])
		flags, err := statfs(mp)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("check that %s is read-only: %w", mp, err)
		}
		if flags&unix.ST_RDONLY == 0 {
			return fmt.Errorf("the %s mount %s stays writable in the job's view (see the warnings above), so a job running as root could leave its cgroup and device filter", b[0], mp)
		}
	}
	return nil
}

// remount changes the read-only flag of the mount at p, keeping its other
// flags (which a user namespace may not clear) and adding extra.
func remount(p string, readOnly bool, extra uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return err
	}
	have := mountFlags(st.Flags)
	if readOnly && st.Flags&unix.ST_RDONLY != 0 && have&extra == extra {
		return nil
	}
	flags := unix.MS_BIND | unix.MS_REMOUNT | have | extra
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", p, "", flags, "")
}

// stNoSymfollow is ST_NOSYMFOLLOW (Linux 5.10), which x/sys lacks.
const stNoSymfollow = 0x2000

// mountFlags maps statfs flags to the mount flags a bind remount must
// repeat.
func mountFlags(st int64) uintptr {
	var m uintptr
	for _, f := range []struct {
		st int64
		ms uintptr
	}{
		{unix.ST_NOSUID, unix.MS_NOSUID},
		{unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
		{stNoSymfollow, unix.MS_NOSYMFOLLOW},
	} {
		if st&f.st != 0 {
			m |= f.ms
		}
	}
	if st&(unix.ST_NOATIME|unix.ST_RELATIME) == 0 {
		m |= unix.MS_STRICTATIME
	}
	return m
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// dropPrivileges leaves the shim with no capabilities, unable to gain any,
// as RunAs when set, and dying with the node.
func dropPrivileges(cfg *shimConfig, warn func(string, ...any)) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Empty the bounding set first: it needs CAP_SETPCAP. Without it (a
	// node that is not root, no namespace) there is nothing to drop.
	for c := 0; c <= 63; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability
		}
		if err != nil && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	if u := cfg.User; u != nil {
		if err := syscall.Setgroups([]int{u.GID}); err != nil {
			return fmt.Errorf("setgroups %d: %w", u.GID, err)
		}
		if err := syscall.Setgid(u.GID); err != nil {
			return fmt.Errorf("setgid %d: %w", u.GID, err)
		}
		if err := syscall.Setuid(u.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", u.UID, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	// A change of user clears the parent-death signal: set it again, and
	// make sure the node did not die before it was set.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		warn("parent-death signal: %v", err)
	}
	if cfg.NodePID != 0 && unix.Getppid() != cfg.NodePID {
		return errors.New("the node exited")
	}
	return nil
}

// setRlimit applies r, lowering it to the current hard limit when raising
// that is not allowed.
func setRlimit(r rlimit) error {
	lim := syscall.Rlimit{Cur: r.Cur, Max: r.Max}
	err := syscall.Setrlimit(r.Resource, &lim)
	if errors.Is(err, unix.EPERM) {
		var cur syscall.Rlimit
		if syscall.Getrlimit(r.Resource, &cur) == nil && cur.Max < lim.Max {
			lim.Max = cur.Max
			lim.Cur = min(lim.Cur, cur.Max)
			err = syscall.Setrlimit(r.Resource, &lim)
			if err == nil {
				return fmt.Errorf("rlimit %s: lowered to the node's hard limit %d", r.Name, cur.Max)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("rlimit %s %d: %w", r.Name, r.Cur, err)
	}
	return nil
}

// cloexecAll marks every descriptor above stderr close-on-exec, for
// kernels without close_range.
func cloexecAll() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// lookPath finds file in the PATH of env, as the job's user, in the job's
// view of the filesystem.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		if err := executable(file); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return file, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if executable(p) == nil {
			if !filepath.IsAbs(p) && !strings.HasPrefix(p, ".") {
				p = "./" + p
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH=%s", file, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	return unix.Access(p, unix.X_OK)
}
