package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// DefaultLibrary is the driver library Open loads unless told otherwise:
// the soname NVIDIA's driver installs, as go-nvml loads libnvidia-ml.so.1.
const DefaultLibrary = "libcuda.so.1"

// MinDriverVersion is the oldest driver API version Open accepts (as
// cuDriverGetVersion reports it, 1000·major + 10·minor): 11.4, the first
// with cuDeviceGetUuid_v2, whose JIT also takes the kernels' PTX ISA 7.0.
const MinDriverVersion = 11040

// Errors a caller can act on.
var (
	// ErrNoCUDA: no driver library could be loaded (no NVIDIA driver, or
	// a platform without cgo or not Linux).
	ErrNoCUDA = errors.New("no CUDA driver")
	// ErrMissingSymbol: the library lacks a function the prover calls.
	ErrMissingSymbol = errors.New("CUDA driver lacks a function")
	// ErrOldDriver: the driver is older than MinDriverVersion.
	ErrOldDriver = errors.New("CUDA driver too old")
	// ErrNoDevice: the driver has no device, or not the one asked for.
	ErrNoDevice = errors.New("no CUDA device")
	// ErrOutOfMemory: a device allocation failed for want of memory
	// (CUDA_ERROR_OUT_OF_MEMORY).
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrClosed: the Driver was closed.
	ErrClosed = errors.New("cuda: driver closed")
)

// cudaErrorOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
const cudaErrorOutOfMemory = 2

// Error is a driver call that returned a CUresult other than
// CUDA_SUCCESS. It matches ErrOutOfMemory for CUDA_ERROR_OUT_OF_MEMORY.
type Error struct {
	Call string // the driver function, e.g. "cuMemAlloc_v2"
	Code int    // the CUresult
	Name string // cuGetErrorName's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"; empty when unknown
	Desc string // cuGetErrorString's description; empty when unknown
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = "unknown CUresult"
	}
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, name, e.Code)
	if e.Desc != "" {
		s += ": " + e.Desc
	}
	return s
}

// Is reports whether e is ErrOutOfMemory.
func (e *Error) Is(target error) bool {
	return target == ErrOutOfMemory && e.Code == cudaErrorOutOfMemory
}

// Options configures Open. The zero value loads DefaultLibrary and uses
// every device.
type Options struct {
	// Library is the driver library's path or soname; DefaultLibrary when
	// empty. Tests load a fake driver built from testdata/fakecuda.
	Library string
	// Devices are the ordinals of the devices to use, in that order; all
	// of the driver's when empty.
	Devices []int
	// Logger receives the driver's set-up; slog.Default() when nil.
	Logger *slog.Logger
}

// DeviceInfo describes one CUDA device as the driver reports it.
type DeviceInfo struct {
	Ordinal     int    `json:"ordinal"`
	Name        string `json:"name"` // e.g. "NVIDIA H100 80GB HBM3", as NVML names it
	UUID        string `json:"uuid"` // "GPU-xxxxxxxx-xxxx-…", as NVML writes it
	MemoryBytes int64  `json:"memory_bytes"`
	Major       int    `json:"cc_major"` // compute capability
	Minor       int    `json:"cc_minor"`
	SMs         int    `json:"sms"`
	ClockKHz    int    `json:"clock_khz"`     // peak SM clock
	MemClockKHz int    `json:"mem_clock_khz"` // peak memory clock
	MemBusWidth int    `json:"mem_bus_bits"`
}

// TensorCoreInt8 reports whether the device has the int8 tensor cores of
// the mma.sync m16n8k32 s8 kernels: compute capability 8.0 or later.
func (i DeviceInfo) TensorCoreInt8() bool { return i.Major >= 8 }

// tensorKernels reports whether the tensor-core kernels are loaded.
func (dev *Device) tensorKernels() bool { return dev.Info.TensorCoreInt8() && dev.TensorErr == nil }

// Driver is an opened CUDA driver and the devices it serves. Each device
// has its own goroutine locked to one OS thread, on which the device's
// primary context is current; every driver call for that device runs
// there. A Driver is safe for concurrent use; Close ends it.
type Driver struct {
	lib     *lib
	version int
	devices []*Device
	log     *slog.Logger

	closeOnce sync.Once
}

// Device is one CUDA device of a Driver.
type Device struct {
	Info DeviceInfo
	// TensorErr is why the tensor-core kernels did not load on a device
	// of compute capability 8.0 or later (the JIT refused them); nil when
	// they did, or the device is older. Without them the Prover runs the
	// simple kernel.
	TensorErr error

	state *devState
	calls chan func()
	done  chan struct{}

	mu     sync.RWMutex // guards closed against sends on calls
	closed bool
}

