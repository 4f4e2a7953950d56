package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	// ErrUnavailable is returned, wrapped, by New when a runtime cannot be
	// used on this machine (no docker binary, no engine behind it ...).
	ErrUnavailable = errors.New("runtime unavailable")
	// ErrInvalidSpec is returned, wrapped, by Start when the Spec itself is
	// wrong (bad env entry, relative path, ...): retrying will not help.
	ErrInvalidSpec = errors.New("invalid job spec")
	// ErrExited is returned, wrapped, by Pause and Resume once the job has
	// exited.
	ErrExited = errors.New("job has exited")
)

// Limits bound a job. Zero fields mean "no limit of that kind".
type Limits struct {
	// MemoryBytes is RLIMIT_AS and, with cgroup v2, memory.max (swap off).
	// RLIMIT_AS is not applied to jobs with GPUs: CUDA reserves address
	// space far beyond what it uses, so only memory.max bounds those.
	MemoryBytes int64
	// CPUSeconds is RLIMIT_CPU: SIGXCPU at the limit, SIGKILL one CPU
	// second later. It counts per process, not for the whole tree.
	CPUSeconds int64
	// Procs is RLIMIT_NPROC (only effective with RunAs, and counted over
	// every process of that user) and, with cgroup v2, pids.max.
	Procs int64
	// FileBytes is RLIMIT_FSIZE: the largest file the job may write.
	FileBytes int64
	// OpenFiles is RLIMIT_NOFILE (1024 when 0).
	OpenFiles int64
}

// Spec is one attempt of a job, as the supplier's executor hands it over.
type Spec struct {
	JobID   string // hex id, used in names (cgroup, container)
	Attempt int    // 1, 2, ... exported as JOB_ATTEMPT
	// Lease is the attempt's lease ID, hex: the cgroups made for the job
	// are named by it too, since the members of a cluster share JobID
	// and Attempt, and suppliers may share a machine (a testnet) where
	// one name for all would let one node's cgroup replace another's.
	Lease string
	Argv  []string // argv[0] is looked up in the job's PATH
	// Env are the renter's KEY=VALUE pairs: no '=' in KEY, no NUL, and
	// none of the GPU variables the node sets (CUDA_VISIBLE_DEVICES, and
	// NVIDIA_* but NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_* and
	// NVIDIA_DISABLE_REQUIRE): Start refuses those (ErrInvalidSpec).
	Env []string
	// WorkDir is absolute and exists: the job's cwd and HOME. TMPDIR is
	// WorkDir/tmp, created by Start.
	WorkDir string
	// CheckpointDir is absolute and exists; exported as CHECKPOINT_DIR.
	CheckpointDir string
	// OutputDir, when set, is a folder below WorkDir; exported as
	// OUTPUT_DIR (the job's outputs, brought back to the renter).
	OutputDir string
	// GPUs are exported as CUDA_VISIBLE_DEVICES, comma-joined; none
	// exports CUDA_VISIBLE_DEVICES="" (no GPU).
	GPUs []string
	// GPUDevices are the absolute paths of the leased GPUs' device nodes
	// (/dev/nvidia<minor>), character devices all: the only GPUs the job
	// can open, whatever its environment says. The process runtime binds
	// each at /dev/<base name> in the job's private /dev, with the
	// driver's control nodes (Options.DeviceDir), and its device filter
	// allows them; docker and podman pass them as --device in
	// Options.GPUMode "devices". None (a job without GPUs, or with
	// simulated ones): no GPU node and no control node at all.
	GPUDevices []string
	Limits     Limits
	// RunAs is "" (the node's own user) or a user name or "uid:gid". When
	// set, WorkDir and CheckpointDir are chowned (recursively) to it. It
	// needs the node to run as root.
	RunAs string
	// Hide lists absolute paths the job must not read: a directory is
	// covered by an empty read-only tmpfs, anything else by an empty,
	// mode 000, read-only file. A hidden directory may contain WorkDir
	// and CheckpointDir (those stay usable); a missing path is skipped.
	Hide []string
	// Image is the container image, for docker and podman only.
	Image string
	// Stdout and Stderr receive the job's output (io.Discard when nil).
	// When they are the same writer, one pipe carries both, in order.
	// With TTY both are the terminal's output, written to Stdout.
	Stdout, Stderr io.Writer
	// Stdin, when set, is copied to the job's standard input until it
	// ends: through a pipe that closes then (the job reads EOF), or into
	// the terminal with TTY (where EOF is the byte 0x04, Ctrl-D, sent as
	// any other). Nil gives the job /dev/null. The runtime stops reading
	// it at its first read after the job is done: its owner closes it to
	// end a read that blocks. The process runtime only: docker and podman
	// refuse it (ErrInvalidSpec).
	Stdin io.Reader
	// TTY, when set, runs the job on a pseudo-terminal of this size: the
	// terminal is its stdin, stdout and stderr and its controlling
	// terminal (the job leads a session of its own), so Ctrl-C (0x03)
	// on Stdin interrupts its foreground process group as in any
	// terminal; Terminal.Resize changes the size. The process runtime
	// only.
	TTY *WinSize
	// Cluster, when set, gives the job an address in its renter's
	// cluster (see ClusterNet). The process runtime only, on a root node
	// with job networks (ClusterSupport); Start refuses it elsewhere
	// (ErrInvalidSpec).
	Cluster *ClusterNet
}

