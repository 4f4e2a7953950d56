package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// drainTimeout bounds how long Done waits for the job's output pipes
// after its group is killed: only a process that escaped the group (and
// the cgroup) can still hold them.
const drainTimeout = 10 * time.Second

// processRuntime runs jobs as sandboxed processes on this machine.
type processRuntime struct {
	log  *slog.Logger
	cg   *cgroupRoot // nil: no cgroup v2
	root bool        // the node runs as root
	// noUserNS is set once a user namespace has failed: later jobs start
	// without a mount namespace at once. noDevpts is set once the kernel
	// refused a job a devpts of its own: later jobs start without
	// /dev/pts at once.
	noUserNS  atomic.Bool
	noDevpts  atomic.Bool
	warnRoot  sync.Once
	allowBare bool // Options.AllowUnsandboxed
	// With Options.Net: ns is set, and jnet too on a root node (without
	// root jobs get loopback only). resolv is the jobs' resolv.conf ("":
	// the host's).
	ns     *netns
	jnet   *jobNetwork
	resolv string
	// pool keeps job networks ready (NetConfig.Warm); nil without jnet
	// or with Warm negative.
	pool *netPool
	// devDir is Options.DeviceDir; filters are the device filters jobs
	// get.
	devDir  string
	filters deviceFilters
}

func newProcessRuntime(o Options) (Runtime, error) {
	r := &processRuntime{log: o.Log.With("runtime", "process"), root: os.Geteuid() == 0, allowBare: o.AllowUnsandboxed, devDir: o.DeviceDir}
	if o.Net != nil {
		if err := r.setUpNet(*o.Net); err != nil {
			return nil, fmt.Errorf("runtime process: %w", err)
		}
	}
	cg, why := detectCgroup(o.CgroupRoot)
	if cg == nil {
		r.log.Info("cgroup v2 not used: jobs are bounded by rlimits only", "reason", why)
	} else {
		r.cg = cg
		r.log.Info("cgroup v2 used for jobs", "root", cg.root)
	}
	f, missing, err := detectDeviceFilters(o.DeviceFilter, r.cg)
	if err != nil {
		return nil, fmt.Errorf("runtime process: %w", err)
	}
	r.filters = f
	if !f.any() {
		r.log.Warn("no device filter: a job's private /dev holds only its own GPUs and its other mounts are nodev, but a device node added to a directory its /dev binds whole (nvidia-caps) opens", "why", strings.Join(missing, "; "))
	} else {
		r.log.Info("device filter for jobs", "bpf", f.bpf, "v1", f.v1)
	}
	return r, nil
}

func (r *processRuntime) Name() string { return "process" }

// setUpNet prepares job networks: the node's own namespace to come back
// to and, on a root node, the pool and rules (removing leftovers).
func (r *processRuntime) setUpNet(c NetConfig) error {
	var err error
	if r.ns, r.jnet, r.resolv, err = openJobNet(c, r.root, r.log); err != nil {
		return err
	}
	if r.jnet == nil {
		r.log.Info("jobs get a network namespace of their own with loopback only (no veth, no outbound traffic): the node is not root")
		return nil
	}
	if c = c.withDefaults(); c.Warm > 0 {
		r.pool = newNetPool(r.jnet, c.Warm, r.log)
	}
	return nil
}

// Close releases the job networks kept ready (see NetConfig.Warm); those
// of running jobs go with their jobs. Jobs started after Close make
// their own. It is safe to call more than once.
func (r *processRuntime) Close() error {
	return r.pool.Close()
}

func (r *processRuntime) networkIsolation() error {
	switch {
	case r.ns == nil:
		return fmt.Errorf("runtime process: %w: Options.Net is not set", ErrNotIsolated)
	case !r.root:
		return fmt.Errorf("runtime process: %w: the node is not root, so its jobs get a loopback-only network namespace that the node cannot enter to reach their ports", ErrNotIsolated)
	}
	return nil
}

