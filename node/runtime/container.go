package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Paths of WorkDir and CheckpointDir inside a container.
const (
	containerWork       = "/work"
	containerCheckpoint = "/checkpoint"
)

// containerRuntime runs jobs with the docker or podman client.
type containerRuntime struct {
	name string // "docker" or "podman"
	bin  string
	log  *slog.Logger
	// net gives each container a job network of its own (Options.Net on
	// a root node); nil leaves containers on the engine's network, for
	// the reason noNet says.
	net   *containerNet
	noNet string
	// gpuMode and devDir are Options.GPUMode and Options.DeviceDir.
	gpuMode, devDir string
}

func newContainerRuntime(name string, o Options) (Runtime, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w: %v", name, ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := exec.CommandContext(ctx, bin, "info").Output(); err != nil {
		var msg string
		if ee, ok := err.(*exec.ExitError); ok {
			msg = ": " + trimOutput(ee.Stderr)
		}
		return nil, fmt.Errorf("runtime %s: %w: %s info: %v%s", name, ErrUnavailable, bin, err, msg)
	}
	c := &containerRuntime{name: name, bin: bin, log: o.Log.With("runtime", name), gpuMode: o.GPUMode, devDir: o.DeviceDir}
	if o.Net == nil {
		c.noNet = "Options.Net is not set, so containers get the engine's network"
		return c, nil
	}
	cn, err := newContainerNet(*o.Net, c.log)
	if err != nil {
		c.noNet = fmt.Sprintf("containers get the engine's network: %v", err)
		c.log.Warn("containers get the engine's network, not one of their own", "err", err)
		return c, nil
	}
	c.net = cn
	return c, nil
}

func (c *containerRuntime) Name() string { return c.name }

// Close does nothing: containers' networks are made for each job.
func (c *containerRuntime) Close() error { return nil }

// Start runs s.Image with "<bin> run --rm"; the client is the process.
func (c *containerRuntime) Start(ctx context.Context, s Spec) (Process, error) {
	prefix := fmt.Sprintf("job %s attempt %d", s.JobID, s.Attempt)
	if err := validateContainer(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if err := os.Mkdir(filepath.Join(s.WorkDir, "tmp"), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%s: tmp dir: %w", prefix, err)
	}
	var user string
	if s.RunAs != "" {
		u, err := resolveUser(s.RunAs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prefix, err)
		}
		for _, d := range []string{s.WorkDir, s.CheckpointDir} {
			if err := chownTree(d, u); err != nil {
				return nil, fmt.Errorf("%s: %w", prefix, err)
			}
		}
		user = fmt.Sprintf("%d:%d", u.uid, u.gid)
	}

	// The client's files go in a directory only the node can enter: the
	// environment (not in argv, which every local user can see) and,
	// for docker with a job network, the ID file the client writes, which
	// no other user can so plant or read.
	dir, err := os.MkdirTemp("", "gpumesh-run-*")
	if err != nil {
		return nil, fmt.Errorf("%s: client dir: %w", prefix, err)
	}
	envFile := filepath.Join(dir, "env")
	if err := os.WriteFile(envFile, []byte(strings.Join(containerEnv(c.name, c.gpuMode, s), "\n")+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: env file: %w", prefix, err)
	}

	// podman's container joins a namespace made and linked now; docker's
	// starts with none, and is linked once its process exists. docker
	// writes the container's ID to cidFile once it made it, so that the
	// node links that container and no other of the same name.
	var jn *jobNet
	var netArgs []string
	var cidFile string
	if c.net != nil {
		if c.name == "podman" {
			if jn, err = c.net.prepare(ctx); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("%s: %w", prefix, err)
			}
		} else {
			cidFile = filepath.Join(dir, "cid")
		}
		netArgs = c.net.args(c.name, jn)
		if cidFile != "" {
			netArgs = append(netArgs, "--cidfile", cidFile)
		}
	}

	name := containerName(s)
	cmd := exec.Command(c.bin, containerArgs(c.name, s, name, envFile, user, gpuArgs(c.name, c.gpuMode, c.devDir, s), netArgs)...)
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	cmd.SysProcAttr = containerAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		jn.release()
		return nil, fmt.Errorf("%s: start %s: %w", prefix, c.bin, err)
	}
	p := &containerProc{rt: c, name: name, cmd: cmd, dir: dir, cidFile: cidFile, done: make(chan struct{}), net: jn}
	go p.wait()
	if c.net != nil && jn == nil {
		if err := p.adoptNet(ctx); err != nil {
			_ = p.Stop(0)
			return nil, fmt.Errorf("%s: %w", prefix, err)
		}
	}
	c.log.Debug("job started", "job", short(s.JobID), "attempt", s.Attempt, "container", name, "image", s.Image, "client_pid", cmd.Process.Pid)
	return p, nil
}

