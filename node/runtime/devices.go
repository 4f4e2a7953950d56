package runtime

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// controlNodes are the NVIDIA driver's nodes that a GPU job needs besides
// its GPUs' own (/dev/nvidia<minor>), found in Options.DeviceDir: the
// control device, unified memory and its tools, modesetting. Missing ones
// are left out.
var controlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

// capsDir holds the driver's capability nodes (MIG), when it has any.
const capsDir = "nvidia-caps"

// standardDevs are the host's nodes every job's private /dev has.
var standardDevs = []string{"null", "zero", "full", "random", "urandom", "tty"}

// shimDevEntries are what the shim makes in a job's private /dev itself.
var shimDevEntries = []string{"pts", "ptmx", "shm", "fd", "stdin", "stdout", "stderr", capsDir}

// standardDevName reports whether /dev/name is taken in every job's
// private /dev.
func standardDevName(name string) bool {
	return slices.Contains(standardDevs, name) || slices.Contains(shimDevEntries, name)
}

// devBind is one host node (or directory of nodes) that a job gets.
type devBind struct {
	Src string `json:"src"` // absolute path on the host
	Dst string `json:"dst"` // path below the job's /dev, e.g. "nvidia2"
	Dir bool   `json:"dir"` // Src is a directory (nvidia-caps)
}

// gpuBinds are the GPU nodes a job with devices gets: each of devices at
// /dev/<base name>, then the control nodes (and the capabilities
// directory) that devDir has. None without devices.
func gpuBinds(devices []string, devDir string) []devBind {
	if len(devices) == 0 {
		return nil
	}
	var out []devBind
	for _, d := range devices {
		out = append(out, devBind{Src: d, Dst: filepath.Base(d)})
	}
	for _, n := range controlNodes {
		p := filepath.Join(devDir, n)
		if isCharDevice(p) {
			out = append(out, devBind{Src: p, Dst: n})
		}
	}
	caps := filepath.Join(devDir, capsDir)
	if fi, err := os.Stat(caps); err == nil && fi.IsDir() {
		out = append(out, devBind{Src: caps, Dst: capsDir, Dir: true})
	}
	return out
}

// capsNodes are the character devices directly in dir (nvidia-caps).
func capsNodes(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if p := filepath.Join(dir, e.Name()); isCharDevice(p) {
			out = append(out, p)
		}
	}
	return out
}

// isCharDevice reports whether p (followed) is a character device.
func isCharDevice(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().Type() == fs.ModeDevice|fs.ModeCharDevice
}

// deviceArgs are docker's and podman's --device flags for the GPU nodes
// of s (GPUMode "devices"): each node at the same place below /dev as the
// process runtime puts it.
func deviceArgs(s Spec, devDir string) []string {
	var a []string
	for _, b := range gpuBinds(s.GPUDevices, devDir) {
		if !b.Dir {
			a = append(a, "--device", b.Src+":/dev/"+b.Dst)
			continue
		}
		for _, n := range capsNodes(b.Src) {
			a = append(a, "--device", n+":/dev/"+b.Dst+"/"+filepath.Base(n))
		}
	}
	return a
}