// Start starts s as a sandboxed process (see the package comment).
func (r *processRuntime) Start(ctx context.Context, s Spec) (Process, error) {
	if os.Getenv(shimEnv) != "" {
		return nil, errors.New("runtime: this process was started as a job shim but main (or TestMain) did not call runtime.MaybeShim first")
	}
	prefix := fmt.Sprintf("job %s attempt %d", s.JobID, s.Attempt)
	if err := validate(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if s.Cluster != nil {
		if err := r.clusterSupport(); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", prefix, ErrInvalidSpec, err)
		}
	}
	log := r.log.With("job", short(s.JobID), "attempt", s.Attempt)
	in, err := r.planUser(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	in.devDir = r.devDir
	if err := prepareDirs(s, in); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}

	cfg, notes, err := buildPlan(s, in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	for _, n := range notes {
		log.Debug("sandbox", "note", n)
	}

	userns := !r.root && !r.noUserNS.Load()
	if !r.root && r.noUserNS.Load() && !r.allowBare {
		return nil, fmt.Errorf("%s: %w: user namespaces do not work here, and without one the job could read the node's key and store; run the node as root, enable user namespaces, or allow unsandboxed jobs", prefix, ErrUnavailable)
	}
	return r.launchFallingBack(ctx, &s, cfg, in, userns, prefix, log)
}

// planUser is the planInput for the user s runs as: RunAs (which needs a
// node running as root), or else the node's own user.
func (r *processRuntime) planUser(s Spec) (planInput, error) {
	in := planInput{uid: os.Geteuid(), gid: os.Getegid()}
	in.groups, _ = os.Getgroups()
	if s.RunAs != "" {
		if !r.root {
			return in, fmt.Errorf("run as %q: %w: the node does not run as root", s.RunAs, errors.ErrUnsupported)
		}
		u, err := resolveUser(s.RunAs)
		if err != nil {
			return in, err
		}
		in.runAs, in.uid, in.gid, in.groups = &u, u.uid, u.gid, nil
	} else if r.root {
		r.warnRoot.Do(func() {
			r.log.Warn("jobs run as root (without capabilities): they can read every root-owned file that is not hidden; set a user to run jobs as")
		})
	}
	return in, nil
}

// prepareDirs makes the job's tmp dir in its work dir and, for a job run
// as another user, hands the work and checkpoint dirs to that user.
func prepareDirs(s Spec, in planInput) error {
	if err := os.Mkdir(filepath.Join(s.WorkDir, "tmp"), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("tmp dir: %w", err)
	}
	if in.runAs != nil {
		for _, d := range []string{s.WorkDir, s.CheckpointDir} {
			if err := chownTree(d, *in.runAs); err != nil {
				return err
			}
		}
	}
	return nil
}

// launchFallingBack launches the job, and launches it again without what
// this machine refused (see fallBack).
func (r *processRuntime) launchFallingBack(ctx context.Context, s *Spec, cfg shimConfig, in planInput, userns bool, prefix string, log *slog.Logger) (Process, error) {
	m := launchMode{cgroup: r.cg != nil, userns: userns, devpts: !r.noDevpts.Load()}
	name := cgroupName(s)
	for {
		cfg.DevPTS = m.devpts
		rules, err := devRules(cfg.DevBinds, m.devpts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prefix, err)
		}
		var cg *jobCgroup
		if m.cgroup {
			cg, err = r.cg.create(name, s.Limits, log)
			if err != nil {
				if r.filters.bpf {
					return nil, fmt.Errorf("%s: %w: %w", prefix, ErrUnavailable, noBPFCgroup(err))
				}
				log.Warn("job runs without a cgroup", "err", err)
			}
		}
		devs, err := r.filterDevices(cg, name, rules, log)
		if err != nil {
			if cg != nil {
				_ = cg.remove()
			}
			return nil, fmt.Errorf("%s: %w", prefix, err)
		}
		r.configure(s, &cfg, in, m.userns, cg, log)
		p, err := r.launch(ctx, s, cfg, m.userns, cg, devs, log)
		if err == nil {
			return p, nil
		}
		if m, err = r.fallBack(ctx, err, m, cg != nil, prefix, log); err != nil {
			return nil, err
		}
	}
}

