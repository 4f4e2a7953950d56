package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	bpflink "github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// hostDev is where the shim finds the nodes every job gets (null, zero
// ...), and where it mounts the job's private /dev.
const hostDev = "/dev"

// Character device numbers of a devpts instance: its ptmx and its pts.
const (
	ptmxMajor, ptmxMinor = 5, 2
	ptsMajor             = 136
)

// devRule lets a job read and write one character device, or every
// minor of a major (anyMinor).
type devRule struct {
	major, minor uint32
	anyMinor     bool
}

func (r devRule) String() string {
	if r.anyMinor {
		return fmt.Sprintf("c %d:* rw", r.major)
	}
	return fmt.Sprintf("c %d:%d rw", r.major, r.minor)
}

// jobDevBinds are the nodes of a job's private /dev that come from the
// host: the standard ones this host has, then the GPU nodes.
func jobDevBinds(s Spec, devDir string) []devBind {
	var out []devBind
	for _, n := range standardDevs {
		if p := filepath.Join(hostDev, n); isCharDevice(p) {
			out = append(out, devBind{Src: p, Dst: n})
		}
	}
	return append(out, gpuBinds(s.GPUDevices, devDir)...)
}

// devRules are what a job's device filter allows: the nodes of binds, by
// number as they are now (a node swapped for another after this is
// refused), and with devpts the ptmx and pts of a devpts instance (the
// job's own: a job without one has no pts at all).
func devRules(binds []devBind, devpts bool) ([]devRule, error) {
	var rules []devRule
	if devpts {
		rules = append(rules, devRule{major: ptmxMajor, minor: ptmxMinor}, devRule{major: ptsMajor, anyMinor: true})
	}
	for _, b := range binds {
		nodes := []string{b.Src}
		if b.Dir {
			nodes = capsNodes(b.Src)
		}
		for _, n := range nodes {
			var st unix.Stat_t
			if err := unix.Stat(n, &st); err != nil {
				return nil, fmt.Errorf("device %s: %w", n, err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFCHR {
				return nil, fmt.Errorf("device %s: not a character device", n)
			}
			rules = append(rules, devRule{major: unix.Major(st.Rdev), minor: unix.Minor(st.Rdev)})
		}
	}
	return rules, nil
}

// deviceProgram is a BPF_PROG_TYPE_CGROUP_DEVICE program that allows
// read and write of the character devices of rules and refuses every
// other access (mknod included) to every other device. Its context is
// struct bpf_cgroup_dev_ctx: access_type (type in the low 16 bits,
// access in the high), major, minor.
func deviceProgram(rules []devRule) asm.Instructions {
	const rw = unix.BPF_DEVCG_ACC_READ | unix.BPF_DEVCG_ACC_WRITE
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xFFFF), // R2: type
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),                // R3: access
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word), // R4: major
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word), // R5: minor
	}
	label := func(i int) string { return "rule-" + strconv.Itoa(i) }
	for i, r := range rules {
		next := label(i + 1)
		block := asm.Instructions{
			asm.JNE.Imm(asm.R2, unix.BPF_DEVCG_DEV_CHAR, next),
			// access & rw must be access: nothing but read and write.
			asm.Mov.Reg32(asm.R1, asm.R3),
			asm.And.Imm32(asm.R1, rw),
			asm.JNE.Reg(asm.R1, asm.R3, next),
			asm.JNE.Imm(asm.R4, int32(r.major), next),
		}
		if !r.anyMinor {
			block = append(block, asm.JNE.Imm(asm.R5, int32(r.minor), next))
		}
		block = append(block, asm.Mov.Imm32(asm.R0, 1), asm.Return())
		block[0] = block[0].WithSymbol(label(i))
		insns = append(insns, block...)
	}
	return append(insns, asm.Mov.Imm32(asm.R0, 0).WithSymbol(label(len(rules))), asm.Return())
}

// loadDeviceProgram loads the device program of rules into the kernel.
func loadDeviceProgram(rules []devRule) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "gpumesh_devices",
		Type:         ebpf.CGroupDevice,
		Instructions: deviceProgram(rules),
		License:      "MIT",
	}, ebpf.ProgramOptions{LogDisabled: true})
	if err != nil {
		return nil, fmt.Errorf("load device program: %w", err)
	}
	return prog, nil
}

// attachDeviceProgram attaches the device program of rules to the cgroup
// v2 open as dir. It stays attached as long as the cgroup exists (a
// program attached by BPF_PROG_ATTACH outlives its descriptor); with
// BPF_F_ALLOW_MULTI an ancestor's programs still run too, and each of
// them can refuse.
func attachDeviceProgram(dir *os.File, rules []devRule) error {
	prog, err := loadDeviceProgram(rules)
	if err != nil {
		return err
	}
	defer prog.Close()
	if err := bpflink.RawAttachProgram(bpflink.RawAttachProgramOptions{
		Target:  int(dir.Fd()),
		Program: prog,
		Attach:  ebpf.AttachCGroupDevice,
		Flags:   unix.BPF_F_ALLOW_MULTI,
	}); err != nil {
		return fmt.Errorf("attach device program to %s: %w", dir.Name(), err)
	}
	return nil
}

