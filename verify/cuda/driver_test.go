//go:build linux && cgo

package cuda

import (
	"context"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/verify/challenge"
)

func TestOpenFake(t *testing.T) {
	d := openFake(t, Options{})
	if got, want := d.Version(), 12040; got != want {
		t.Errorf("Version() = %d, want %d", got, want)
	}
	if got, want := d.VersionString(), "12.4"; got != want {
		t.Errorf("VersionString() = %q, want %q", got, want)
	}
	devs := d.Devices()
	if len(devs) != 2 {
		t.Fatalf("%d devices, want 2", len(devs))
	}
	for i, dev := range devs {
		want := DeviceInfo{
			Ordinal: i, Name: "Fake GPU " + string(rune('0'+i)),
			UUID:        "GPU-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfe0" + string(rune('0'+i)),
			MemoryBytes: 1 << 30, Major: 9, Minor: 0, SMs: 132, ClockKHz: 1980000, MemClockKHz: 2619000, MemBusWidth: 5120,
		}
		if dev.Info != want {
			t.Errorf("device %d: Info = %+v, want %+v", i, dev.Info, want)
		}
		free, total, err := dev.MemInfo()
		if err != nil || free != 1<<30 || total != 1<<30 {
			t.Errorf("device %d: MemInfo() = %d, %d, %v; want 1 GiB free of 1 GiB", i, free, total, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := devs[0].MemInfo(); !errors.Is(err, ErrClosed) {
		t.Errorf("MemInfo after Close: %v, want ErrClosed", err)
	}
}

func TestOpenDevices(t *testing.T) {
	d := openFake(t, Options{Devices: []int{1}})
	if len(d.Devices()) != 1 || d.Devices()[0].Info.Ordinal != 1 {
		t.Fatalf("Devices() = %+v, want device 1 alone", d.Devices())
	}
	_, err := Open(Options{Library: fakeLib(t), Devices: []int{2}})
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open with device 2 of 2: %v, want ErrNoDevice", err)
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		library func(t *testing.T) string
		want    error
		text    []string
	}{
		{"no library", func(*testing.T) string { return "/nonexistent/libcuda.so.1" }, ErrNoCUDA,
			[]string{"/nonexistent/libcuda.so.1"}},
		{"old driver", func(t *testing.T) string { return fakeLib(t, "FAKE_VERSION=11020") }, ErrOldDriver,
			[]string{"CUDA 11.2", "11.4 or later", "update the NVIDIA driver"}},
		{"missing symbol", func(t *testing.T) string { return fakeLib(t, "FAKE_OMIT_LAUNCH") }, ErrMissingSymbol,
			[]string{"symbol cuLaunchKernel not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Open(Options{Library: tt.library(t)})
			if err == nil {
				d.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("Open: %v, want %v", err, tt.want)
			}
			for _, s := range tt.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Open: %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestOpenDefaultLibrary: on a machine without the NVIDIA driver, the
// default library is absent and Open says so.
func TestOpenDefaultLibrary(t *testing.T) {
	d, err := Open(Options{})
	if err == nil {
		d.Close()
		t.Skip("this machine has a CUDA driver")
	}
	if _, statErr := os.Stat("/dev/nvidiactl"); statErr == nil {
		t.Skipf("this machine has an NVIDIA device node; Open: %v", err)
	}
	if !errors.Is(err, ErrNoCUDA) {
		t.Errorf("Open(default) = %v, want ErrNoCUDA", err)
	}
}

// TestJITError: a module the driver refuses is an error naming the
// CUresult, with the JIT's log.
func TestJITError(t *testing.T) {
	l, _, err := openLib(fakeLib(t))
	if err != nil {
		t.Fatal(err)
	}
	cdev, _, err := l.deviceInfo(0)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		s := &devState{l: l, dev: cdev, major: 9}
		err := s.setup([]module{{name: "base", target: "sm_80", required: true,
			ptx: ".version 7.0\n.target sm_80\n.visible .entry gm_nothing("}})
		if err == nil {
			s.teardown()
		}
		errc <- err
	}()
	err = <-errc
	var ce *Error
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_INVALID_PTX" || ce.Call != "cuModuleLoadDataEx" {
		t.Fatalf("setup with a truncated module: %v, want cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX", err)
	}
	if !strings.Contains(err.Error(), "module base (sm_80)") || !strings.Contains(err.Error(), "JIT log: fakecuda: unknown kernel gm_nothing") {
		t.Errorf("error %q lacks the JIT log", err)
	}
}

// TestTensorModuleRefused: a device whose JIT refuses the tensor-core
// module still opens, says why, and proves with the simple kernel.
func TestTensorModuleRefused(t *testing.T) {
	d := openFake(t, Options{}, "FAKE_REJECT_MMA")
	for _, dev := range d.Devices() {
		err := dev.TensorErr
		if err == nil || !strings.Contains(err.Error(), "module tensor (sm_80)") || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_PTX") ||
			!strings.Contains(err.Error(), "mma.sync refused") {
			t.Errorf("device %d: TensorErr = %v", dev.Info.Ordinal, err)
		}
	}
	ctx := context.Background()
	p := challenge.Params{N: 256, T: 2, K: 4}
	seeds := [][32]byte{{1}, {2}}
	gpu := NewProver(d, ProverOptions{})
	got, err := gpu.Commit(ctx, seeds, p)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	want, err := challenge.NewCPUProver(challenge.CPUOptions{}).Commit(ctx, seeds, p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || gpu.LastTiming().GPUs[0].Kernel != "simple" {
		t.Errorf("roots %x with kernel %s, want %x with simple", got, gpu.LastTiming().GPUs[0].Kernel, want)
	}
	_, err = NewProver(d, ProverOptions{Kernel: KernelTiled}).Commit(ctx, seeds, p)
	if err == nil || !strings.Contains(err.Error(), "the tiled kernel did not load") {
		t.Errorf("Commit with the tiled kernel: %v", err)
	}
	err = d.Devices()[0].do(func(s *devState) error {
		return s.launch(kStepTiled, [3]uint32{1, 1, 1}, [3]uint32{256, 1, 1}, devPtr(0), devPtr(0), devPtr(0), uint32(128))
	})
	if err == nil || !strings.Contains(err.Error(), "kernel gm_chain_step_tiled not loaded") {
		t.Errorf("launch of an unloaded kernel: %v", err)
	}
}

// TestContextIsPerThread: device calls work only on the device's own
// thread, where its context is current. The fake refuses them elsewhere,
// as the real driver does, so every other test that passes shows the
// prover's calls ran on that thread.
func TestContextIsPerThread(t *testing.T) {
	d := openFake(t, Options{Devices: []int{0}})
	dev := d.Devices()[0]
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, err := dev.state.alloc(64) // not on the device's thread
		errc <- err
	}()
	err := <-errc
	var ce *Error
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_INVALID_CONTEXT" {
		t.Fatalf("alloc off the device's thread: %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
	err = dev.do(func(s *devState) error {
		p, err := s.alloc(64)
		if err != nil {
			return err
		}
		return s.free(p)
	})
	if err != nil {
		t.Fatalf("alloc on the device's thread: %v", err)
	}
}

func TestLaunchChecksArgs(t *testing.T) {
	d := openFake(t, Options{Devices: []int{0}})
	dev := d.Devices()[0]
	tests := []struct {
		name string
		args []any
		want string
	}{
		{"too few", []any{devPtr(0), devPtr(0)}, "takes 3 parameters, got 2"},
		{"u64 for u32", []any{devPtr(0), devPtr(0), uint64(8)}, "parameter 2: .u64, want .u32"},
		{"int", []any{devPtr(0), devPtr(0), 8}, "unsupported type int"},
	}
	for _, tt := range tests {
		err := dev.do(func(s *devState) error {
			return s.launch(kTranspose, [3]uint32{1, 1, 1}, [3]uint32{256, 1, 1}, tt.args...)
		})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: launch: %v, want %q", tt.name, err, tt.want)
		}
	}
	err := dev.do(func(s *devState) error {
		return s.launch("gm_nothing", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1})
	})
	if err == nil || !strings.Contains(err.Error(), `no kernel "gm_nothing"`) {
		t.Errorf("launch of an unknown kernel: %v", err)
	}
}