// WinSize is a terminal's size in characters.
type WinSize struct {
	Rows, Cols uint16
}

// Terminal is implemented by the Process of a job started with
// Spec.TTY.
type Terminal interface {
	// Resize sets the terminal's size: the job's foreground process
	// group gets SIGWINCH.
	Resize(WinSize) error
}

// Result is how a job ended.
type Result struct {
	ExitCode int           // -1 when killed by a signal
	Signal   string        // e.g. "killed"; "" when it exited
	Err      error         // start or wait failure, nil otherwise
	CPUTime  time.Duration // user+sys of the process tree, as rusage (or the cgroup) reports
	MaxRSS   int64         // bytes, of the largest process
}

// Process is one running job.
type Process interface {
	// Pid is the pid of the job's shim (the init of its PID namespace,
	// which the job dies with), which is also its process group id (for
	// KillGroup after a node restart).
	Pid() int
	// Done is closed when the job (its group leader) has exited, whatever
	// it left behind has been killed and its output is drained.
	Done() <-chan struct{}
	// Result is valid after Done.
	Result() Result
	// Pause stops the whole job (SIGSTOP to every process of its PID
	// namespace, or of its group without one, and the cgroup freezer when
	// there is one).
	Pause() error
	// Resume undoes Pause.
	Resume() error
	// Stop sends SIGTERM to every process of the job (its PID namespace,
	// or its group without one), SIGKILL after grace, and returns after
	// Done.
	Stop(grace time.Duration) error
}

// Runtime starts jobs.
type Runtime interface {
	// Name is "process", "docker" or "podman".
	Name() string
	// Start starts one attempt of a job. ctx bounds only the start: once
	// Start has returned, cancelling it does nothing to the job.
	Start(ctx context.Context, s Spec) (Process, error)
	// Close releases what the runtime keeps ready for jobs to come (job
	// networks made ahead, NetConfig.Warm); running jobs keep theirs.
	// It is safe to call more than once.
	Close() error
}

// Options configure New.
type Options struct {
	// Log receives the runtime's logs; slog.Default when nil.
	Log *slog.Logger
	// CgroupRoot is where cgroup v2 is mounted (default /sys/fs/cgroup).
	// cgroup v2 is used only when <root>/cgroup.controllers exists, the
	// directory is a cgroup2 mount and it is writable; jobs then run in
	// <root>/gpumesh/job-<id>-<attempt>.
	CgroupRoot string
	// AllowUnsandboxed lets a node that is not root and cannot create a
	// user namespace run jobs without a mount namespace, where nothing in
	// Hide is hidden. Without it such a node refuses jobs (ErrUnavailable).
	AllowUnsandboxed bool
	// Net, when set, gives every job a network namespace of its own (see
	// "The job's network" in the package comment); nil leaves jobs on the
	// node's network, and containers on the engine's. docker and podman
	// use it only on a root node; elsewhere their containers get the
	// engine's network, and NetworkIsolation says so.
	Net *NetConfig
	// DeviceDir is where the GPU driver's control nodes (nvidiactl,
	// nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/) are
	// found for jobs with GPUDevices (default /dev).
	DeviceDir string
	// DeviceFilter chooses the process runtime's device filter, which
	// lets a job open only the nodes of its private /dev, by number,
	// wherever it finds them: "" uses every filter this machine has (a
	// cgroup v2 BPF device program on the job's cgroup, the cgroup v1
	// devices controller), "bpf" or "v1" only that one, "off" none (the
	// private /dev alone; for tests that show what the filter adds).
	DeviceFilter string
	// GPUMode is how docker and podman give a container its GPUs:
	// "toolkit" (default) by the NVIDIA container toolkit (docker's
	// --gpus device=UUID, podman's CDI nvidia.com/gpu=UUID); "devices"
	// by plain --device of Spec.GPUDevices and the control nodes, for an
	// engine without the toolkit.
	GPUMode string
}