// deviceFilters are the device filters the process runtime puts on every
// job: the BPF program on its cgroup v2 cgroup, the cgroup v1 devices
// controller, both, or neither.
type deviceFilters struct {
	bpf bool   // on jobs that have a cgroup v2 cgroup
	v1  string // the v1 devices cgroup jobs' cgroups are made in ("": none)
}

// detectDeviceFilters finds the filters of mode (Options.DeviceFilter)
// that this machine has; cg is the runtime's cgroup v2 (nil: none). An
// explicit mode that is not available is an error; for "" the reasons
// each is missing are returned.
func detectDeviceFilters(mode string, cg *cgroupRoot) (f deviceFilters, missing []string, err error) {
	if mode == DeviceFilterOff {
		return f, []string{"Options.DeviceFilter is off"}, nil
	}
	if mode == "" || mode == DeviceFilterBPF {
		why := ""
		if cg == nil {
			why = "cgroup v2 BPF: jobs have no cgroup v2 cgroup"
		} else if prog, err := loadDeviceProgram(nil); err != nil {
			why = fmt.Sprintf("cgroup v2 BPF: %v", err)
		} else {
			prog.Close()
			f.bpf = true
		}
		if why != "" {
			if mode == DeviceFilterBPF {
				return f, nil, fmt.Errorf("%w: device filter %s: %s", ErrUnavailable, mode, why)
			}
			missing = append(missing, why)
		}
	}
	if mode == "" || mode == DeviceFilterV1 {
		dir, why := detectDevicesV1()
		if dir == "" {
			if mode == DeviceFilterV1 {
				return f, nil, fmt.Errorf("%w: device filter %s: %s", ErrUnavailable, mode, why)
			}
			missing = append(missing, "cgroup v1 devices: "+why)
		}
		f.v1 = dir
	}
	return f, missing, nil
}

// any reports whether some filter applies.
func (f deviceFilters) any() bool { return f.bpf || f.v1 != "" }

// detectDevicesV1 returns the node's own cgroup in the cgroup v1 devices
// hierarchy, where jobs' cgroups are made, or "" and why there is none.
func detectDevicesV1() (string, string) {
	mount, root := "", ""
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - type source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(b) < 3 || b[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(b[2], ",") {
			if o == "devices" {
				mount, root = unescapeMount(a[4]), unescapeMount(a[3])
			}
		}
	}
	if mount == "" {
		return "", "not mounted"
	}
	own := "/"
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",devices,") {
				own = parts[2]
			}
		}
	}
	rel := own
	if root != "/" {
		rel = strings.TrimPrefix(own, root)
		if rel == own {
			rel = "/" // the node's cgroup is outside this mount: use its root
		}
	}
	dir := filepath.Join(mount, rel)
	if err := unix.Access(filepath.Join(dir, "devices.allow"), unix.W_OK); err != nil {
		return "", fmt.Sprintf("%s/devices.allow is not writable: %v", dir, err)
	}
	return dir, ""
}

// v1Devices is a job's cgroup in the cgroup v1 devices hierarchy.
type v1Devices struct {
	path string
}

// createV1Devices makes <parent>/gpumesh/<name>, refusing every device
// but those of rules.
func createV1Devices(parent, name string, rules []devRule, log *slog.Logger) (*v1Devices, error) {
	dir := filepath.Join(parent, cgroupParent)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("devices cgroup %s: %w", dir, err)
	}
	path, err := makeCgroupDir(dir, name, log)
	if err != nil {
		return nil, fmt.Errorf("devices cgroup %s: %w", path, err)
	}
	d := &v1Devices{path: path}
	if err := writeCgroup(path, "devices.deny", "a"); err != nil {
		d.remove()
		return nil, fmt.Errorf("devices cgroup: %w", err)
	}
	for _, r := range rules {
		if err := writeCgroup(path, "devices.allow", r.String()); err != nil {
			d.remove()
			return nil, fmt.Errorf("devices cgroup: allow %s: %w", r, err)
		}
	}
	return d, nil
}

// add moves the process pid (all its threads) into the cgroup.
func (d *v1Devices) add(pid int) error {
	if err := writeCgroup(d.path, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("devices cgroup: %w", err)
	}
	return nil
}

// remove kills what is left in the cgroup and removes it, waiting (up to
// ten seconds) for the processes to go.
func (d *v1Devices) remove() error {
	if d == nil {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	wait := 5 * time.Millisecond
	for {
		err := unix.Rmdir(d.path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove devices cgroup %s: %w", d.path, err)
		}
		b, _ := os.ReadFile(filepath.Join(d.path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}