// validateContainer is validate plus what the client's flags and env
// file cannot carry.
func validateContainer(s *Spec) error {
	if err := validate(s); err != nil {
		return err
	}
	if s.Cluster != nil {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, clusterProcessOnly)
	}
	if s.Image == "" {
		return fmt.Errorf("%w: no image", ErrInvalidSpec)
	}
	if s.Stdin != nil || s.TTY != nil {
		return fmt.Errorf("%w: standard input and terminals are for the process runtime only", ErrInvalidSpec)
	}
	for _, d := range []string{s.WorkDir, s.CheckpointDir} {
		if strings.ContainsAny(d, ":,\n") {
			return fmt.Errorf("%w: %s: a container volume path cannot contain ':' or ','", ErrInvalidSpec, d)
		}
	}
	for i, kv := range s.Env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.ContainsAny(kv, "\n\r") || strings.ContainsAny(k, " \t#") {
			return fmt.Errorf("%w: env[%d] %.40s: a container env entry cannot hold a newline, or blanks or '#' in its name", ErrInvalidSpec, i, k)
		}
	}
	return nil
}

// containerName is the container's name: gpumesh-<id>-<attempt>.
func containerName(s Spec) string {
	return fmt.Sprintf("gpumesh-%s-%d", strings.ToLower(s.JobID), s.Attempt)
}

// containerEnv is the job's environment in the container, for the
// engine runtime ("docker", "podman") in GPU mode mode. The image's PATH
// stays unless the renter sets one. CUDA_VISIBLE_DEVICES is set to GPU
// UUIDs (which mean the same inside); plain indices are left to the
// container, which renumbers its GPUs from 0.
//
// The NVIDIA container toolkit gives a container the GPUs its
// environment names, the image's ENV included (every nvidia/cuda image
// has NVIDIA_VISIBLE_DEVICES=all), wherever the toolkit runs: as docker's
// default runtime, or as a hook. So the env file always sets
// NVIDIA_VISIBLE_DEVICES, over the image's: to the devices of docker's
// --gpus (which appends the same value to the container's environment
// itself), else "void", which the toolkit takes as no GPU at all: podman's
// GPUs come by CDI, whose NVIDIA spec (nvidia-ctk cdi generate) also sets
// "void", and GPUMode "devices" gives them by --device. It also empties
// toolkitDeviceEnv.
func containerEnv(runtime, mode string, s Spec) []string {
	fixed := [][2]string{{"HOME", containerWork}}
	switch {
	case len(s.GPUs) == 0:
		fixed = append(fixed, [2]string{"CUDA_VISIBLE_DEVICES", ""})
	case allUUIDs(s.GPUs):
		fixed = append(fixed, [2]string{"CUDA_VISIBLE_DEVICES", strings.Join(s.GPUs, ",")})
	}
	visible := "void"
	if devices := toolkitDevices(mode, s); runtime == "docker" && len(devices) > 0 {
		visible = strings.Join(devices, ",")
	}
	fixed = append(fixed, [2]string{nvidiaVisibleDevices, visible})
	for _, k := range toolkitDeviceEnv {
		fixed = append(fixed, [2]string{k, ""})
	}
	fixed = append(fixed,
		[2]string{"CHECKPOINT_DIR", containerCheckpoint},
		[2]string{"JOB_ATTEMPT", strconv.Itoa(s.Attempt)},
		[2]string{"GPUMESH_JOB_ID", s.JobID})
	fixed = append(fixed, outputEnv(containerWork, s)...)
	return jobEnv([][2]string{{"TMPDIR", containerWork + "/tmp"}}, s.Env, fixed)
}

// nvidiaVisibleDevices is the variable by which the NVIDIA container
// toolkit picks a container's GPUs.
const nvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

// toolkitDeviceEnv are the NVIDIA container toolkit's other variables
// that add device nodes to a container (MIG configuration and monitoring,
// IMEX channels, GPUDirect Storage, MOFED, NVSwitch, GDRCopy): the node
// sets each empty, which the toolkit takes as none.
var toolkitDeviceEnv = []string{
	"NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", "NVIDIA_IMEX_CHANNELS",
	"NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_NVSWITCH", "NVIDIA_GDRCOPY",
}

func allUUIDs(gpus []string) bool {
	for _, g := range gpus {
		if !strings.HasPrefix(g, "GPU-") && !strings.HasPrefix(g, "MIG-") {
			return false
		}
	}
	return true
}

