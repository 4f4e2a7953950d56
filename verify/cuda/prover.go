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
	// KernelAuto uses the tensor-core kernel where the device has int8
	// tensor cores (compute capability 8.0 or later) and N is a multiple
	// of 128, the simple kernel otherwise.
	KernelAuto Kernel = iota
	// KernelSimple is the plain integer kernel (any device, any N).
	KernelSimple
	// KernelMMA is the tensor-core kernel; Commit fails where it cannot run.
	KernelMMA
)

func (k Kernel) String() string {
	switch k {
	case KernelSimple:
		return "simple"
	case KernelMMA:
		return "mma"
	}
	return "auto"
}

// ParseKernel reads "auto", "simple" or "mma".
func ParseKernel(s string) (Kernel, error) {
	for _, k := range []Kernel{KernelAuto, KernelSimple, KernelMMA} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("cuda: kernel %q: want auto, simple or mma", s)
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
	Kernel string `json:"kernel"` // "simple" or "mma"
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
	fits := dev.Info.TensorCoreInt8() && n%128 == 0
	switch pr.opts.Kernel {
	case KernelSimple:
		return KernelSimple, nil
	case KernelMMA:
		if !fits {
			return 0, fmt.Errorf("cuda: the mma kernel needs compute capability 8.0 or later and n a multiple of 128 (device %s, n=%d)", ccString(dev.Info), n)
		}
		return KernelMMA, nil
	}
	if fits {
		return KernelMMA, nil
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
		// Three n×n buffers: the chain's two rows of ping-pong and B (Bᵀ
		// for the tensor-core kernel, transposed on the device through
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
		if k == KernelMMA {
			if err := s.htod(next, b.Data); err != nil {
				return err
			}
			if err := s.launch(kTranspose, [3]uint32{nn, ceilDiv(nn, 256), 1}, [3]uint32{256, 1, 1}, next, bm, nn); err != nil {
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
			if k == KernelMMA {
				err = s.launch(kStepMMA, [3]uint32{nn / 16, nn / 128, 1}, [3]uint32{128, 1, 1}, cur, bm, next, nn)
			} else {
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