// Options.GPUMode values.
const (
	GPUModeToolkit = "toolkit"
	GPUModeDevices = "devices"
)

// Options.DeviceFilter values besides "" (every filter available).
const (
	DeviceFilterBPF = "bpf"
	DeviceFilterV1  = "v1"
	DeviceFilterOff = "off"
)

func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	if o.DeviceDir == "" {
		o.DeviceDir = "/dev"
	}
	if o.GPUMode == "" {
		o.GPUMode = GPUModeToolkit
	}
	return o
}

// check refuses option values New does not know.
func (o Options) check() error {
	switch o.DeviceFilter {
	case "", DeviceFilterBPF, DeviceFilterV1, DeviceFilterOff:
	default:
		return fmt.Errorf("device filter %q: want \"\", %s, %s or %s", o.DeviceFilter, DeviceFilterBPF, DeviceFilterV1, DeviceFilterOff)
	}
	switch o.GPUMode {
	case GPUModeToolkit, GPUModeDevices:
	default:
		return fmt.Errorf("gpu mode %q: want %s or %s", o.GPUMode, GPUModeToolkit, GPUModeDevices)
	}
	if !filepath.IsAbs(o.DeviceDir) {
		return fmt.Errorf("device dir %q: want an absolute path", o.DeviceDir)
	}
	return nil
}

// New returns the runtime called name: "process" (or ""), "docker" or
// "podman". docker and podman return an error wrapping ErrUnavailable when
// the binary is missing or "<bin> info" fails.
func New(name string, o Options) (Runtime, error) {
	o = o.withDefaults()
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("runtime %q: %w", name, err)
	}
	switch name {
	case "", "process":
		return newProcessRuntime(o)
	case "docker", "podman":
		return newContainerRuntime(name, o)
	default:
		return nil, fmt.Errorf("runtime %q: unknown; want process, docker or podman", name)
	}
}

// jobIDForm is what Spec.JobID must look like: it names cgroups and
// containers.
var jobIDForm = regexp.MustCompile(`^[0-9a-fA-F]{1,128}$`)

// validate checks what every runtime needs from a Spec, one property
// after another, and sets a nil Stdout or Stderr to io.Discard. Errors
// wrap ErrInvalidSpec.
func validate(s *Spec) error {
	for _, check := range []func(*Spec) error{
		checkIdentity,
		checkArgv,
		checkEnv,
		checkDirs,
		checkGPUs,
		checkGPUDevices,
		checkHide,
		checkLimits,
		checkTTY,
		checkCluster,
	} {
		if err := check(s); err != nil {
			return err
		}
	}
	if s.Stdout == nil {
		s.Stdout = io.Discard
	}
	if s.Stderr == nil {
		s.Stderr = io.Discard
	}
	return nil
}

// checkTTY checks the terminal's size: both at least 1.
func checkTTY(s *Spec) error {
	if s.TTY != nil && (s.TTY.Rows == 0 || s.TTY.Cols == 0) {
		return invalid("terminal size %dx%d: rows and columns must be at least 1", s.TTY.Cols, s.TTY.Rows)
	}
	return nil
}

// invalid is an error wrapping ErrInvalidSpec.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// checkIdentity checks the job ID and attempt, and that there is a
// command.
func checkIdentity(s *Spec) error {
	switch {
	case !jobIDForm.MatchString(s.JobID):
		return invalid("job id %q: want 1 to 128 hex digits", s.JobID)
	case s.Attempt < 0:
		return invalid("attempt %d: want >= 0", s.Attempt)
	case len(s.Argv) == 0 || s.Argv[0] == "":
		return invalid("empty argv")
	}
	return nil
}

// checkArgv refuses an arg holding NUL.
func checkArgv(s *Spec) error {
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("argv[%d] contains NUL", i)
		}
	}
	return nil
}

// checkEnv wants each env entry KEY=VALUE, with a name and without NUL,
// and none of the GPU variables the node owns (gpuEnv).
func checkEnv(s *Spec) error {
	for i, kv := range s.Env {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return invalid("env[%d]: want KEY=VALUE, got no '='", i)
		case k == "":
			return invalid("env[%d]: empty name", i)
		case strings.IndexByte(kv, 0) >= 0:
			return invalid("env[%d] %s: contains NUL", i, k)
		}
		if err := gpuEnv(k, v); err != nil {
			return invalid("env[%d] %s: %v", i, k, err)
		}
	}
	return nil
}

