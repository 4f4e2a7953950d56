package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpumesh/gpumesh/catalog"
)

// logBuffer returns a logger writing text records at debug level to a
// buffer.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

func detect(t *testing.T, lib nvml.Interface) []GPU {
	t.Helper()
	logger, _ := logBuffer()
	got, err := NewNVML(lib, logger).Detect(t.Context())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	return got
}

// checkServer checks an 8-GPU DGX mock against the profile it must map to.
func checkServer(t *testing.T, lib nvml.Interface, wantModel string, wantGiB int, wantCC string) {
	t.Helper()
	got := detect(t, lib)
	if len(got) != 8 {
		t.Fatalf("got %d GPUs, want 8", len(got))
	}
	uuids := map[string]bool{}
	for i, g := range got {
		if g.Index != i {
			t.Errorf("gpu %d: Index = %d", i, g.Index)
		}
		if g.Model != wantModel {
			t.Errorf("gpu %d (%q): Model = %q, want %q", i, g.Name, g.Model, wantModel)
		}
		if g.VRAMGiB != wantGiB {
			t.Errorf("gpu %d: VRAMGiB = %d, want %d", i, g.VRAMGiB, wantGiB)
		}
		if g.MemoryBytes != uint64(wantGiB)<<30 {
			t.Errorf("gpu %d: MemoryBytes = %d, want %d", i, g.MemoryBytes, uint64(wantGiB)<<30)
		}
		if g.ComputeCapability != wantCC {
			t.Errorf("gpu %d: ComputeCapability = %q, want %q", i, g.ComputeCapability, wantCC)
		}
		if g.DriverVersion != "550.54.15" {
			t.Errorf("gpu %d: DriverVersion = %q, want %q", i, g.DriverVersion, "550.54.15")
		}
		if g.CUDAVersion != "12.4" {
			t.Errorf("gpu %d: CUDAVersion = %q, want %q", i, g.CUDAVersion, "12.4")
		}
		if g.Simulated {
			t.Errorf("gpu %d: Simulated = true", i)
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || uuids[g.UUID] {
			t.Errorf("gpu %d: UUID %q malformed or repeated", i, g.UUID)
		}
		uuids[g.UUID] = true
	}
}

func TestNVMLDGXH100(t *testing.T) {
	// The bare mock leaves temperature, power, utilization and PCIe
	// unset (its methods panic); those fields must come back absent.
	checkServer(t, dgxh100.New(), "h100-sxm", 80, "9.0")
	for _, g := range detect(t, dgxh100.New()) {
		if g.PCIeGen != 0 || g.PCIeWidth != 0 || g.PowerLimitWatts != 0 || g.TemperatureC != 0 || g.UtilizationPct != 0 || g.MIGEnabled {
			t.Errorf("gpu %d: optional fields %+v, want all absent", g.Index, g)
		}
	}
}

func TestNVMLDGXA100(t *testing.T) {
	checkServer(t, dgxa100.New(), "a100-40gb", 40, "8.0")
}

func TestNVMLDGXH200(t *testing.T) {
	checkServer(t, dgxh200.New(), "h200", 141, "9.0")
}

// TestMockGPUNames checks that every GPU go-nvml's mocks know maps to the
// profile whose memory and compute capability match, or to "unknown".
func TestMockGPUNames(t *testing.T) {
	configs := []gpus.Config{
		gpus.A100_PCIE_40GB, gpus.A100_PCIE_80GB, gpus.A100_SXM4_40GB, gpus.A100_SXM4_80GB,
		gpus.A30_PCIE_24GB, gpus.B200_SXM5_180GB, gpus.H100_SXM5_80GB, gpus.H200_SXM5_141GB,
	}
	s, err := server.New(server.WithGPUs(configs...))
	if err != nil {
		t.Fatal(err)
	}
	got := detect(t, s)
	want := []string{"a100-40gb", "a100-80gb", "a100-40gb", "a100-80gb", UnknownModel, UnknownModel, "h100-sxm", "h200"}
	if len(got) != len(want) {
		t.Fatalf("got %d GPUs, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.Model != want[i] {
			t.Errorf("%q: Model = %q, want %q", g.Name, g.Model, want[i])
			continue
		}
		p, ok := catalog.Lookup(g.Model)
		if !ok {
			continue
		}
		if g.VRAMGiB != p.MemoryGiB {
			t.Errorf("%q: VRAMGiB = %d, profile %s says %d", g.Name, g.VRAMGiB, p.Slug, p.MemoryGiB)
		}
		if cc := configs[i]; cc.CudaMajor != p.CCMajor || cc.CudaMinor != p.CCMinor {
			t.Errorf("%q: compute capability %d.%d, profile %s says %d.%d", g.Name, cc.CudaMajor, cc.CudaMinor, p.Slug, p.CCMajor, p.CCMinor)
		}
	}
}

func TestNVMLOptionalFields(t *testing.T) {
	s := dgxh100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		if i == 1 {
			// Device 1 supports none of the optional readings.
			dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NO_PERMISSION }
			dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			dev.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
			dev.GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
			continue
		}
		dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
		// Minor numbers need not follow the index: device i is /dev/nvidia<7-i>.
		dev.GetMinorNumberFunc = func() (int, nvml.Return) { return 7 - i, nvml.SUCCESS }
		// Device i has 18 links, of which the first 18-i are up; device 3
		// has no NVLink at all.
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			switch {
			case i == 3:
				return 0, nvml.ERROR_NOT_SUPPORTED
			case link >= 18:
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case link < 18-i:
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS } // mW
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 3}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
			if sensor != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 41, nvml.SUCCESS
		}
	}
	if ret, _ := s.Devices[2].SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}

	got := detect(t, s)
	for i, g := range got {
		want := GPU{PCIeGen: 5, PCIeWidth: 16, PowerLimitWatts: 700, UtilizationPct: 10 * i, TemperatureC: 41, MIGEnabled: i == 2, DeviceMinor: 7 - i}
		if i == 1 {
			want = GPU{DeviceMinor: -1}
		}
		have := GPU{PCIeGen: g.PCIeGen, PCIeWidth: g.PCIeWidth, PowerLimitWatts: g.PowerLimitWatts, UtilizationPct: g.UtilizationPct, TemperatureC: g.TemperatureC, MIGEnabled: g.MIGEnabled, DeviceMinor: g.DeviceMinor}
		if have != want {
			t.Errorf("gpu %d: optional fields %+v, want %+v", i, have, want)
		}
		wantLinks := map[int]int{0: 18, 2: 16, 3: 0, 4: 14}[i]
		switch {
		case i == 1 && g.NVLinks != nil:
			t.Errorf("gpu 1: NVLinks = %d, want unknown", *g.NVLinks)
		case i != 1 && i <= 4 && (g.NVLinks == nil || *g.NVLinks != wantLinks):
			t.Errorf("gpu %d: NVLinks = %v, want %d", i, g.NVLinks, wantLinks)
		}
	}
}

