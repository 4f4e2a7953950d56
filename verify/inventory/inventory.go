package inventory

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is one detected (or simulated) device. JSON names are a contract
// shared with `gpumesh search --json`.
type GPU struct {
	Index             int    `json:"index"`
	UUID              string `json:"uuid"`
	Name              string `json:"name"`               // as NVML reports it
	Model             string `json:"model"`              // canonical slug, "unknown" if not in the profile table
	MemoryBytes       uint64 `json:"memory_bytes"`       // total device memory
	VRAMGiB           int    `json:"vram_gib"`           // MemoryBytes rounded to nearest GiB
	ComputeCapability string `json:"compute_capability"` // "9.0"
	DriverVersion     string `json:"driver_version,omitempty"`
	CUDAVersion       string `json:"cuda_version,omitempty"` // e.g. "12.4", from SystemGetCudaDriverVersion
	PCIeGen           int    `json:"pcie_gen,omitempty"`     // maximum link generation of device and system
	PCIeWidth         int    `json:"pcie_width,omitempty"`   // maximum link width of device and system
	// NVLinks is how many NVLink links are active; nil when unknown (no
	// NVML reading, simulated GPUs).
	NVLinks         *int `json:"nvlink_links,omitempty"`
	PowerLimitWatts int  `json:"power_limit_watts,omitempty"`
	MIGEnabled      bool `json:"mig_enabled"`
	// DeviceMinor is the minor number of the GPU's device node
	// (/dev/nvidia<minor>, major 195), which is not always its index:
	// the job sandbox opens exactly that node. -1 when unknown, and for
	// simulated GPUs, which have none.
	DeviceMinor    int  `json:"device_minor"`
	UtilizationPct int  `json:"utilization_pct"`
	TemperatureC   int  `json:"temperature_c,omitempty"`
	Simulated      bool `json:"simulated"`
}

// UnknownModel is the Model of a GPU whose name is not in the verify
// profile table.
const UnknownModel = "unknown"

// Detector reports the GPUs of this machine. Detect may be called
// repeatedly (live readings such as utilization change between calls).
type Detector interface {
	Detect(ctx context.Context) ([]GPU, error)
}

// FromSpec returns the Detector a parsed --gpus spec asks for: NVML for
// "auto", nothing for "none", simulated GPUs for "sim". seed should be the
// node identity (peer ID), so simulated UUIDs are stable per node. A nil
// logger discards log output.
func FromSpec(spec Spec, seed string, logger *slog.Logger) Detector {
	switch spec.Mode {
	case ModeAuto:
		return NewNVML(nvml.New(), logger)
	case ModeNone:
		return noGPUs{}
	case ModeSim:
		return NewSimulated(spec.Sim, seed)
	default:
		return badMode(spec.Mode)
	}
}

// noGPUs is the Detector for "none".
type noGPUs struct{}

func (noGPUs) Detect(ctx context.Context) ([]GPU, error) { return nil, ctx.Err() }

// badMode is the Detector for a Spec that did not come from ParseSpec.
type badMode string

func (m badMode) Detect(context.Context) ([]GPU, error) {
	return nil, fmt.Errorf("inventory: %w: unknown mode %q", ErrInvalidSpec, string(m))
}

// roundGiB rounds a byte count to the nearest GiB.
func roundGiB(b uint64) int {
	return int((b + 1<<29) >> 30)
}