// CheckGPUEnv reports why a renter's environment variable k=v is refused
// (nil when it is not): CUDA_VISIBLE_DEVICES and the NVIDIA_* variables
// that choose GPUs or device nodes belong to the node. Every runtime
// refuses such a spec at start; a renter's node checks it at submit, so
// that the renter learns it before renting.
func CheckGPUEnv(k, v string) error { return gpuEnv(k, v) }

// driverCapabilities are the values NVIDIA_DRIVER_CAPABILITIES may list.
var driverCapabilities = []string{"all", "compute", "compat32", "display", "graphics", "ngx", "utility", "video"}

// gpuEnv refuses a renter's variable that would choose GPUs or device
// nodes, which only the lease does: CUDA_VISIBLE_DEVICES, which the node
// sets to the leased GPUs, and NVIDIA_*, which the NVIDIA container
// toolkit reads to give a container GPUs and device nodes (the node sets
// NVIDIA_VISIBLE_DEVICES and the others that add devices; see
// containerEnv). Three add none and stay the renter's: NVIDIA_REQUIRE_*
// and NVIDIA_DISABLE_REQUIRE (the driver and CUDA versions an image
// wants), and NVIDIA_DRIVER_CAPABILITIES (which driver libraries and
// tools come with the GPUs), a comma list of driverCapabilities.
func gpuEnv(k, v string) error {
	switch {
	case k == "CUDA_VISIBLE_DEVICES":
		return errors.New("set by the node to the leased GPUs; a job may not set it (its command may narrow it)")
	case !strings.HasPrefix(k, "NVIDIA_"):
		return nil
	case k == "NVIDIA_DRIVER_CAPABILITIES":
		for _, c := range strings.Split(v, ",") {
			if c != "" && !slices.Contains(driverCapabilities, c) {
				return fmt.Errorf("capability %q: want a comma list of %s", c, strings.Join(driverCapabilities, ", "))
			}
		}
		return nil
	case strings.HasPrefix(k, "NVIDIA_REQUIRE_"), k == "NVIDIA_DISABLE_REQUIRE":
		return nil
	}
	return errors.New("NVIDIA_* variables choose a container's GPUs and device nodes, which the node sets from the lease; a job may set only NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_* and NVIDIA_DISABLE_REQUIRE")
}

// checkDirs wants the work and checkpoint dirs to be absolute paths of
// existing directories.
func checkDirs(s *Spec) error {
	for _, d := range []struct{ name, path string }{{"work dir", s.WorkDir}, {"checkpoint dir", s.CheckpointDir}} {
		if !filepath.IsAbs(d.path) {
			return invalid("%s %q: want an absolute path", d.name, d.path)
		}
		fi, err := os.Stat(d.path)
		if err != nil {
			return invalid("%s: %v", d.name, err)
		}
		if !fi.IsDir() {
			return invalid("%s %s: not a directory", d.name, d.path)
		}
	}
	return nil
}

// checkGPUs wants each GPU to be something CUDA_VISIBLE_DEVICES (a comma
// list) and a container's device option can hold.
func checkGPUs(s *Spec) error {
	for i, g := range s.GPUs {
		if g == "" || strings.ContainsAny(g, ",\x00\n\"") {
			return invalid("gpu[%d] %q: want a device index or UUID", i, g)
		}
	}
	return nil
}

// checkGPUDevices wants each GPU device an absolute path, a character
// device, whose base name is neither a node every job has nor another
// GPU's: each is bound at /dev/<base name>.
func checkGPUDevices(s *Spec) error {
	names := map[string]bool{}
	for i, d := range s.GPUDevices {
		if !filepath.IsAbs(d) || strings.ContainsAny(d, ":,\x00\n") {
			return invalid("gpu device[%d] %q: want an absolute path", i, d)
		}
		fi, err := os.Stat(d)
		if err != nil {
			return invalid("gpu device[%d]: %v", i, err)
		}
		if fi.Mode().Type() != fs.ModeDevice|fs.ModeCharDevice {
			return invalid("gpu device[%d] %s: not a character device", i, d)
		}
		name := filepath.Base(d)
		if names[name] || standardDevName(name) || slices.Contains(controlNodes, name) {
			return invalid("gpu device[%d] %s: /dev/%s is taken", i, d, name)
		}
		names[name] = true
	}
	return nil
}