// filterDevices puts the device filters on one launch of a job: the BPF
// program on its cgroup v2 cg (which it has whenever r.filters.bpf: the
// launch is refused otherwise) and a cgroup v1 devices cgroup of its own,
// which the shim is moved into before it reads its config. On failure
// nothing of it is left.
func (r *processRuntime) filterDevices(cg *jobCgroup, name string, rules []devRule, log *slog.Logger) (*v1Devices, error) {
	if r.filters.bpf {
		if cg == nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, noBPFCgroup(errors.New("no cgroup v2")))
		}
		if err := attachDeviceProgram(cg.dir, rules); err != nil {
			return nil, err
		}
	}
	var devs *v1Devices
	if r.filters.v1 != "" {
		var err error
		if devs, err = createV1Devices(r.filters.v1, name, rules, log); err != nil {
			return nil, err
		}
	}
	return devs, nil
}

// noBPFCgroup is why a job that would have no cgroup v2 cgroup (for err)
// is refused on a node whose jobs get the BPF device filter: the filter
// lives on that cgroup, and a job must never run without a filter New
// found.
func noBPFCgroup(err error) error {
	return fmt.Errorf("the job's device filter (cgroup v2 BPF) needs a cgroup of its own, and it has none: %w", err)
}

// launchMode is what a launch tries to start the job in.
type launchMode struct {
	cgroup bool // a cgroup of its own
	userns bool // a user namespace
	devpts bool // a devpts of its own on /dev/pts
}

// fallBack decides, after a launch in m failed with err, what to launch
// in next: without the cgroup when the shim could not start in the one it
// had (inCgroup; never where jobs get the BPF device filter, which lives
// on that cgroup), without a user namespace (only where unsandboxed jobs
// are allowed) when the kernel refused one, without /dev/pts (never with
// the host's) when it refused a devpts of the job's own, which it logs
// once: later jobs start without at once. Otherwise it returns the error
// to give up with.
func (r *processRuntime) fallBack(ctx context.Context, err error, m launchMode, inCgroup bool, prefix string, log *slog.Logger) (launchMode, error) {
	var se *shimError
	switch {
	case ctx.Err() != nil:
		return m, fmt.Errorf("%s: %w", prefix, err)
	case inCgroup && errors.As(err, &se) && se.stage == "start" && r.filters.bpf:
		return m, fmt.Errorf("%s: %w: %w", prefix, ErrUnavailable, noBPFCgroup(err))
	case inCgroup && errors.As(err, &se) && se.stage == "start":
		log.Warn("cannot start the job in its cgroup; starting it without", "err", err)
		m.cgroup = false
	case m.devpts && errors.As(err, &se) && se.stage == stageDevpts:
		if r.noDevpts.CompareAndSwap(false, true) {
			r.log.Warn("jobs get no /dev/pts (no terminals): the kernel refused them a devpts of their own, and the host's is never given", "err", err)
		}
		m.devpts = false
	case m.userns && errors.As(err, &se) && (se.stage == stageNamespace || se.stage == "start" && usernsRefused(err)):
		r.noUserNS.Store(true)
		if !r.allowBare {
			return m, fmt.Errorf("%s: %w: user namespaces do not work here (%v), and without one the job could read the node's key and store; run the node as root, enable user namespaces, or allow unsandboxed jobs", prefix, ErrUnavailable, err)
		}
		log.Warn("user namespaces do not work here: jobs run WITHOUT a mount namespace, so hidden paths are readable and the filesystem is writable for them", "err", err)
		m.userns = false
	default:
		return m, fmt.Errorf("%s: %w", prefix, err)
	}
	return m, nil
}

// configure sets the parts of cfg that depend on one launch: the rlimits
// (memory is left to a cgroup whose memory.max bounds it) and the mount
// and PID namespaces.
func (r *processRuntime) configure(s *Spec, cfg *shimConfig, in planInput, userns bool, cg *jobCgroup, log *slog.Logger) {
	in.memoryByCgroup = cg != nil && cg.memory
	var notes []string
	cfg.Rlimits, notes = rlimits(*s, in, nil)
	for _, n := range notes {
		log.Info("sandbox", "note", n)
	}
	cfg.Namespace = r.root || userns
	// A PID namespace goes with the mount namespace: the job sees only
	// its own processes, and when its init (the shim) dies the kernel
	// kills every process the job started, setsid or not.
	cfg.PIDNamespace = cfg.Namespace
	cfg.NetNamespace = r.ns != nil && cfg.Namespace
	cfg.UTSNamespace = cfg.NetNamespace && cfg.Hostname != ""
	if cfg.NetNamespace {
		cfg.ResolvConf = r.resolv
	} else if r.ns != nil {
		log.Warn("job runs without a namespace: it shares the node's network")
	}
	if !cfg.PIDNamespace && cg == nil {
		log.Warn("job runs without a PID namespace or a cgroup: processes that leave its process group (setsid) survive its end")
	}
}

