//go:build linux && cgo

package cuda

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/verify/challenge"
)

func testSeeds(n int, salt byte) [][32]byte {
	seeds := make([][32]byte, n)
	for g := range seeds {
		for i := range seeds[g] {
			seeds[g][i] = byte(i) ^ byte(g*37) ^ salt
		}
	}
	return seeds
}

// TestProverMatchesCPU: the GPU prover's commit, sweep and openings are
// byte-identical to the CPU prover's, for every kernel, several sizes and
// several GPUs spread over two devices, and the verifier accepts them.
func TestProverMatchesCPU(t *testing.T) {
	ctx := context.Background()
	d := openFake(t, Options{})
	tests := []struct {
		n, t, gpus int
		kernel     Kernel
		want       string // the kernel LastTiming reports
	}{
		{64, 2, 1, KernelSimple, "simple"},
		{64, 3, 3, KernelAuto, "simple"}, // 64 is not a multiple of 128
		{128, 3, 2, KernelMMA, "mma"},
		{136, 2, 2, KernelAuto, "simple"},
		{256, 2, 3, KernelAuto, "tiled"},
		{384, 1, 2, KernelTiled, "tiled"},
		{256, 1, 2, KernelSimple, "simple"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n%d_t%d_g%d_%v", tt.n, tt.t, tt.gpus, tt.kernel), func(t *testing.T) {
			p := challenge.Params{N: tt.n, T: tt.t, K: 8}
			seeds := testSeeds(tt.gpus, byte(tt.n))
			gpu := NewProver(d, ProverOptions{Kernel: tt.kernel, Workers: 2})
			cpu := challenge.NewCPUProver(challenge.CPUOptions{Workers: 2})
			got, err := gpu.Commit(ctx, seeds, p)
			if err != nil {
				t.Fatalf("gpu Commit: %v", err)
			}
			want, err := cpu.Commit(ctx, seeds, p)
			if err != nil {
				t.Fatalf("cpu Commit: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("roots = %x, want %x", got, want)
			}
			tm := gpu.LastTiming()
			if len(tm.GPUs) != tt.gpus {
				t.Fatalf("timing of %d gpus, want %d", len(tm.GPUs), tt.gpus)
			}
			for g, gt := range tm.GPUs {
				if gt.GPU != g || gt.Device != g%2 || gt.Kernel != tt.want || gt.Chain <= 0 {
					t.Errorf("timing of gpu %d = %+v, want device %d, kernel %s, a chain time", g, gt, g%2, tt.want)
				}
			}
			r := challenge.DrawVector([32]byte{1, byte(tt.n)}, tt.n)
			for g := range seeds {
				sg, err := gpu.Sweep(ctx, g, r)
				if err != nil {
					t.Fatalf("gpu Sweep %d: %v", g, err)
				}
				sc, err := cpu.Sweep(ctx, g, r)
				if err != nil {
					t.Fatalf("cpu Sweep %d: %v", g, err)
				}
				if !reflect.DeepEqual(sg, sc) {
					t.Fatalf("gpu %d: sweeps differ", g)
				}
				rows, err := challenge.DrawRows([32]byte{2, byte(g)}, tt.n, p.K)
				if err != nil {
					t.Fatal(err)
				}
				og, err := gpu.Open(ctx, g, rows)
				if err != nil {
					t.Fatalf("gpu Open %d: %v", g, err)
				}
				oc, err := cpu.Open(ctx, g, rows)
				if err != nil {
					t.Fatalf("cpu Open %d: %v", g, err)
				}
				if !reflect.DeepEqual(og, oc) {
					t.Fatalf("gpu %d: openings differ", g)
				}
				for _, o := range og {
					if err := challenge.VerifyRow(seeds[g], p, got[g], r, sg, o); err != nil {
						t.Fatalf("gpu %d row %d: %v", g, o.Index, err)
					}
				}
			}
			checkNoLeak(t, d)
		})
	}
}

// TestProverKernelChoice: the tensor-core kernels refuse what they cannot
// run, and auto picks the simple kernel on a device without them.
func TestProverKernelChoice(t *testing.T) {
	ctx := context.Background()
	for _, k := range []Kernel{KernelMMA, KernelTiled} {
		gpu := NewProver(openFake(t, Options{}), ProverOptions{Kernel: k})
		_, err := gpu.Commit(ctx, testSeeds(1, 0), challenge.Params{N: 136, T: 1, K: 1})
		if err == nil || !strings.Contains(err.Error(), "the "+k.String()+" kernel needs compute capability 8.0 or later and n a multiple of 128") {
			t.Errorf("%v at n=136: %v", k, err)
		}
	}
	d7 := openFake(t, Options{}, "FAKE_CC_MAJOR=7")
	if err := d7.Devices()[0].TensorErr; err != nil {
		t.Errorf("a 7.0 device tried the tensor module: %v", err)
	}
	old := NewProver(d7, ProverOptions{})
	if _, err := old.Commit(ctx, testSeeds(1, 0), challenge.Params{N: 128, T: 1, K: 1}); err != nil {
		t.Fatalf("auto on a 7.0 device: %v", err)
	}
	if k := old.LastTiming().GPUs[0].Kernel; k != "simple" {
		t.Errorf("auto on a 7.0 device chose %s, want simple", k)
	}
	for _, s := range []string{"auto", "simple", "mma", "tiled"} {
		if k, err := ParseKernel(s); err != nil || k.String() != s {
			t.Errorf("ParseKernel(%q) = %v, %v", s, k, err)
		}
	}
	if _, err := ParseKernel("wgmma"); err == nil {
		t.Error("ParseKernel(wgmma) succeeded")
	}
}

// TestProverOutOfMemory: a device without room for the chain's three
// buffers fails with ErrOutOfMemory, named as the driver names it, and
// frees what it took.
func TestProverOutOfMemory(t *testing.T) {
	d := openFake(t, Options{}, "FAKE_MEM_LIMIT=150000") // room for two 256×256 buffers, not three
	gpu := NewProver(d, ProverOptions{})
	_, err := gpu.Commit(context.Background(), testSeeds(2, 0), challenge.Params{N: 256, T: 1, K: 1})
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Commit: %v, want ErrOutOfMemory", err)
	}
	for _, s := range []string{"cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY (2)", "allocate 65536 bytes"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	checkNoLeak(t, d)
	// The failed commit left no result behind.
	if _, err := gpu.Sweep(context.Background(), 0, make([]uint64, 256)); !errors.Is(err, challenge.ErrNotCommitted) {
		t.Errorf("Sweep after a failed commit: %v, want ErrNotCommitted", err)
	}
}

// countdownCtx is a context whose Err turns to Canceled after some calls:
// cancelled in the middle of a chain, deterministically.
type countdownCtx struct {
	context.Context
	left int
}

func (c *countdownCtx) Err() error {
	if c.left--; c.left < 0 {
		return context.Canceled
	}
	return nil
}

// TestProverCancel: a cancelled context stops the chain between steps,
// before or during it, and the device memory is freed.
func TestProverCancel(t *testing.T) {
	d := openFake(t, Options{})
	for _, calls := range []int{0, 1, 3} {
		ctx := &countdownCtx{Context: context.Background(), left: calls}
		_, err := NewProver(d, ProverOptions{}).Commit(ctx, testSeeds(1, 0), challenge.Params{N: 64, T: 16, K: 1})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Commit cancelled after %d checks: %v", calls, err)
		}
		checkNoLeak(t, d)
	}
}