// checkHide wants each path to hide absolute, without NUL, and not /.
func checkHide(s *Spec) error {
	for _, h := range s.Hide {
		if !filepath.IsAbs(h) || strings.IndexByte(h, 0) >= 0 {
			return invalid("hide %q: want an absolute path", h)
		}
		if filepath.Clean(h) == "/" {
			return invalid("hide /: would hide everything")
		}
	}
	return nil
}

// checkLimits refuses a negative limit.
func checkLimits(s *Spec) error {
	l := s.Limits
	if l.MemoryBytes < 0 || l.CPUSeconds < 0 || l.Procs < 0 || l.FileBytes < 0 || l.OpenFiles < 0 {
		return invalid("negative limit in %+v", l)
	}
	return nil
}

// jobUser is a resolved RunAs.
type jobUser struct {
	uid, gid int
}

// resolveUser resolves RunAs: "uid:gid" or a user name known to this
// machine.
// CheckUser reports whether runAs names a user jobs can run as: a user
// name this machine has, or "uid:gid" (each below 2^31). "" is the node's
// own user.
func CheckUser(runAs string) error {
	if runAs == "" {
		return nil
	}
	if _, err := resolveUser(runAs); err != nil {
		return fmt.Errorf("%q is neither a user of this machine nor uid:gid (each below 2^31)", runAs)
	}
	return nil
}

func resolveUser(runAs string) (jobUser, error) {
	if u, g, ok := strings.Cut(runAs, ":"); ok {
		uid, err1 := strconv.ParseUint(u, 10, 31)
		gid, err2 := strconv.ParseUint(g, 10, 31)
		if err1 != nil || err2 != nil {
			return jobUser{}, fmt.Errorf("%w: run as %q: want a user name or uid:gid", ErrInvalidSpec, runAs)
		}
		return jobUser{uid: int(uid), gid: int(gid)}, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return jobUser{}, fmt.Errorf("%w: run as %q: %v", ErrInvalidSpec, runAs, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return jobUser{}, fmt.Errorf("%w: run as %q: non-numeric uid %q or gid %q", ErrInvalidSpec, runAs, u.Uid, u.Gid)
	}
	return jobUser{uid: uid, gid: gid}, nil
}

// DefaultPath is the PATH a job starts with (the renter may replace it).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// envBuilder keeps KEY=VALUE pairs in first-set order, last value winning.
type envBuilder struct {
	order []string
	vals  map[string]string
}

func (b *envBuilder) set(k, v string) {
	if b.vals == nil {
		b.vals = map[string]string{}
	}
	if _, ok := b.vals[k]; !ok {
		b.order = append(b.order, k)
	}
	b.vals[k] = v
}

func (b *envBuilder) list() []string {
	out := make([]string, 0, len(b.order))
	for _, k := range b.order {
		out = append(out, k+"="+b.vals[k])
	}
	return out
}

// jobEnv is the complete environment of a job: defaults (which the
// renter may replace), then the renter's Env, then fixed (which the
// renter may not).
func jobEnv(defaults [][2]string, renter []string, fixed [][2]string) []string {
	var b envBuilder
	for _, kv := range defaults {
		b.set(kv[0], kv[1])
	}
	for _, kv := range renter {
		k, v, _ := strings.Cut(kv, "=")
		b.set(k, v)
	}
	for _, kv := range fixed {
		b.set(kv[0], kv[1])
	}
	return b.list()
}

// outputEnv exports OUTPUT_DIR, s.OutputDir as the job sees it with its
// work dir at work; nothing when the job has no output dir.
func outputEnv(work string, s Spec) [][2]string {
	rel, err := filepath.Rel(s.WorkDir, s.OutputDir)
	if s.OutputDir == "" || err != nil || !filepath.IsLocal(rel) {
		return nil
	}
	return [][2]string{{"OUTPUT_DIR", filepath.Join(work, rel)}}
}

// sameWriter reports whether a and b are the same writer, without
// panicking on writers that are not comparable.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// short is a job id cut for log lines.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// resultOf turns a wait into a Result: the exit code, or -1 and the
// signal; the CPU time and peak RSS of what was waited for.
func resultOf(st *os.ProcessState, werr error) Result {
	var res Result
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		res.Err = fmt.Errorf("wait: %w", werr)
	}
	if st == nil {
		res.ExitCode = -1
		return res
	}
	res.ExitCode = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = -1
		res.Signal = ws.Signal().String()
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		res.CPUTime = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		res.MaxRSS = ru.Maxrss * 1024
	}
	return res
}
