package inventory

import (
	"context"
	"errors"
	"fmt"

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
// (ErrNotMeasured).
func NewUsageReader(d Detector) UsageReader {
	if n, ok := d.(*nvmlDetector); ok {
		return n
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

// Usage implements UsageReader through NVML: Init, each device by UUID,
// its utilisation rates and memory info, Shutdown.
func (d *nvmlDetector) Usage(ctx context.Context, uuids []string) ([]Reading, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.lib == nil {
		return nil, ErrNotMeasured
	}
	if err := nvmlError(d.lib.Init()); err != nil {
		if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) || errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
			return nil, ErrNotMeasured
		}
		return nil, fmt.Errorf("nvml: init: %w", err)
	}
	defer func() {
		if err := nvmlError(d.lib.Shutdown()); err != nil {
			d.logger.Warn("nvml: shutdown failed", "err", err)
		}
	}()
	out := make([]Reading, len(uuids))
	for i, u := range uuids {
		dev, r := d.lib.DeviceGetHandleByUUID(u)
		if err := nvmlError(r); err != nil {
			return nil, fmt.Errorf("nvml: device %s: get handle: %w", u, err)
		}
		util, r := dev.GetUtilizationRates()
		if err := nvmlError(r); err != nil {
			return nil, fmt.Errorf("nvml: device %s: utilization: %w", u, err)
		}
		mem, r := dev.GetMemoryInfo()
		if err := nvmlError(r); err != nil {
			return nil, fmt.Errorf("nvml: device %s: memory info: %w", u, err)
		}
		out[i] = Reading{UtilPct: int(min(util.Gpu, 100)), MemUsedBytes: mem.Used}
	}
	return out, nil
}
