//go:build linux

package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/runtime/runtimetest"
)

// nvidiaMajor is the NVIDIA driver's character device major. No driver
// backs it on the test machine: a node of it that passes every permission
// check fails to open with ENXIO, which is how the tests see an open
// reach the driver.
const nvidiaMajor = 195

// Error texts of the shells the probes run in (dash, bash, busybox ash),
// compared without case: ENXIO, ENOENT ("No such file" in dash, "no such
// file" in busybox, "... or directory" elsewhere), EPERM, from the
// device filter, and EACCES, from a nodev mount.
const (
	reachedDriver    = "no such device or address"
	noSuchFile       = "no such file"
	notPermitted     = "operation not permitted"
	permissionDenied = "permission denied"
)

// fakeGPUs makes, in a fresh directory that jobs can reach by path (see
// plantDir), four NVIDIA-like GPU nodes nvidia0..nvidia3 (195:0..3) and
// nvidiactl (195:255), mode 0666 as the driver makes them, and returns
// the directory: the host's /dev of the tests. It needs root (mknod).
func fakeGPUs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root, to make device nodes")
	}
	dir := plantDir(t)
	nodes := map[string]uint32{"nvidia0": 0, "nvidia1": 1, "nvidia2": 2, "nvidia3": 3, "nvidiactl": 255}
	for name, minor := range nodes {
		mknodChar(t, filepath.Join(dir, name), nvidiaMajor, minor)
	}
	return dir
}

// mknodChar makes the character device major:minor at p, mode 0666.
func mknodChar(t *testing.T, p string, major, minor uint32) {
	t.Helper()
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatalf("mknod %s: %v", p, err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
}

// openProbe is a shell script that tries to open each of its arguments
// for reading (a shell's read-write open would create a missing file) and
// prints "<path>: opened" or "<path>:
// <error>" for each. CUDA_VISIBLE_DEVICES is unset first: it must not
// matter.
const openProbe = `unset CUDA_VISIBLE_DEVICES
for d in "$@"; do
	if err=$( { exec 3<"$d"; } 2>&1 ); then echo "$d: opened"; else echo "$d: $err"; fi
done
`

// probeLines maps each probed path to what the probe printed for it.
func probeLines(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if p, rest, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(p, "/") {
			got[p] = strings.ToLower(rest)
		}
	}
	return got
}

// wantOpens checks that the probe reached the driver for each of allowed
// and failed with one of deny (and never reached the driver) for each of
// denied.
func wantOpens(t *testing.T, out string, allowed, denied []string, deny ...string) {
	t.Helper()
	got := probeLines(out)
	for _, p := range allowed {
		if !strings.Contains(got[p], reachedDriver) {
			t.Errorf("open %s: %q, want %q (it passes every check and reaches the absent driver)", p, got[p], reachedDriver)
		}
	}
	for _, p := range denied {
		ok := false
		for _, d := range deny {
			ok = ok || strings.Contains(got[p], d)
		}
		if !ok {
			t.Errorf("open %s: %q, want one of %q", p, got[p], deny)
		}
	}
}

// writableCgroup2Root is a cgroup2 hierarchy the process runtime can run
// jobs in ("" when there is none): the host's, or the hybrid layout's
// /sys/fs/cgroup/unified.
func writableCgroup2Root() string {
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st syscall.Statfs_t
		if syscall.Statfs(r, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC && syscall.Access(r, unix.W_OK) == nil {
			if _, err := os.Stat(filepath.Join(r, "cgroup.controllers")); err == nil {
				return r
			}
		}
	}
	return ""
}