// devPtr is a device address (CUdeviceptr).
type devPtr uint64

// Open loads the driver library, checks its version and functions,
// initialises it, and starts a thread per device that retains the
// device's primary context and JIT-compiles the kernels.
func Open(opts Options) (*Driver, error) {
	path := opts.Library
	if path == "" {
		path = DefaultLibrary
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	l, version, err := openLib(path)
	if err != nil {
		return nil, err
	}
	count, err := l.deviceCount()
	if err != nil {
		return nil, err
	}
	ordinals := opts.Devices
	if len(ordinals) == 0 {
		for i := range count {
			ordinals = append(ordinals, i)
		}
	}
	if len(ordinals) == 0 {
		return nil, fmt.Errorf("cuda: %s: %w", path, ErrNoDevice)
	}
	d := &Driver{lib: l, version: version, log: log.With("subsystem", "cuda")}
	for _, o := range ordinals {
		if o < 0 || o >= count {
			d.Close()
			return nil, fmt.Errorf("cuda: device %d of %d: %w", o, count, ErrNoDevice)
		}
		dev, err := d.startDevice(o)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("cuda: device %d: %w", o, err)
		}
		d.devices = append(d.devices, dev)
	}
	d.log.Debug("driver opened", "library", path, "version", versionString(version), "devices", len(d.devices))
	return d, nil
}

// startDevice starts ordinal's goroutine and waits for its set-up.
func (d *Driver) startDevice(ordinal int) (*Device, error) {
	cdev, info, err := d.lib.deviceInfo(ordinal)
	if err != nil {
		return nil, err
	}
	dev := &Device{
		Info:  info,
		state: &devState{l: d.lib, dev: cdev, major: info.Major},
		calls: make(chan func()),
		done:  make(chan struct{}),
	}
	ready := make(chan error, 1)
	go dev.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return dev, nil
}

// loop is the device's goroutine. It locks itself to its OS thread and
// never unlocks, so the thread (and the context bound to it) ends with
// it; only this goroutine touches dev.state.
func (dev *Device) loop(ready chan<- error) {
	lockThread()
	defer close(dev.done)
	if err := dev.state.setup(modules); err != nil {
		ready <- err
		return
	}
	dev.TensorErr = dev.state.tensorErr
	ready <- nil
	for f := range dev.calls {
		f()
	}
	dev.state.teardown()
}

// do runs f on the device's thread with its context current and returns
// f's error. f runs to its end: a kernel already launched cannot be
// stopped, so callers check their context between launches.
func (dev *Device) do(f func(s *devState) error) error {
	dev.mu.RLock()
	if dev.closed {
		dev.mu.RUnlock()
		return ErrClosed
	}
	errc := make(chan error, 1)
	dev.calls <- func() { errc <- f(dev.state) }
	dev.mu.RUnlock()
	return <-errc
}

// close ends the device's goroutine after the calls in flight and waits
// for it to release the context.
func (dev *Device) close() {
	dev.mu.Lock()
	if !dev.closed {
		dev.closed = true
		close(dev.calls)
	}
	dev.mu.Unlock()
	<-dev.done
}

// MemInfo returns the device's free and total memory.
func (dev *Device) MemInfo() (free, total int64, err error) {
	err = dev.do(func(s *devState) error {
		var e error
		free, total, e = s.memInfo()
		return e
	})
	return free, total, err
}

// Version is the driver API version (cuDriverGetVersion: 12040 for 12.4).
func (d *Driver) Version() int { return d.version }

// VersionString is Version as "12.4".
func (d *Driver) VersionString() string { return versionString(d.version) }

// Library is the path or soname the driver was loaded from.
func (d *Driver) Library() string { return d.lib.path }

// Devices returns the devices in use, in the order of Options.Devices.
func (d *Driver) Devices() []*Device { return d.devices }

// Close ends every device's thread, releasing its primary context. It is
// safe to call twice. The library stays loaded (a driver is not meant to
// be unloaded from a process that used it).
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		for _, dev := range d.devices {
			dev.close()
		}
	})
	return nil
}

// versionString writes a cuDriverGetVersion value as "major.minor".
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// formatUUID writes a device UUID as NVML does: "GPU-" and 8-4-4-4-12 hex.
func formatUUID(b []byte) string {
	if len(b) != 16 {
		return ""
	}
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
