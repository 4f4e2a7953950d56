package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/verify/challenge"
)

// Kernel selects the chain kernel a Prover launches.
type Kernel int

const (
	// KernelAuto uses the tiled tensor-core kernel where the device has
	// int8 tensor cores (compute capability 8.0 or later) and N is a
	// multiple of 128, the simple kernel otherwise.
	KernelAuto Kernel = iota
	// KernelSimple is the plain integer kernel (any device, any N).
	KernelSimple
	// KernelMMA is the untiled tensor-core kernel (operands straight from
	// global memory): simpler, slower, a fallback to compare with.
	KernelMMA
	// KernelTiled is the tensor-core kernel tiled through shared memory.
	KernelTiled
)

// kernelNames are the kernels' names, by Kernel.
var kernelNames = []string{"auto", "simple", "mma", "tiled"}

func (k Kernel) String() string {
	if k >= 0 && int(k) < len(kernelNames) {
		return kernelNames[k]
	}
	return fmt.Sprintf("Kernel(%d)", int(k))
}

// ParseKernel reads "auto", "simple", "mma" or "tiled".
func ParseKernel(s string) (Kernel, error) {
	for k, name := range kernelNames {
		if name == s {
			return Kernel(k), nil
		}
	}
	return 0, fmt.Errorf("cuda: kernel %q: want auto, simple, mma or tiled", s)
}

// ProverOptions configures a Prover.
type ProverOptions struct {
	// Kernel selects the chain kernel; KernelAuto by default.
	Kernel Kernel
	// Workers is the number of host goroutines that derive A and B and
	// hash the Merkle trees; GOMAXPROCS when 0 or less.
	Workers int
}

// GPUTiming is how long each phase of one GPU's part of a Commit took.
type GPUTiming struct {
	GPU    int    `json:"gpu"`    // the seed's index
	Device int    `json:"device"` // the CUDA ordinal that computed it
	Kernel string `json:"kernel"` // "simple", "mma" or "tiled"
	// Derive: A and B on the host (challenge.Derive).
	Derive time.Duration `json:"derive_ns"`
	// Upload: copying A and B to the device (and transposing B).
	Upload time.Duration `json:"upload_ns"`
	// Chain: the T steps, on the device's clock (events).
	Chain time.Duration `json:"chain_ns"`
	// Download: copying X_T back.
	Download time.Duration `json:"download_ns"`
}

// CommitTiming is the phases of the last Commit.
type CommitTiming struct {
	GPUs []GPUTiming `json:"gpus"`
	// Tree: hashing every X_T's Merkle tree on the host.
	Tree time.Duration `json:"tree_ns"`
	// Total: the whole Commit, wall clock.
	Total time.Duration `json:"total_ns"`
}

// Prover is the challenge.Prover of real NVIDIA GPUs. Commit derives A
// and B on the host with challenge.Derive, copies them to a device, runs
// the T chain steps there, copies X_T back and hands it to a
// challenge.CPUProver (CommitComputed), which builds the Merkle tree and
// answers Sweep and Open exactly as it does for its own X_T. Seed g runs
// on device g mod the number of devices; devices run at once. It is safe
// for concurrent use; it does not own the Driver.
type Prover struct {
	devs []*Device
	opts ProverOptions
	host *challenge.CPUProver

	mu   sync.Mutex
	last CommitTiming
}

var _ challenge.Prover = (*Prover)(nil)

// NewProver returns a Prover on all of drv's devices.
func NewProver(drv *Driver, opts ProverOptions) *Prover { return NewProverOn(drv.Devices(), opts) }

// NewProverOn returns a Prover on devs, some devices of a Driver.
func NewProverOn(devs []*Device, opts ProverOptions) *Prover {
	return &Prover{devs: devs, opts: opts, host: challenge.NewCPUProver(challenge.CPUOptions{Workers: opts.Workers})}
}

// LastTiming returns the phases of the last successful Commit.
func (pr *Prover) LastTiming() CommitTiming {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.last
}

