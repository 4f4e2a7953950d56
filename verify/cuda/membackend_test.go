//go:build linux && cgo

package cuda

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/audit"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// TestMemBackendMatchesMemFold: FoldRound on the device equals
// challenge.MemFold over the same windows of the same buffers, for
// windows of one block and of several (partial sums at their own powers
// of ρ), any offset, and points at or above P.
func TestMemBackendMatchesMemFold(t *testing.T) {
	ctx := context.Background()
	d := openFake(t, Options{})
	seed := [32]byte{7, 7, 7}
	p := challenge.MemParams{Buffers: 3, BufferBytes: 1 << 20, WindowBytes: 320 << 10, Rounds: 1, Checks: 1}
	m, err := NewMemBackend(ctx, d.Devices()[1], seed, p)
	if err != nil {
		t.Fatalf("NewMemBackend: %v", err)
	}
	defer m.Close()
	if got, want := m.HeldBytes(), p.Bytes(); got != want {
		t.Errorf("HeldBytes() = %d, want %d", got, want)
	}
	bufs := make([][]byte, p.Buffers)
	for j := range bufs {
		bufs[j] = make([]byte, p.BufferBytes)
		challenge.FillMemBuffer(bufs[j], seed, j)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, window := range []int{64, 4096, foldBlockWords * 8, 320 << 10} {
		for range 3 {
			offs := make([]int, p.Buffers)
			rhos := make([]uint64, p.Buffers)
			for j := range offs {
				offs[j] = 64 * rng.IntN((p.BufferBytes-window)/64+1)
				rhos[j] = rng.Uint64() // often ≥ P: FoldRound reduces it as MemFold does
			}
			rhos[0] = challenge.P // ≡ 0: only the first word counts
			out := make([]uint64, p.Buffers)
			if err := m.FoldRound(ctx, offs, window, rhos, out); err != nil {
				t.Fatalf("FoldRound(window %d): %v", window, err)
			}
			for j := range out {
				want := challenge.MemFold(bufs[j][offs[j]:offs[j]+window], rhos[j])
				if out[j] != want {
					t.Fatalf("window %d, buffer %d at %d, ρ %d: fold %d, want %d", window, j, offs[j], rhos[j], out[j], want)
				}
			}
		}
	}
	if err := m.FoldRound(ctx, []int{0, 0, p.BufferBytes - 32}, 64, make([]uint64, 3), make([]uint64, 3)); !errors.Is(err, challenge.ErrMalformed) {
		t.Errorf("FoldRound past a buffer's end: %v, want ErrMalformed", err)
	}
	if err := m.FoldRound(ctx, []int{0}, 64, make([]uint64, 3), make([]uint64, 3)); !errors.Is(err, challenge.ErrMalformed) {
		t.Errorf("FoldRound with one offset for three buffers: %v, want ErrMalformed", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if m.HeldBytes() != 0 {
		t.Errorf("HeldBytes after Close = %d", m.HeldBytes())
	}
	if err := m.FoldRound(ctx, make([]int, 3), 64, make([]uint64, 3), make([]uint64, 3)); !errors.Is(err, ErrClosed) {
		t.Errorf("FoldRound after Close: %v, want ErrClosed", err)
	}
	checkNoLeak(t, d)
}

// TestMemProverOnGPU: a whole memory proof answered over the device's
// buffers equals the CPU prover's answer, and the verifier accepts it.
func TestMemProverOnGPU(t *testing.T) {
	ctx := context.Background()
	d := openFake(t, Options{})
	seed, sigma := [32]byte{9}, [32]byte{4, 2}
	p := challenge.MemParams{Buffers: 4, BufferBytes: 64 << 10, WindowBytes: 4 << 10, Rounds: 8, Checks: 4}
	b, err := NewMemBackend(ctx, d.Devices()[0], seed, p)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := challenge.NewMemProverOn(b, p)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	got, err := gpu.Respond(ctx, sigma)
	if err != nil {
		t.Fatalf("gpu Respond: %v", err)
	}
	cpu, err := challenge.NewMemProver(ctx, seed, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	want, err := cpu.Respond(ctx, sigma)
	if err != nil {
		t.Fatalf("cpu Respond: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the GPU's memory proof differs from the CPU's")
	}
	if err := challenge.MemVerify(seed, p, sigma, [32]byte{1}, got, 0, 0); err != nil {
		t.Errorf("MemVerify: %v", err)
	}
}

// TestMemBackendOutOfMemory: buffers that do not fit fail with
// ErrOutOfMemory and leave nothing allocated.
func TestMemBackendOutOfMemory(t *testing.T) {
	d := openFake(t, Options{}, "FAKE_MEM_LIMIT=300000")
	p := challenge.MemParams{Buffers: 5, BufferBytes: 64 << 10, WindowBytes: 4 << 10, Rounds: 1, Checks: 1}
	_, err := NewMemBackend(context.Background(), d.Devices()[0], [32]byte{}, p)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("NewMemBackend of 320 KiB on 300 kB: %v, want ErrOutOfMemory", err)
	}
	checkNoLeak(t, d)
}

// The Prover is what a supplier's audit prover takes for real GPUs.
var _ audit.DeviceProver = (*Prover)(nil)

// TestProverMemory: Prover.Memory fills GPU g's buffers on the device
// Commit places seed g on, and they answer as the CPU's do.
func TestProverMemory(t *testing.T) {
	ctx := context.Background()
	d := openFake(t, Options{})
	pr := NewProver(d, ProverOptions{})
	seed := [32]byte{7}
	p := challenge.MemParams{Buffers: 2, BufferBytes: 32 << 10, WindowBytes: 2 << 10, Rounds: 4, Checks: 2}
	for g := range 3 {
		b, err := pr.Memory(ctx, g, seed, p)
		if err != nil {
			t.Fatalf("Memory(%d): %v", g, err)
		}
		if mb := b.(*MemBackend); mb.dev != d.Devices()[g%len(d.Devices())] {
			t.Errorf("gpu %d's buffers on device %d, want %d", g, mb.dev.Info.Ordinal, g%len(d.Devices()))
		}
		m, err := challenge.NewMemProverOn(b, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Respond(ctx, [32]byte{1})
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := challenge.MemVerify(seed, p, [32]byte{1}, [32]byte{2}, got, 0, 0); err != nil {
			t.Errorf("gpu %d: MemVerify: %v", g, err)
		}
	}
	if _, err := pr.Memory(ctx, -1, seed, p); err == nil {
		t.Error("Memory(-1): nil error")
	}
	checkNoLeak(t, d)
}

// TestFillStagingBounded: the host staging memory of one device's fill is
// at most FillInFlight buffers, however many cores the host has (it was
// one buffer per core: 32 GiB on a 128-core host).
func TestFillStagingBounded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(128))
	prof, ok := catalog.Lookup("h200")
	if !ok {
		t.Fatal("no h200 in the catalog")
	}
	p := challenge.RealMemParams(prof)
	if got := fillWorkers(p) * p.BufferBytes; got > FillInFlight*challenge.RealMemBuffer {
		t.Errorf("an H200's fill stages %d MiB on a 128-core host, want at most %d MiB", got>>20, FillInFlight*challenge.RealMemBuffer>>20)
	}
	if got := fillWorkers(challenge.MemParams{Buffers: 2}); got != 2 {
		t.Errorf("two buffers: %d workers, want 2", got)
	}
}
