package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumesh/gpumesh/catalog"
)

// nvmlDetector reads GPUs through NVML. It is modelled on
// hashicorp/nomad-device-nvidia's nvml client: Init and Shutdown around
// every Detect, required fields fail the call, optional ones are absent
// when NVML cannot give them.
type nvmlDetector struct {
	lib    nvml.Interface
	logger *slog.Logger

	absentOnce sync.Once // logs "no NVIDIA library" once per detector
}

// NewNVML returns a Detector backed by lib: nvml.New() in production, a
// go-nvml mock in tests. A nil logger discards log output.
//
// A machine without the NVIDIA library (Init reports
// ERROR_LIBRARY_NOT_FOUND) or without a loaded driver
// (ERROR_DRIVER_NOT_LOADED) has no GPUs: Detect returns (nil, nil) and
// logs that once at info. Any other Init failure is an error.
func NewNVML(lib nvml.Interface, logger *slog.Logger) Detector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &nvmlDetector{lib: lib, logger: logger}
}

// nvmlError turns an NVML return code into a Go error: nil for SUCCESS,
// otherwise the code itself (nvml.Return implements error), so callers can
// test for codes with errors.Is. It is the one place NVML codes become
// errors.
func nvmlError(r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return r
}

// Detect implements Detector.
func (d *nvmlDetector) Detect(ctx context.Context) (gpus []GPU, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.lib == nil {
		d.logAbsent("no NVIDIA library; no GPUs")
		return nil, nil
	}
	if err := nvmlError(d.lib.Init()); err != nil {
		switch {
		case errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND):
			d.logAbsent("no NVIDIA library; no GPUs")
			return nil, nil
		case errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED):
			d.logAbsent("NVIDIA library present but no driver loaded; no GPUs")
			return nil, nil
		}
		return nil, fmt.Errorf("nvml: init: %w", err)
	}
	defer func() {
		if err := nvmlError(d.lib.Shutdown()); err != nil {
			d.logger.Warn("nvml: shutdown failed", "err", err)
		}
	}()

	// System-wide fields, shared by every device.
	driver := optional(d, -1, "driver version", d.lib.SystemGetDriverVersion)
	cuda := cudaVersionString(optional(d, -1, "cuda driver version", d.lib.SystemGetCudaDriverVersion))

	count, r := d.lib.DeviceGetCount()
	if err := nvmlError(r); err != nil {
		return nil, fmt.Errorf("nvml: get device count: %w", err)
	}
	gpus = make([]GPU, 0, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := d.device(i)
		if err != nil {
			return nil, err
		}
		g.DriverVersion = driver
		g.CUDAVersion = cuda
		gpus = append(gpus, g)
	}
	return gpus, nil
}

func (d *nvmlDetector) logAbsent(msg string) {
	d.absentOnce.Do(func() { d.logger.Info(msg) })
}

// device reads device i. Name, UUID, memory and compute capability are
// required; everything else is optional.
func (d *nvmlDetector) device(i int) (GPU, error) {
	dev, r := d.lib.DeviceGetHandleByIndex(i)
	if err := nvmlError(r); err != nil {
		return GPU{}, fmt.Errorf("nvml: device %d: get handle: %w", i, err)
	}
	name, r := dev.GetName()
	if err := nvmlError(r); err != nil {
		return GPU{}, fmt.Errorf("nvml: device %d: get name: %w", i, err)
	}
	uuid, r := dev.GetUUID()
	if err := nvmlError(r); err != nil {
		return GPU{}, fmt.Errorf("nvml: device %d: get uuid: %w", i, err)
	}
	mem, r := dev.GetMemoryInfo()
	if err := nvmlError(r); err != nil {
		return GPU{}, fmt.Errorf("nvml: device %d: get memory info: %w", i, err)
	}
	major, minor, r := dev.GetCudaComputeCapability()
	if err := nvmlError(r); err != nil {
		return GPU{}, fmt.Errorf("nvml: device %d: get compute capability: %w", i, err)
	}

	model, ok := catalog.SlugForNVMLName(name)
	if !ok {
		model = UnknownModel
	}
	g := GPU{
		Index:             i,
		UUID:              uuid,
		Name:              name,
		Model:             model,
		MemoryBytes:       mem.Total,
		VRAMGiB:           roundGiB(mem.Total),
		ComputeCapability: strconv.Itoa(major) + "." + strconv.Itoa(minor),
		DeviceMinor:       -1,
	}
	if m, r := optionalReturn(d, i, "minor number", dev.GetMinorNumber); r {
		g.DeviceMinor = m
	}

	g.PCIeGen = optional(d, i, "max pcie link generation", dev.GetMaxPcieLinkGeneration)
	g.PCIeWidth = optional(d, i, "max pcie link width", dev.GetMaxPcieLinkWidth)
	g.NVLinks = d.nvlinks(dev, i)
	g.PowerLimitWatts = int(optional(d, i, "enforced power limit", dev.GetEnforcedPowerLimit) / 1000) // mW
	g.MIGEnabled = optional(d, i, "mig mode", func() (bool, nvml.Return) {
		current, _, r := dev.GetMigMode()
		return current == nvml.DEVICE_MIG_ENABLE, r
	})
	g.UtilizationPct = int(optional(d, i, "utilization", func() (uint32, nvml.Return) {
		u, r := dev.GetUtilizationRates()
		return u.Gpu, r
	}))
	g.TemperatureC = int(optional(d, i, "temperature", func() (uint32, nvml.Return) {
		return dev.GetTemperature(nvml.TEMPERATURE_GPU)
	}))
	return g, nil
}