func TestNVMLNoLibrary(t *testing.T) {
	for _, code := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		t.Run(code.Error(), func(t *testing.T) {
			shutdowns := 0
			lib := &mock.Interface{
				InitFunc:     func() nvml.Return { return code },
				ShutdownFunc: func() nvml.Return { shutdowns++; return nvml.SUCCESS },
			}
			logger, buf := logBuffer()
			d := NewNVML(lib, logger)
			for range 3 {
				got, err := d.Detect(t.Context())
				if got != nil || err != nil {
					t.Fatalf("Detect = %v, %v; want nil, nil", got, err)
				}
			}
			if shutdowns != 0 {
				t.Errorf("Shutdown called %d times after a failed Init", shutdowns)
			}
			if n := strings.Count(buf.String(), "no GPUs"); n != 1 {
				t.Errorf("logged %d times, want once:\n%s", n, buf)
			}
			if !strings.Contains(buf.String(), "level=INFO") {
				t.Errorf("not logged at info:\n%s", buf)
			}
		})
	}
	t.Run("nil", func(t *testing.T) {
		got, err := NewNVML(nil, nil).Detect(t.Context())
		if got != nil || err != nil {
			t.Fatalf("Detect = %v, %v; want nil, nil", got, err)
		}
	})
}

func TestNVMLInitError(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	got, err := NewNVML(lib, nil).Detect(t.Context())
	if err == nil {
		t.Fatalf("Detect = %v, nil; want an error", got)
	}
	if !errors.Is(err, nvml.ERROR_NO_PERMISSION) || !strings.Contains(err.Error(), "nvml: init") {
		t.Errorf("err = %v; want it to wrap ERROR_NO_PERMISSION and say nvml: init", err)
	}
}

func TestNVMLDeviceError(t *testing.T) {
	s := dgxh100.New()
	shutdowns := 0
	s.ShutdownFunc = func() nvml.Return { shutdowns++; return nvml.SUCCESS }
	s.Devices[3].(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }

	_, err := NewNVML(s, nil).Detect(t.Context())
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || !strings.Contains(err.Error(), "nvml: device 3: get uuid") {
		t.Errorf("err = %v; want nvml: device 3: get uuid wrapping ERROR_GPU_IS_LOST", err)
	}
	if shutdowns != 1 {
		t.Errorf("Shutdown called %d times, want 1", shutdowns)
	}
}