// cgroupMounts are the mount points of the host's cgroup and cgroup2
// hierarchies, shell-quoted and blank-separated.
func cgroupMounts() string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(pre); ok && len(f) > 4 && (strings.HasPrefix(post, "cgroup ") || strings.HasPrefix(post, "cgroup2 ")) && !strings.ContainsAny(f[4], `'\`) {
			out = append(out, "'"+f[4]+"'")
		}
	}
	return strings.Join(out, " ")
}

// hasDevicesV1 reports whether the cgroup v1 devices controller is
// mounted.
func hasDevicesV1() bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if _, post, ok := strings.Cut(line, " - "); ok && strings.HasPrefix(post, "cgroup ") && slices.Contains(strings.Split(strings.Fields(post)[2], ","), "devices") {
			return true
		}
	}
	return false
}

// filterCase is one way to run the process runtime's device filter.
type filterCase struct {
	name string
	opts runtime.Options
}

// filterCases are the filter set-ups this machine allows: every filter
// there is, the cgroup v2 BPF program alone, the cgroup v1 devices
// controller alone. Where one is missing it says so.
func filterCases(t *testing.T) []filterCase {
	t.Helper()
	cg2 := writableCgroup2Root()
	cases := []filterCase{{"all", runtime.Options{CgroupRoot: cg2}}}
	if cg2 != "" {
		cases = append(cases, filterCase{"bpf", runtime.Options{CgroupRoot: cg2, DeviceFilter: runtime.DeviceFilterBPF}})
	} else {
		t.Log("no writable cgroup2 hierarchy: the cgroup v2 BPF device filter is not tested here")
	}
	if hasDevicesV1() {
		cases = append(cases, filterCase{"v1", runtime.Options{DeviceFilter: runtime.DeviceFilterV1}})
	} else {
		t.Log("no cgroup v1 devices controller: it is not tested here")
	}
	return cases
}

// TestGPUConfinement runs a job leased GPU 2 of four fake NVIDIA GPUs
// with each device filter set-up, and with the filter off (the private
// /dev alone): whatever its environment says, /dev/nvidia2 and
// /dev/nvidiactl pass every permission check (ENXIO: they reach the
// absent driver), nvidia0, 1 and 3 are not in its /dev, and its /dev
// holds nothing else of the host's, and it (uid 0) cannot move itself to
// another cgroup. The fake nodes' own directory stands
// for the host's /dev, which the job reaches by path: there none opens
// (EACCES), nvidia2 included, whatever the filter: the job's mounts are
// nodev but for its /dev.
func TestGPUConfinement(t *testing.T) {
	gpus := fakeGPUs(t)
	host := func(n string) string { return filepath.Join(gpus, n) }
	cases := append(filterCases(t), filterCase{"filter off", runtime.Options{DeviceFilter: runtime.DeviceFilterOff}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := probeGPU2(t, tc.opts, gpus, nil, openProbe+`
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
echo "DEV $(ls -A /dev | tr '\n' ' ')"
echo x >/dev/null && echo NULL-OK
{ exec 4<>/dev/ptmx; } && echo PTMX-OK
for c in `+cgroupMounts()+`; do if (echo $$ >"$c/cgroup.procs") 2>/dev/null; then echo "LEFT-CGROUP $c"; fi; done
`, "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl",
				host("nvidia0"), host("nvidia1"), host("nvidia2"), host("nvidia3"))
			wantOpens(t, got, []string{"/dev/nvidia2", "/dev/nvidiactl"}, []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"}, noSuchFile)
			wantOpens(t, got, nil, []string{host("nvidia0"), host("nvidia1"), host("nvidia2"), host("nvidia3")}, permissionDenied)
			if strings.Contains(got, "LEFT-CGROUP") {
				t.Error("the job (uid 0) moved itself to another cgroup: a cgroup mount is writable in its view")
			}
			for _, want := range []string{"CUDA_VISIBLE_DEVICES=unset\n", "NULL-OK\n", "PTMX-OK\n"} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			want := []string{"fd", "full", "null", "nvidia2", "nvidiactl", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "urandom", "zero"}
			if _, err := os.Stat("/dev/tty"); err == nil {
				want = append(want, "tty")
			}
			slices.Sort(want)
			var dev []string
			for _, line := range strings.Split(got, "\n") {
				if rest, ok := strings.CutPrefix(line, "DEV "); ok {
					dev = strings.Fields(rest)
				}
			}
			slices.Sort(dev)
			if !slices.Equal(dev, want) {
				t.Errorf("the job's /dev holds %q, want %q", dev, want)
			}
		})
	}
}

// TestDeviceFilterPlantedNode gives a job leased GPU 2 three nodes of
// GPU 0 (195:0) that it reaches by path, none of them bound by name in
// its /dev:
//   - planted in a directory on the host's root file system;
//   - on a tmpfs the test mounts (another mount, that allows devices on
//     the host, as a second devtmpfs or a chroot's /dev would);
//   - in a directory below nvidia-caps, which the job's /dev binds whole:
//     a node the sandbox missed, where devices open.
//
// The first two are on mounts the shim made nodev: they fail with EACCES
// whatever the filter, filter off included. The third: each device filter
// refuses it (EPERM), and with the filter off it reaches the driver
// (ENXIO), so the filter is what refuses it.
func TestDeviceFilterPlantedNode(t *testing.T) {
	gpus := fakeGPUs(t)
	plant := plantDir(t)
	planted := filepath.Join(plant, "gpu0")
	mknodChar(t, planted, nvidiaMajor, 0)
	mnt := filepath.Join(plant, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("gpumesh-test-dev", mnt, "tmpfs", 0, "mode=0755"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	onMount := filepath.Join(mnt, "nvidia0")
	mknodChar(t, onMount, nvidiaMajor, 0)
	if err := os.MkdirAll(filepath.Join(gpus, "nvidia-caps", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mknodChar(t, filepath.Join(gpus, "nvidia-caps", "sub", "gpu0"), nvidiaMajor, 0)
	missed := "/dev/nvidia-caps/sub/gpu0"
	cases := append(filterCases(t), filterCase{"filter off", runtime.Options{DeviceFilter: runtime.DeviceFilterOff}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := probeGPU2(t, tc.opts, gpus, nil, openProbe, planted, onMount, missed, "/dev/nvidia2")
			wantOpens(t, got, []string{"/dev/nvidia2"}, []string{planted, onMount}, permissionDenied)
			if tc.opts.DeviceFilter == runtime.DeviceFilterOff {
				wantOpens(t, got, []string{missed}, nil)
			} else {
				wantOpens(t, got, nil, []string{missed}, notPermitted)
			}
		})
	}
}

// TestWithoutDevpts runs a job leased GPU 2 as the process runtime does
// once the kernel has refused one a devpts of its own: its /dev has no
// pts and no ptmx (the host's are never bound in), and each device
// filter refuses every pts (136:*): a node 136:0 below nvidia-caps, which
// the job's /dev binds whole, does not open (EPERM).
func TestWithoutDevpts(t *testing.T) {
	gpus := fakeGPUs(t)
	if err := os.MkdirAll(filepath.Join(gpus, "nvidia-caps", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mknodChar(t, filepath.Join(gpus, "nvidia-caps", "sub", "pts0"), 136, 0)
	for _, tc := range filterCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got := probeGPU2(t, tc.opts, gpus, runtime.WithoutDevpts, openProbe+`echo "DEV $(ls -A /dev | tr '\n' ' ')"`,
				"/dev/nvidia2", "/dev/ptmx", "/dev/pts/ptmx", "/dev/nvidia-caps/sub/pts0")
			wantOpens(t, got, []string{"/dev/nvidia2"}, []string{"/dev/ptmx", "/dev/pts/ptmx"}, noSuchFile)
			wantOpens(t, got, nil, []string{"/dev/nvidia-caps/sub/pts0"}, notPermitted)
			for _, line := range strings.Split(got, "\n") {
				if rest, ok := strings.CutPrefix(line, "DEV "); ok {
					if dev := strings.Fields(rest); slices.Contains(dev, "pts") || slices.Contains(dev, "ptmx") {
						t.Errorf("the job's /dev holds %q, want no pts or ptmx", dev)
					}
				}
			}
		})
	}
}

// plantDir is a fresh directory a job can reach by path (not under /tmp,
// of which jobs have a private one, nor a job's own dirs, which are
// nodev) on a file system that is not nodev.
func plantDir(t *testing.T) string {
	t.Helper()
	wd, _ := os.Getwd()
	for _, base := range []string{"/var/tmp", wd} {
		var st unix.Statfs_t
		if unix.Statfs(base, &st) != nil || st.Flags&unix.ST_NODEV != 0 || strings.HasPrefix(base, "/tmp") {
			continue
		}
		dir, err := os.MkdirTemp(base, "gpumesh-plant-")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Skip("no directory outside /tmp on a file system that allows device nodes")
	return ""
}

// TestContainerGPUConfinement runs the GPU-2 job of TestGPUConfinement
// in docker and podman with GPUMode "devices" (no NVIDIA toolkit here):
// the container opens /dev/nvidia2 and /dev/nvidiactl past every check,
// finds no nvidia0, 1 or 3, and none of the host's other nodes.
func TestContainerGPUConfinement(t *testing.T) {
	gpus := fakeGPUs(t)
	for _, name := range []string{"docker", "podman"} {
		t.Run(name, func(t *testing.T) {
			image := runtimetest.Engine(t, name)
			rt, err := runtime.New(name, runtime.Options{Log: testLogger(t), GPUMode: runtime.GPUModeDevices, DeviceDir: gpus})
			if err != nil {
				t.Fatalf("New(%q): %v", name, err)
			}
			var out syncBuffer
			s := spec(t, &out, "sh", "-c", openProbe+`echo "DEV $(ls -A /dev | tr '\n' ' ')"`,
				"sh", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl")
			s.Image = image
			s.JobID = randomJobID()
			s.GPUs = []string{"GPU-00000000-0000-0000-0000-000000000002"}
			s.GPUDevices = []string{filepath.Join(gpus, "nvidia2")}
			res := runJob(t, rt, s)
			got := out.String()
			t.Logf("container output:\n%s", got)
			if res.ExitCode != 0 {
				t.Errorf("result %+v, want exit 0", res)
			}
			wantOpens(t, got, []string{"/dev/nvidia2", "/dev/nvidiactl"}, []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"}, noSuchFile)
			var dev []string
			for _, line := range strings.Split(got, "\n") {
				if rest, ok := strings.CutPrefix(line, "DEV "); ok {
					dev = strings.Fields(rest)
				}
			}
			if len(dev) == 0 {
				t.Fatal("the container did not list its /dev")
			}
			for _, host := range []string{"vda", "sda", "nvme0n1", "kmsg", "mem", "nvidia0"} {
				if slices.Contains(dev, host) {
					t.Errorf("the container's /dev holds the host's %s: %q", host, dev)
				}
			}
		})
	}
}

// randomJobID is a job ID no other test run uses (it names cgroups).
func randomJobID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestDeviceOptionsChecked: New refuses a device filter, GPU mode or
// device dir it does not know, for every runtime.
func TestDeviceOptionsChecked(t *testing.T) {
	for _, o := range []runtime.Options{{DeviceFilter: "none"}, {GPUMode: "cdi"}, {DeviceDir: "dev"}} {
		for _, name := range []string{"process", "docker", "podman"} {
			if _, err := runtime.New(name, o); err == nil || errors.Is(err, runtime.ErrUnavailable) {
				t.Errorf("New(%q, %+v) = %v, want it refused", name, o, err)
			}
		}
	}
}

// BenchmarkJobDevices is the cost of a job's devices: a job leased GPU 2
// of the fake GPUs runs "true", start to end, with the private /dev and
// each device filter set-up, and with the filter off.
func BenchmarkJobDevices(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root, to make device nodes")
	}
	dir, err := os.MkdirTemp("/var/tmp", "gpumesh-bench-")
	if err != nil {
		b.Skip(err)
	}
	defer os.RemoveAll(dir)
	if err := unix.Mknod(filepath.Join(dir, "nvidia2"), unix.S_IFCHR|0o666, int(unix.Mkdev(nvidiaMajor, 2))); err != nil {
		b.Fatal(err)
	}
	cg2 := writableCgroup2Root()
	for _, tc := range []filterCase{
		{"off", runtime.Options{DeviceFilter: runtime.DeviceFilterOff}},
		{"bpf", runtime.Options{CgroupRoot: cg2, DeviceFilter: runtime.DeviceFilterBPF}},
		{"v1", runtime.Options{DeviceFilter: runtime.DeviceFilterV1}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := tc.opts
			o.Log, o.DeviceDir = slog.New(slog.DiscardHandler), dir
			rt, err := runtime.New("process", o)
			if err != nil {
				b.Skip(err)
			}
			work := b.TempDir()
			for b.Loop() {
				p, err := rt.Start(context.Background(), runtime.Spec{JobID: randomJobID(), Argv: []string{"true"},
					WorkDir: work, CheckpointDir: work, GPUs: []string{"2"}, GPUDevices: []string{filepath.Join(dir, "nvidia2")}})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Done()
				if res := p.Result(); res.ExitCode != 0 {
					b.Fatalf("result %+v", res)
				}
			}
		})
	}
}

// probeGPU2 runs script (sh -c, with args) as a job leased GPU 2 of the
// fake nodes in gpus, on the process runtime with opts (and prep, when
// set, applied to it), and returns the job's output; a job that does not
// exit 0 fails the test.
func probeGPU2(t *testing.T, opts runtime.Options, gpus string, prep func(runtime.Runtime), script string, args ...string) string {
	t.Helper()
	opts.Log, opts.DeviceDir = testLogger(t), gpus
	rt, err := runtime.New("process", opts)
	if err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(rt)
	}
	var out syncBuffer
	s := spec(t, &out, append([]string{"sh", "-c", script, "sh"}, args...)...)
	s.JobID = randomJobID()
	s.GPUs = []string{"GPU-00000000-0000-0000-0000-000000000002"}
	s.GPUDevices = []string{filepath.Join(gpus, "nvidia2")}
	res := runJob(t, rt, s)
	got := out.String()
	t.Logf("job output:\n%s", got)
	if res.ExitCode != 0 {
		t.Errorf("result %+v, want exit 0", res)
	}
	return got
}