// usernsRefused reports whether a failed clone looks like the kernel
// refusing a user namespace, rather than, say, running out of processes.
func usernsRefused(err error) bool {
	for _, e := range []error{unix.EPERM, unix.EACCES, unix.EINVAL, unix.ENOSPC, unix.EUSERS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// shimError is a failure to start the shim (stage "start") or one the
// shim reported.
type shimError struct {
	stage string
	err   error
}

func (e *shimError) Error() string {
	if e.stage == "start" {
		return e.err.Error()
	}
	return fmt.Sprintf("sandbox %s: %v", e.stage, e.err)
}

func (e *shimError) Unwrap() error { return e.err }

// launch starts one shim and waits until it has exec'd the job (or
// failed). On failure everything it started is gone, cg included.
func (r *processRuntime) launch(ctx context.Context, s *Spec, cfg shimConfig, userns bool, cg *jobCgroup, devs *v1Devices, log *slog.Logger) (*process, error) {
	cfg.NodePID = os.Getpid()
	pp, err := openShimPipes(cfg.PIDNamespace, !sameWriter(s.Stdout, s.Stderr), s.Stdin != nil, s.TTY)
	if err != nil {
		if cg != nil {
			_ = cg.remove()
		}
		_ = devs.remove()
		return nil, fmt.Errorf("pipes: %w", err)
	}
	// On a root node the job's network is made before its shim, which
	// starts in it: one kept ready when there is one.
	var rn *readyNet
	if cfg.NetNamespace && r.jnet != nil {
		if rn = r.pool.take(); rn == nil {
			if rn, err = r.jnet.prepare(ctx); err != nil {
				pp.closeAll()
				if cg != nil {
					_ = cg.remove()
				}
				_ = devs.remove()
				return nil, &shimError{stage: stageNetwork, err: err}
			}
		}
		defer r.pool.refill()
	}
	cmd := shimCmd(pp, shimAttr(cfg, userns, cg, rn != nil))
	done := make(chan struct{})
	if err := startOnLockedThread(cmd, done, r.ns, rn); err != nil {
		pp.closeAll()
		if cg != nil {
			_ = cg.remove()
		}
		_ = devs.remove()
		if rn != nil {
			r.jnet.release(rn)
		}
		return nil, &shimError{stage: "start", err: fmt.Errorf("start shim: %w", err)}
	}
	pp.closeShimEnds() // the child has its copies now

	p := &process{
		log:    log,
		cmd:    cmd,
		pid:    cmd.Process.Pid,
		cg:     cg,
		devs:   devs,
		done:   done,
		result: pp.resR,
		ctl:    pp.ctlW,
	}
	p.copy(pp.outR, s.Stdout)
	if pp.errR != pp.outR {
		p.copy(pp.errR, s.Stderr)
	}
	if pp.tty {
		p.term = pp.outR
	}
	if s.Stdin != nil {
		p.feed(pp.inW, s.Stdin, !pp.tty)
	}
	reports := readShimReports(pp.stR)
	if rn != nil {
		// The job's from now on: released when its shim has been reaped.
		p.nsFD, p.ns, p.link, p.jnet = rn.fd, r.ns, rn.link, r.jnet
	}
	if devs != nil {
		// Before the shim reads its config, so before anything of the
		// job runs.
		if err := devs.add(p.pid); err != nil {
			pp.cfgW.Close()
			_ = unix.Kill(p.pid, unix.SIGKILL)
			go p.wait()
			<-p.done
			return nil, err
		}
	}
	if cfg.NetNamespace {
		// The shim waits for its config: the job's network is ready
		// before the job runs.
		if err := r.attachNet(ctx, p, s.Cluster); err != nil {
			pp.cfgW.Close()
			_ = unix.Kill(p.pid, unix.SIGKILL)
			go p.wait()
			<-p.done
			return nil, &shimError{stage: stageNetwork, err: err}
		}
	}
	go sendShimConfig(pp.cfgW, cfg)
	go p.wait()

	if err := awaitReady(ctx, p, reports, log); err != nil {
		return nil, err
	}
	log.Debug("job started", "pid", p.pid, "namespace", cfg.Namespace, "pidns", cfg.PIDNamespace, "netns", cfg.NetNamespace, "link", p.linkName(), "userns", userns, "cgroup", cg != nil, "run_as", s.RunAs)
	return p, nil
}

// shimPipes are the pipes between the node and one shim. Of each pair
// the node keeps one end and the shim gets the other.
type shimPipes struct {
	cfgR, cfgW *os.File // the shim's config: the shim reads cfgR (configFD)
	stR, stW   *os.File // the shim's status lines: the shim writes stW (statusFD)
	outR, outW *os.File // the job's stdout
	errR, errW *os.File // the job's stderr: the stdout pair where both go to one writer
	// inR is the job's stdin (nil: /dev/null) and inW the node's end of
	// it. With a terminal (tty) outR, errR and inW are its master and
	// outW, errW and inR its slave.
	inR, inW *os.File
	tty      bool
	// The init of a PID namespace reports the job's end on resR and takes
	// pause, resume and stop on ctlW; nil without a PID namespace.
	resR, resW *os.File
	ctlR, ctlW *os.File
	all        []*os.File
}

// openShimPipes opens the pipes of one shim: a stderr pipe of its own
// when separate, a stdin pipe when stdin, a terminal of that size instead
// of the stdio pipes when tty is set, the result and control pipes when
// pidNS. On failure it closes what it opened.
func openShimPipes(pidNS, separate, stdin bool, tty *WinSize) (*shimPipes, error) {
	pp := &shimPipes{}
	pipe := func() (rd, wr *os.File, err error) {
		rd, wr, err = os.Pipe()
		if err == nil {
			pp.all = append(pp.all, rd, wr)
		}
		return rd, wr, err
	}
	var err1, err2, err3, err4, err5, err6 error
	pp.cfgR, pp.cfgW, err1 = pipe()
	pp.stR, pp.stW, err2 = pipe()
	switch {
	case tty != nil:
		pp.outR, pp.outW, err3 = openTerminal(*tty)
		if err3 == nil {
			pp.all = append(pp.all, pp.outR, pp.outW)
			pp.errR, pp.errW, pp.inR, pp.inW, pp.tty = pp.outR, pp.outW, pp.outW, pp.outR, true
		}
	default:
		pp.outR, pp.outW, err3 = pipe()
		pp.errR, pp.errW = pp.outR, pp.outW
		if separate {
			pp.errR, pp.errW, err4 = pipe()
		}
		if stdin && err4 == nil {
			pp.inR, pp.inW, err4 = pipe()
		}
	}
	if pidNS {
		pp.resR, pp.resW, err5 = pipe()
		pp.ctlR, pp.ctlW, err6 = pipe()
	}
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		pp.closeAll()
		return nil, err
	}
	return pp, nil
}

func (pp *shimPipes) closeAll() {
	for _, f := range pp.all {
		f.Close()
	}
}

// closeShimEnds closes the node's copies of the shim's ends, once the
// shim has been started with them.
func (pp *shimPipes) closeShimEnds() {
	pp.cfgR.Close()
	pp.stW.Close()
	pp.outW.Close()
	if pp.errW != pp.outW {
		pp.errW.Close()
	}
	if pp.inR != nil && pp.inR != pp.outW {
		pp.inR.Close()
	}
	if pp.resW != nil {
		pp.resW.Close()
		pp.ctlR.Close()
	}
}

// shimAttr is how the shim is started: in its own process group, killed
// with the node, in the namespaces cfg asks for (a user namespace mapping
// the node's user to root when userns; no new network namespace when
// ready: it starts in one made for it), and in cg when there is one. A
// job on a terminal without a PID namespace leads a session of its own
// instead (whose group id is its pid too), its stdin its controlling
// terminal.
func shimAttr(cfg shimConfig, userns bool, cg *jobCgroup, ready bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Setpgid:   true,            // Stop and Pause reach the whole tree
		Pdeathsig: syscall.SIGKILL, // no node, no metering: no job
	}
	if cfg.TTY && !cfg.PIDNamespace {
		attr.Setpgid, attr.Setsid, attr.Setctty, attr.Ctty = false, true, true, 0
	}
	if cfg.Namespace {
		attr.Cloneflags |= syscall.CLONE_NEWNS
	}
	if cfg.PIDNamespace {
		attr.Cloneflags |= syscall.CLONE_NEWPID
	}
	if cfg.NetNamespace && !ready {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if cfg.UTSNamespace {
		attr.Cloneflags |= syscall.CLONE_NEWUTS
	}
	if userns {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	if cg != nil {
		attr.UseCgroupFD = true
		attr.CgroupFD = int(cg.dir.Fd())
	}
	return attr
}

// shimCmd is the command that runs this binary as the shim, with the
// shim's ends of pp.
func shimCmd(pp *shimPipes, attr *syscall.SysProcAttr) *exec.Cmd {
	extra := []*os.File{pp.cfgR, pp.stW} // configFD, statusFD
	if pp.resW != nil {
		extra = append(extra, pp.resW, pp.ctlR) // resultFD, controlFD
	}
	return &exec.Cmd{
		Path:        "/proc/self/exe", // this very binary, even if replaced on disk
		Args:        []string{"gpumesh-job-shim"},
		Env:         []string{shimEnv + "=" + shimEnvValue},
		Stdin:       pp.inR, // nil: /dev/null
		Stdout:      pp.outW,
		Stderr:      pp.errW,
		ExtraFiles:  extra,
		SysProcAttr: attr,
	}
}

// sendShimConfig writes cfg to the shim and closes the pipe.
func sendShimConfig(w *os.File, cfg shimConfig) {
	b, _ := json.Marshal(cfg)
	_, _ = w.Write(b)
	w.Close()
}

// shimReport is what a shim said on its status pipe before closing it.
type shimReport struct {
	ready bool
	fatal *shimError
	warns []string
}

// readShimReports reads the shim's status lines until the shim closes
// the pipe, then sends what they said.
func readShimReports(stR *os.File) <-chan shimReport {
	reports := make(chan shimReport, 1)
	go func() {
		var rep shimReport
		sc := bufio.NewScanner(stR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m shimMsg
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			switch {
			case m.Fatal != "":
				rep.fatal = &shimError{stage: m.Stage, err: errors.New(m.Fatal)}
			case m.Warn != "":
				rep.warns = append(rep.warns, m.Warn)
			case m.Ready:
				rep.ready = true
			}
		}
		stR.Close()
		reports <- rep
	}()
	return reports
}

// awaitReady waits for the shim's report and returns nil once it has
// exec'd the job. When the shim failed, or ctx ends first (then it kills
// the shim), it waits for the shim's end and returns why.
func awaitReady(ctx context.Context, p *process, reports <-chan shimReport, log *slog.Logger) error {
	var rep shimReport
	select {
	case rep = <-reports:
	case <-ctx.Done():
		_ = p.live(func() error { return p.signal(unix.SIGKILL) })
		<-p.done
		return fmt.Errorf("start: %w", ctx.Err())
	}
	for _, w := range rep.warns {
		log.Warn("sandbox", "warning", w)
	}
	switch {
	case rep.fatal != nil:
		<-p.done
		return rep.fatal
	case !rep.ready:
		<-p.done
		res := p.Result()
		return fmt.Errorf("the job shim never reported (exit %d %s); does main (or TestMain) call runtime.MaybeShim first?", res.ExitCode, res.Signal)
	}
	return nil
}

// startOnLockedThread starts cmd from an OS thread that lives until done
// is closed. The parent-death signal fires when the *thread* that forked
// the child exits, and the Go runtime may end a thread; this one it
// cannot. With rn the thread enters rn's network namespace for the fork,
// so the child starts there, and comes back to ns's home; a thread that
// cannot come back is never unlocked, and ends with its goroutine.
func startOnLockedThread(cmd *exec.Cmd, done <-chan struct{}, ns *netns, rn *readyNet) error {
	started := make(chan error)
	go func() {
		goruntime.LockOSThread()
		home := true
		defer func() {
			if home {
				goruntime.UnlockOSThread()
			}
		}()
		if rn != nil {
			if err := unix.Setns(int(rn.fd.Fd()), unix.CLONE_NEWNET); err != nil {
				started <- fmt.Errorf("enter the job's network namespace: %w", err)
				return
			}
		}
		err := cmd.Start()
		if rn != nil {
			home = unix.Setns(int(ns.home.Fd()), unix.CLONE_NEWNET) == nil
		}
		started <- err
		if err == nil {
			<-done
		}
	}()
	return <-started
}

// process is a job started by processRuntime.
type process struct {
	log    *slog.Logger
	cmd    *exec.Cmd
	pid    int // also the process group id
	cg     *jobCgroup
	devs   *v1Devices // its cgroup v1 devices cgroup, nil: none
	copies sync.WaitGroup
	pipes  []*os.File
	done   chan struct{}
	// result and ctl are the init's result and control pipes when the job
	// has a PID namespace (nil otherwise): then Pause, Resume and Stop go
	// through the init, which reaches every process of the namespace.
	result *os.File
	ctl    *os.File
	// term is the master of the job's terminal (Spec.TTY), nil without
	// one; it is one of pipes, closed at the end.
	term *os.File
	// With a network namespace: nsFD holds it (closed at the end), ns
	// enters it, link is its veth pair (root only) and jnet releases it.
	nsFD *os.File
	ns   *netns
	link *link
	jnet *jobNetwork
	// With Spec.Cluster: cluster is the node's side of the job's cluster
	// network (closed at the end), clusterAddr the job's address in it.
	cluster     *clusterLink
	clusterAddr netip.Addr

	mu     sync.Mutex
	exited bool   // the leader has exited: the group may no longer be signalled
	res    Result // set before done is closed
}

// copy drains rd into w until EOF.
func (p *process) copy(rd *os.File, w io.Writer) {
	p.pipes = append(p.pipes, rd)
	p.copies.Add(1)
	go func() {
		defer p.copies.Done()
		_, _ = io.Copy(w, rd)
	}()
}

// feed copies in into w, the job's stdin, until either ends; closing w
// then when closeAtEnd (a pipe: the job reads EOF). w is one of pipes or
// closed by wait too, so a job that ended stops the copy at its next
// write.
func (p *process) feed(w *os.File, in io.Reader, closeAtEnd bool) {
	if closeAtEnd {
		p.pipes = append(p.pipes, w)
	}
	go func() {
		_, _ = io.Copy(w, in)
		if closeAtEnd {
			w.Close()
		}
	}()
}

// Resize sets the size of the job's terminal (Terminal).
func (p *process) Resize(ws WinSize) error {
	if p.term == nil {
		return fmt.Errorf("job %d: no terminal", p.pid)
	}
	return p.live(func() error { return setTermSize(p.term, ws) })
}

// wait waits for the leader, kills what it left behind, reaps it, drains
// the output and closes done.
func (p *process) wait() {
	// Wait without reaping: while the leader is a zombie its pid, and so
	// the group id, cannot be reused, and the group can be killed safely.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	p.exited = true
	_ = unix.Kill(-p.pid, unix.SIGKILL) // the job is over: so is everything it started
	if p.cg != nil {
		p.cg.kill()
	}
	p.mu.Unlock()
	werr := p.cmd.Wait()

	drained := make(chan struct{})
	go func() {
		p.copies.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		p.log.Warn("job output still open after the job ended; closing it", "pid", p.pid)
		for _, f := range p.pipes {
			f.Close()
		}
		<-drained
	}
	for _, f := range p.pipes {
		f.Close()
	}

	p.releaseNet()
	res := resultOf(p.cmd.ProcessState, werr)
	if p.result != nil {
		p.applyReport(&res)
	}
	if p.cg != nil {
		res.CPUTime = max(res.CPUTime, p.cg.cpuTime())
		if err := p.cg.remove(); err != nil {
			p.log.Warn("job cgroup", "err", err)
		}
	}
	if err := p.devs.remove(); err != nil {
		p.log.Warn("job devices cgroup", "err", err)
	}
	p.log.Debug("job ended", "pid", p.pid, "exit", res.ExitCode, "signal", res.Signal, "cpu", res.CPUTime, "err", res.Err)
	p.mu.Lock()
	p.res = res
	if p.ctl != nil {
		p.ctl.Close()
	}
	p.mu.Unlock()
	close(p.done)
}

// applyReport takes the exit code or signal of the job's main process
// from the init's report. Without one (the init was killed: Stop's
// SIGKILL, or the node's death) the init's own end stands.
func (p *process) applyReport(res *Result) {
	defer p.result.Close()
	b, err := io.ReadAll(io.LimitReader(p.result, 4096))
	if err != nil || len(b) == 0 {
		return
	}
	var r initReport
	if err := json.Unmarshal(b, &r); err != nil {
		p.log.Warn("job init report", "err", err)
		return
	}
	switch {
	case r.Signaled:
		res.ExitCode, res.Signal = -1, unix.Signal(r.Signal).String()
	case r.Exited:
		res.ExitCode, res.Signal = r.Code, ""
	}
}

func (p *process) Pid() int              { return p.pid }
func (p *process) Done() <-chan struct{} { return p.done }

func (p *process) Result() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// live runs fn under p.mu unless the leader has exited: until then its
// pid (the group id) cannot be reused and the cgroup is still there.
func (p *process) live(fn func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return fmt.Errorf("job %d: %w", p.pid, ErrExited)
	}
	return fn()
}

// control asks the init of the job's PID namespace to act on every
// process of the job. Called under p.mu.
func (p *process) control(op byte) error {
	if _, err := p.ctl.Write([]byte{op}); err != nil {
		return fmt.Errorf("job %d: control %c: %w", p.pid, op, err)
	}
	return nil
}

// signal sends sig to the whole group.
func (p *process) signal(sig unix.Signal) error {
	if err := unix.Kill(-p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal job group %d with %v: %w", p.pid, sig, err)
	}
	return nil
}

func (p *process) Pause() error {
	return p.live(func() error {
		var err error
		if p.ctl != nil {
			err = p.control(ctlPause)
		} else {
			err = p.signal(unix.SIGSTOP)
		}
		if p.cg != nil {
			err = errors.Join(err, p.cg.freeze(true))
		}
		return err
	})
}

func (p *process) Resume() error {
	return p.live(func() error {
		var err error
		if p.cg != nil {
			err = p.cg.freeze(false)
		}
		if p.ctl != nil {
			return errors.Join(err, p.control(ctlResume))
		}
		return errors.Join(err, p.signal(unix.SIGCONT))
	})
}

func (p *process) Stop(grace time.Duration) error {
	err := p.live(func() error {
		// A paused job must run to see SIGTERM.
		var err error
		if p.cg != nil {
			err = p.cg.freeze(false)
		}
		if p.ctl != nil {
			return errors.Join(err, p.control(ctlStop))
		}
		err = errors.Join(err, p.signal(unix.SIGTERM))
		return errors.Join(err, p.signal(unix.SIGCONT))
	})
	if errors.Is(err, ErrExited) {
		err = nil
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return err
	case <-t.C:
	}
	kerr := p.live(func() error {
		err := p.signal(unix.SIGKILL)
		if p.cg != nil {
			p.cg.kill()
		}
		return err
	})
	if errors.Is(kerr, ErrExited) {
		kerr = nil
	}
	<-p.done
	return errors.Join(err, kerr)
}

// containerAttr is the SysProcAttr of a docker/podman client.
func containerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// cgroupName names the cgroups of the attempt s: by job, attempt and
// lease (Spec.Lease), so that no two nodes on one machine share one.
func cgroupName(s *Spec) string {
	name := fmt.Sprintf("job-%s-%d", s.JobID, s.Attempt)
	if s.Lease != "" {
		name += "-" + s.Lease[:min(len(s.Lease), 16)]
	}
	return name
}
