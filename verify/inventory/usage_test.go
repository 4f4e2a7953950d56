package inventory

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func TestNVMLUsage(t *testing.T) {
	s := dgxh100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 5}, nvml.SUCCESS
		}
		dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 80 << 30, Used: uint64(i) << 30}, nvml.SUCCESS
		}
	}
	det := NewNVML(s, nil)
	gpus, err := det.Detect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := NewUsageReader(det)
	got, err := r.Usage(context.Background(), []string{gpus[5].UUID, gpus[2].UUID})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Reading{{50, 5 << 30}, {20, 2 << 30}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Usage = %+v, want %+v", got, want)
	}
	if _, err := r.Usage(context.Background(), []string{"GPU-not-here"}); err == nil {
		t.Error("Usage of an unknown UUID: nil error")
	}
	s.Devices[2].(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
	}
	if _, err := r.Usage(context.Background(), []string{gpus[2].UUID}); !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("Usage of a lost GPU: %v, want ERROR_GPU_IS_LOST", err)
	}
}

func TestSimulatedUsageNotMeasured(t *testing.T) {
	r := NewUsageReader(NewSimulated([]SimSpec{{Model: "h100-sxm", Count: 1}}, "seed"))
	if _, err := r.Usage(context.Background(), []string{"GPU-sim-0"}); !errors.Is(err, ErrNotMeasured) {
		t.Errorf("simulated Usage: %v, want ErrNotMeasured", err)
	}
}

// TestNVMLUsageInitOnce: samples share one NVML Init, which Close shuts
// down; a sample after Close is not measured.
func TestNVMLUsageInitOnce(t *testing.T) {
	s := dgxh100.New()
	var inits, shutdowns int
	init, shutdown := s.InitFunc, s.ShutdownFunc
	s.InitFunc = func() nvml.Return { inits++; return init() }
	s.ShutdownFunc = func() nvml.Return { shutdowns++; return shutdown() }
	for _, d := range s.Devices {
		d.(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 50}, nvml.SUCCESS }
	}
	uuid, _ := s.Devices[0].GetUUID()
	r := NewUsageReader(NewNVML(s, nil))
	for range 5 {
		if _, err := r.Usage(context.Background(), []string{uuid}); err != nil {
			t.Fatal(err)
		}
	}
	if inits != 1 || shutdowns != 0 {
		t.Fatalf("5 samples: %d inits, %d shutdowns; want 1 and 0", inits, shutdowns)
	}
	if err := r.(io.Closer).Close(); err != nil || shutdowns != 1 {
		t.Fatalf("Close: %v, %d shutdowns; want 1", err, shutdowns)
	}
	if _, err := r.Usage(context.Background(), []string{uuid}); !errors.Is(err, ErrNotMeasured) {
		t.Errorf("a sample after Close: %v, want ErrNotMeasured", err)
	}
}