// optional reads a field that may be absent. Any NVML error means absent
// (the zero value): ERROR_NOT_SUPPORTED silently, others logged at debug.
//
// It also recovers a panic from get and treats it as absent. go-nvml's
// mocks panic ("method is nil") for every method a test did not set, and
// an optional reading such as temperature must never take a supplier's
// node down; the panic is logged at debug. Required fields are not read
// through optional and have no such guard.
func optional[T any](d *nvmlDetector, device int, field string, get func() (T, nvml.Return)) (v T) {
	defer func() {
		if p := recover(); p != nil {
			d.logger.Debug("nvml: optional field unavailable", "device", device, "field", field, "panic", p)
			var zero T
			v = zero
		}
	}()
	v, r := get()
	if err := nvmlError(r); err != nil {
		if !errors.Is(err, nvml.ERROR_NOT_SUPPORTED) {
			d.logger.Debug("nvml: optional field unavailable", "device", device, "field", field, "err", err)
		}
		var zero T
		return zero
	}
	return v
}

// nvlinks counts device i's active NVLink links: links are probed in
// order until NVML says a link index is invalid or not supported (a
// device without NVLink answers so for link 0: 0 links). Any other
// failure of the first probe means unknown (nil).
func (d *nvmlDetector) nvlinks(dev nvml.Device, i int) *int {
	n := 0
	for link := range nvml.NVLINK_MAX_LINKS {
		state, r := optionalReturnCode(d, i, "nvlink state", func() (nvml.EnableState, nvml.Return) { return dev.GetNvLinkState(link) })
		switch {
		case r == nvml.SUCCESS:
			if state == nvml.FEATURE_ENABLED {
				n++
			}
			continue
		case r == nvml.ERROR_NOT_SUPPORTED || r == nvml.ERROR_INVALID_ARGUMENT:
		case link == 0:
			return nil
		}
		break
	}
	return &n
}

// optionalReturnCode is optional that also returns NVML's code; a
// recovered panic reads as ERROR_UNKNOWN.
func optionalReturnCode[T any](d *nvmlDetector, device int, field string, get func() (T, nvml.Return)) (T, nvml.Return) {
	code := nvml.ERROR_UNKNOWN
	v := optional(d, device, field, func() (T, nvml.Return) {
		v, r := get()
		code = r
		return v, r
	})
	return v, code
}

// optionalReturn is optional that also reports whether the field was
// there, for fields whose zero value is a valid reading.
func optionalReturn[T any](d *nvmlDetector, device int, field string, get func() (T, nvml.Return)) (T, bool) {
	ok := false
	v := optional(d, device, field, func() (T, nvml.Return) {
		v, r := get()
		ok = r == nvml.SUCCESS
		return v, r
	})
	return v, ok
}

// cudaVersionString formats NVML's CUDA driver version (1000*major +
// 10*minor, e.g. 12040) as "12.4"; 0 (absent) gives "".
func cudaVersionString(v int) string {
	if v <= 0 {
		return ""
	}
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}