func TestNVMLCountError(t *testing.T) {
	s := dgxh100.New()
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	_, err := NewNVML(s, nil).Detect(t.Context())
	if !errors.Is(err, nvml.ERROR_UNKNOWN) || !strings.Contains(err.Error(), "nvml: get device count") {
		t.Errorf("err = %v; want nvml: get device count wrapping ERROR_UNKNOWN", err)
	}
}

func TestNVMLShutdownAfterSuccess(t *testing.T) {
	s := dgxh100.New()
	inits, shutdowns := 0, 0
	s.InitFunc = func() nvml.Return { inits++; return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { shutdowns++; return nvml.ERROR_UNKNOWN }
	d := NewNVML(s, nil)
	for range 2 {
		if _, err := d.Detect(t.Context()); err != nil {
			t.Fatalf("Detect: %v (a failed Shutdown is only logged)", err)
		}
	}
	if inits != 2 || shutdowns != 2 {
		t.Errorf("Init %d, Shutdown %d times; want 2 and 2", inits, shutdowns)
	}
}

func TestNVMLCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := NewNVML(dgxh100.New(), nil).Detect(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// TestFromSpecAuto runs real NVML: on a machine without the library it
// must find no GPUs and no error; on one with GPUs it must read them.
func TestFromSpecAuto(t *testing.T) {
	logger, buf := logBuffer()
	got, err := FromSpec(Spec{Mode: ModeAuto}, "seed", logger).Detect(t.Context())
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	t.Logf("found %d GPUs; log:\n%s", len(got), buf)
	for _, g := range got {
		t.Logf("%+v", g)
		if g.UUID == "" || g.Name == "" || g.MemoryBytes == 0 || g.Simulated {
			t.Errorf("gpu %d: %+v", g.Index, g)
		}
	}
}

func TestFromSpec(t *testing.T) {
	ctx := t.Context()
	if got, err := FromSpec(Spec{Mode: ModeNone}, "seed", nil).Detect(ctx); got != nil || err != nil {
		t.Errorf("none: Detect = %v, %v; want nil, nil", got, err)
	}
	got, err := FromSpec(Spec{Mode: ModeSim, Sim: []SimSpec{{"h100-sxm", 2}}}, "seed", nil).Detect(ctx)
	if err != nil || len(got) != 2 || !got[0].Simulated {
		t.Errorf("sim: Detect = %v, %v; want 2 simulated GPUs", got, err)
	}
	if _, err := FromSpec(Spec{}, "seed", nil).Detect(ctx); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("zero Spec: err = %v, want ErrInvalidSpec", err)
	}
}

func TestGPUJSONNames(t *testing.T) {
	b, err := json.Marshal(GPU{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// omitempty fields are absent from the zero value.
	want := []string{"compute_capability", "device_minor", "index", "memory_bytes", "mig_enabled", "model", "name", "simulated", "utilization_pct", "uuid", "vram_gib"}
	if !slices.Equal(keys, want) {
		t.Errorf("zero GPU JSON keys = %v, want %v", keys, want)
	}

	full := GPU{DriverVersion: "x", CUDAVersion: "x", PCIeGen: 1, PCIeWidth: 1, PowerLimitWatts: 1, TemperatureC: 1}
	b, _ = json.Marshal(full)
	for _, k := range []string{"driver_version", "cuda_version", "pcie_gen", "pcie_width", "power_limit_watts", "temperature_c"} {
		if !strings.Contains(string(b), `"`+k+`":`) {
			t.Errorf("JSON %s lacks %q", b, k)
		}
	}
}

func TestCUDAVersionString(t *testing.T) {
	for v, want := range map[int]string{0: "", -1: "", 12040: "12.4", 11080: "11.8", 12000: "12.0", 12090: "12.9", 13000: "13.0"} {
		if got := cudaVersionString(v); got != want {
			t.Errorf("cudaVersionString(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestRoundGiB(t *testing.T) {
	for b, want := range map[uint64]int{0: 0, 1 << 29: 1, 1<<29 - 1: 0, 81559 << 20: 80, 80 << 30: 80, 143771 << 20: 140} {
		if got := roundGiB(b); got != want {
			t.Errorf("roundGiB(%d) = %d, want %d", b, got, want)
		}
	}
}