// containerArgs is the client's argv after the binary; gpus are the
// GPU flags (gpuArgs), network the engine's network flags (none: its
// default network).
func containerArgs(runtime string, s Spec, name, envFile, user string, gpus, network []string) []string {
	a := []string{"run", "--rm", "--name", name,
		"--label", "gpumesh.job=" + s.JobID, "--label", "gpumesh.attempt=" + strconv.Itoa(s.Attempt),
		"--workdir", containerWork,
		"--volume", s.WorkDir + ":" + containerWork,
		"--volume", s.CheckpointDir + ":" + containerCheckpoint,
		"--env-file", envFile,
		"--security-opt", "no-new-privileges", "--cap-drop", "ALL",
	}
	if user != "" {
		a = append(a, "--user", user)
	}
	l := s.Limits
	if l.MemoryBytes > 0 {
		m := strconv.FormatInt(l.MemoryBytes, 10)
		a = append(a, "--memory", m, "--memory-swap", m)
	}
	if l.Procs > 0 {
		a = append(a, "--pids-limit", strconv.FormatInt(l.Procs, 10))
	}
	if l.CPUSeconds > 0 {
		a = append(a, "--ulimit", fmt.Sprintf("cpu=%d:%d", l.CPUSeconds, l.CPUSeconds+1))
	}
	if l.FileBytes > 0 {
		a = append(a, "--ulimit", fmt.Sprintf("fsize=%d:%d", l.FileBytes, l.FileBytes))
	}
	n := l.OpenFiles
	if n == 0 {
		n = 1024
	}
	a = append(a, "--ulimit", fmt.Sprintf("nofile=%d:%d", n, n))
	a = append(a, gpus...)
	a = append(a, network...)
	a = append(a, s.Image)
	return append(a, s.Argv...)
}

// gpuArgs are the client's flags that give the container the GPUs of s:
// in GPUMode "devices" a --device of each of s.GPUDevices and of the
// control nodes devDir has (deviceArgs); else the NVIDIA container
// toolkit's, by UUID: docker's --gpus, podman's CDI devices. A simulated
// GPU is no device: its container gets none.
func gpuArgs(runtime, mode, devDir string, s Spec) []string {
	if mode == GPUModeDevices {
		return deviceArgs(s, devDir)
	}
	devices := toolkitDevices(mode, s)
	if len(devices) == 0 {
		return nil
	}
	var a []string
	if runtime == "podman" {
		for _, g := range devices {
			a = append(a, "--device", "nvidia.com/gpu="+g) // CDI
		}
		return a
	}
	// The value is CSV: quote it so the commas stay inside.
	return append(a, "--gpus", `"device=`+strings.Join(devices, ",")+`"`)
}

// toolkitDevices are the GPUs of s that the NVIDIA container toolkit
// gives the container in GPU mode mode: none in GPUModeDevices, else
// every GPU that is not simulated.
func toolkitDevices(mode string, s Spec) []string {
	if mode == GPUModeDevices {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(s.GPUs), simulatedGPU)
}

// simulatedGPU reports whether uuid names a simulated GPU (the
// "GPU-sim-..." UUIDs of verify/inventory, and of testnet/sim).
func simulatedGPU(uuid string) bool { return strings.HasPrefix(uuid, "GPU-sim-") }

// containerProc is a job run by the docker or podman client.
type containerProc struct {
	rt      *containerRuntime
	name    string
	cmd     *exec.Cmd
	dir     string // the client's files (env, cid), removed when it exits
	cidFile string // where docker writes the container's ID ("": not asked)
	done    chan struct{}

	mu    sync.Mutex
	res   Result
	ended bool    // the client has exited
	net   *jobNet // the job network, released when the client exits
}

func (p *containerProc) wait() {
	err := p.cmd.Wait()
	// The client exits with the container's code (125 for its own errors,
	// 137 when the container was killed ...); CPU time and memory are the
	// client's, not the container's.
	res := resultOf(p.cmd.ProcessState, err)
	os.RemoveAll(p.dir)
	p.mu.Lock()
	p.res, p.ended = res, true
	jn := p.net
	p.mu.Unlock()
	jn.release()
	close(p.done)
}

func (p *containerProc) Pid() int              { return p.cmd.Process.Pid }
func (p *containerProc) Done() <-chan struct{} { return p.done }

func (p *containerProc) Result() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// ctl runs "<bin> <args...>" with a timeout.
func (p *containerProc) ctl(timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.rt.bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", p.rt.name, strings.Join(args, " "), err, trimOutput(out))
	}
	return nil
}

func (p *containerProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *containerProc) Pause() error {
	if p.exited() {
		return fmt.Errorf("pause %s: %w", p.name, ErrExited)
	}
	return p.ctl(time.Minute, "pause", p.name)
}

func (p *containerProc) Resume() error {
	if p.exited() {
		return fmt.Errorf("resume %s: %w", p.name, ErrExited)
	}
	return p.ctl(time.Minute, "unpause", p.name)
}

// Stop is "<bin> stop -t grace", then kill (container and client) if the
// client has not exited 30 seconds later.
func (p *containerProc) Stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	secs := int(math.Ceil(grace.Seconds()))
	// A paused container does not stop; unpausing one that is not paused
	// fails harmlessly.
	_ = p.ctl(time.Minute, "unpause", p.name)
	err := p.ctl(grace+time.Minute, "stop", "-t", strconv.Itoa(secs), p.name)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
	}
	kerr := p.ctl(time.Minute, "kill", p.name)
	_ = KillGroup(p.cmd.Process.Pid)
	<-p.done
	if err != nil && kerr != nil {
		return errors.Join(err, kerr)
	}
	return nil
}

// trimOutput shortens a command's output for an error message.
func trimOutput(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:] // the last line says what went wrong
	}
	if len(b) > 400 {
		b = append(b[:400:400], "..."...)
	}
	return string(b)
}
