package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Reading is one sample of what a GPU is doing.
type Reading struct {
	UtilPct      int    // busy share of the last sample period, 0..100 (NVML's GPU utilisation)
	MemUsedBytes uint64 // device memory in use
}

// UsageReader samples the GPUs a job leased, by UUID, for its receipts.
type UsageReader interface {
	// Usage returns one reading per UUID, in order. A UUID it cannot read
	// fails the call: a receipt's average must be over every GPU.
	Usage(ctx context.Context, uuids []string) ([]Reading, error)
}

// ErrNotMeasured means a GPU's usage cannot be measured: a simulated GPU,
// or a machine without NVML.
var ErrNotMeasured = errors.New("gpu usage not measured")

// NewUsageReader returns the UsageReader of a Detector from FromSpec:
// NVML's for "auto", and for the others one that measures nothing
// (ErrNotMeasured). NVML's initialises NVML once, on its first sample,
// and keeps it until Close, so that a sample (every few seconds of every
// job) costs the reads alone, not an Init that enumerates every device;
// close it with the node (it implements io.Closer).
func NewUsageReader(d Detector) UsageReader {
	if n, ok := d.(*nvmlDetector); ok {
		return &nvmlUsage{d: n}
	}
	return notMeasured{}
}

type notMeasured struct{}

func (notMeasured) Usage(ctx context.Context, uuids []string) ([]Reading, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, ErrNotMeasured
}

// nvmlUsage is NVML's UsageReader.
type nvmlUsage struct {
	d *nvmlDetector

	mu     sync.Mutex
	inited bool // NVML is initialised, until Close
	closed bool
}

// Usage implements UsageReader: each device by UUID, its utilisation
// rates and memory info.
func (u *nvmlUsage) Usage(ctx context.Context, uuids []string) ([]Reading, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	lib := u.d.lib
	switch {
	case lib == nil || u.closed:
		return nil, ErrNotMeasured
	case !u.inited:
		if err := nvmlError(lib.Init()); err != nil {
			if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) || errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
				return nil, ErrNotMeasured
			}
			return nil, fmt.Errorf("nvml: init: %w", err)
		}
		u.inited = true
	}
	out := make([]Reading, len(uuids))
	for i, id := range uuids {
		dev, r := lib.DeviceGetHandleByUUID(id)
		if err := nvmlError(r); err != nil {
			return nil, fmt.Errorf("nvml: device %s: get handle: %w", id, err)
		}
		util, r := dev.GetUtilizationRates()
		if err := nvmlError(r); err != nil {
			return nil, fmt.Errorf("nvml: device %s: utilization: %w", id, err)
		}
		mem, r := dev.GetMemoryInfo()
		if err := nvmlError(r); err != nil {
			return nil, fmt.Errorf("nvml: device %s: memory info: %w", id, err)
		}
		out[i] = Reading{UtilPct: int(min(util.Gpu, 100)), MemUsedBytes: mem.Used}
	}
	return out, nil
}

// Close shuts NVML down if a sample initialised it; later samples are not
// measured.
func (u *nvmlUsage) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	if !u.inited {
		return nil
	}
	u.inited = false
	return nvmlError(u.d.lib.Shutdown())
}