// Commit implements challenge.Prover.
func (pr *Prover) Commit(ctx context.Context, seeds [][32]byte, p challenge.Params) ([][32]byte, error) {
	start := time.Now()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(seeds) < 1 || len(seeds) > challenge.MaxGPUs {
		return nil, fmt.Errorf("cuda: commit: %d gpus, want 1 to %d: %w", len(seeds), challenge.MaxGPUs, challenge.ErrMalformed)
	}
	devs := pr.devs
	if len(devs) == 0 {
		return nil, fmt.Errorf("cuda: commit: %w", ErrNoDevice)
	}
	xs := make([]challenge.Matrix, len(seeds))
	timings := make([]GPUTiming, len(seeds))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for d, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := d; g < len(seeds); g += len(devs) {
				x, tm, err := pr.compute(ctx, dev, seeds[g], p)
				if err != nil {
					errs[d] = fmt.Errorf("cuda: commit gpu %d on device %d: %w", g, dev.Info.Ordinal, err)
					return
				}
				tm.GPU = g
				xs[g], timings[g] = x, tm
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	treeStart := time.Now()
	roots, err := pr.host.CommitComputed(ctx, xs, p)
	if err != nil {
		return nil, err
	}
	pr.mu.Lock()
	pr.last = CommitTiming{GPUs: timings, Tree: time.Since(treeStart), Total: time.Since(start)}
	pr.mu.Unlock()
	return roots, nil
}

// Memory fills the memory proof's buffers of size p for seed
// (challenge.FillMemBuffer) in the memory of the device that Commit
// places seed g on (device g mod the number of devices), for the g-th GPU
// of a challenge. With Commit, Sweep and Open it makes the Prover the
// audit.DeviceProver of a supplier's real GPUs.
func (pr *Prover) Memory(ctx context.Context, g int, seed [32]byte, p challenge.MemParams) (challenge.MemBackend, error) {
	if len(pr.devs) == 0 {
		return nil, fmt.Errorf("cuda: memory proof: %w", ErrNoDevice)
	}
	if g < 0 {
		return nil, fmt.Errorf("cuda: memory proof of gpu %d: %w", g, challenge.ErrMalformed)
	}
	return NewMemBackend(ctx, pr.devs[g%len(pr.devs)], seed, p)
}

// Sweep implements challenge.Prover (on the host, over the X_T the last
// Commit copied back).
func (pr *Prover) Sweep(ctx context.Context, gpu int, r []uint64) ([]uint64, error) {
	return pr.host.Sweep(ctx, gpu, r)
}

// Open implements challenge.Prover.
func (pr *Prover) Open(ctx context.Context, gpu int, rows []int) ([]challenge.Opening, error) {
	return pr.host.Open(ctx, gpu, rows)
}

// kernelFor picks the chain kernel for dev and n.
func (pr *Prover) kernelFor(dev *Device, n int) (Kernel, error) {
	fits := dev.tensorKernels() && n%128 == 0
	switch k := pr.opts.Kernel; k {
	case KernelSimple:
		return KernelSimple, nil
	case KernelMMA, KernelTiled:
		if dev.TensorErr != nil {
			return 0, fmt.Errorf("cuda: the %s kernel did not load: %w", k, dev.TensorErr)
		}
		if !fits {
			return 0, fmt.Errorf("cuda: the %s kernel needs compute capability 8.0 or later and n a multiple of 128 (device %s, n=%d)", k, ccString(dev.Info), n)
		}
		return k, nil
	}
	if fits {
		return KernelTiled, nil
	}
	return KernelSimple, nil
}

// compute returns X_T for seed, computed on dev.
func (pr *Prover) compute(ctx context.Context, dev *Device, seed [32]byte, p challenge.Params) (challenge.Matrix, GPUTiming, error) {
	n := p.N
	tm := GPUTiming{Device: dev.Info.Ordinal}
	k, err := pr.kernelFor(dev, n)
	if err != nil {
		return challenge.Matrix{}, tm, err
	}
	tm.Kernel = k.String()
	t0 := time.Now()
	a, b := challenge.Derive(seed, n)
	tm.Derive = time.Since(t0)
	if err := ctx.Err(); err != nil {
		return challenge.Matrix{}, tm, err
	}
	x := challenge.Matrix{N: n, Data: make([]byte, n*n)}
	err = dev.do(func(s *devState) (err error) {
		// Three n×n buffers: X_t and X_{t+1}, swapped each step, and B (Bᵀ
		// for the tensor-core kernels, transposed on the device through
		// the second ping-pong buffer).
		var bufs [3]devPtr
		defer func() {
			for _, p := range bufs {
				if e := s.free(p); e != nil && err == nil {
					err = e
				}
			}
		}()
		for i := range bufs {
			if bufs[i], err = s.alloc(n * n); err != nil {
				return err
			}
		}
		cur, next, bm := bufs[0], bufs[1], bufs[2]
		nn := uint32(n)
		t := time.Now()
		if err := s.htod(cur, a.Data); err != nil {
			return err
		}
		if k != KernelSimple {
			if err := s.htod(next, b.Data); err != nil {
				return err
			}
			if err := s.launch(kTranspose, [3]uint32{nn / 32, nn / 32, 1}, [3]uint32{256, 1, 1}, next, bm, nn); err != nil {
				return err
			}
		} else if err := s.htod(bm, b.Data); err != nil {
			return err
		}
		if err := s.sync(); err != nil {
			return err
		}
		tm.Upload = time.Since(t)
		if err := s.recordStart(); err != nil {
			return err
		}
		for step := 0; step < p.T; step++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			switch k {
			case KernelTiled:
				err = s.launch(kStepTiled, [3]uint32{nn / 128, nn / 128, 1}, [3]uint32{256, 1, 1}, cur, bm, next, nn)
			case KernelMMA:
				err = s.launch(kStepMMA, [3]uint32{nn / 16, nn / 128, 1}, [3]uint32{128, 1, 1}, cur, bm, next, nn)
			default:
				err = s.launch(kStep, [3]uint32{nn, ceilDiv(nn, 256), 1}, [3]uint32{256, 1, 1}, cur, bm, next, nn)
			}
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			cur, next = next, cur
			// Launches return at once: wait now and then, so that a
			// cancelled challenge stops within a few steps, not after
			// the whole queue (a bubble of microseconds each time).
			if step%syncEvery == syncEvery-1 {
				if err := s.sync(); err != nil {
					return err
				}
			}
		}
		secs, err := s.elapsed()
		if err != nil {
			return err
		}
		tm.Chain = time.Duration(secs * float64(time.Second))
		t = time.Now()
		if err := s.dtoh(x.Data, cur); err != nil {
			return err
		}
		tm.Download = time.Since(t)
		return nil
	})
	if err != nil {
		return challenge.Matrix{}, tm, err
	}
	return x, tm, nil
}

// syncEvery is how many chain steps the host queues before it waits for
// them and checks its context.
const syncEvery = 4

func ceilDiv(a, b uint32) uint32 { return (a + b - 1) / b }

func ccString(i DeviceInfo) string { return fmt.Sprintf("%d.%d", i.Major, i.Minor) }
