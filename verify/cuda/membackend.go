package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gpumesh/gpumesh/verify/challenge"
)

// foldThreads is the block size of gm_fold_partial (a power of two).
const foldThreads = 256

// foldBlockWords is how many words one block of gm_fold_partial folds:
// 256 KiB, 128 words per thread, so that each thread's two powers of ρ
// (about 60 modular products) cost less than its words.
const foldBlockWords = 32768

// MemBackend is the challenge.MemBackend of one GPU: the memory proof's
// buffers, filled on the host with challenge.FillMemBuffer and copied to
// device memory. FoldRound folds one window of every buffer with two
// kernels (partial sums per block of 256 KiB, then their sum per buffer)
// and copies Buffers·8 bytes back. It is safe for concurrent use, one
// round at a time.
type MemBackend struct {
	dev *Device
	p   challenge.MemParams

	mu       sync.Mutex
	bufs     []devPtr
	args     devPtr // 2·Buffers words: the windows' addresses, then the points
	partials devPtr // Buffers·blocks words
	out      devPtr // Buffers words
	blocks   int    // the partials' capacity per buffer
	host     []byte // staging for args and out
	closed   bool
}

var _ challenge.MemBackend = (*MemBackend)(nil)

// FillInFlight is the most memory-proof buffers NewMemBackend fills on
// the host at once for one device: its host staging memory is
// FillInFlight·BufferBytes (1 GiB of 256 MiB buffers), whatever the
// number of cores, and a prover filling 8 GPUs at once stages 8 GiB.
const FillInFlight = 4

// fillWorkers is how many buffers of p NewMemBackend fills at once: one
// staging buffer each.
func fillWorkers(p challenge.MemParams) int {
	return max(1, min(FillInFlight, runtime.GOMAXPROCS(0), p.Buffers))
}

// NewMemBackend fills the buffers of a memory proof of size p for seed on
// dev. Filling is not part of the timed proof: fillWorkers(p) goroutines
// each fill one buffer on the host (challenge.FillMemBuffer) into their
// own staging buffer and copy it to the device, then take the next, so
// that generating and copying overlap and the host stages at most
// FillInFlight buffers per device. A device without room for them fails
// with ErrOutOfMemory (wrapped), having freed what it took.
func NewMemBackend(ctx context.Context, dev *Device, seed [32]byte, p challenge.MemParams) (*MemBackend, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m := &MemBackend{dev: dev, p: p, host: make([]byte, 16*p.Buffers)}
	if err := m.alloc(); err != nil {
		m.Close()
		return nil, err
	}
	workers := fillWorkers(p)
	var (
		next   atomic.Int64
		failed atomic.Bool
		wg     sync.WaitGroup
	)
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			staging := make([]byte, p.BufferBytes)
			for !failed.Load() {
				j := int(next.Add(1) - 1)
				if j >= p.Buffers {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[w] = err
					failed.Store(true)
					return
				}
				challenge.FillMemBuffer(staging, seed, j)
				if err := dev.do(func(s *devState) error { return s.htod(m.bufs[j], staging) }); err != nil {
					errs[w] = fmt.Errorf("cuda: memory proof: fill: buffer %d: %w", j, err)
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		m.Close()
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// alloc takes the buffers and the round's small arrays on the device.
func (m *MemBackend) alloc() error {
	p := m.p
	m.blocks = foldBlocks(p.WindowBytes / 8)
	return m.dev.do(func(s *devState) error {
		m.bufs = make([]devPtr, 0, p.Buffers)
		for j := range p.Buffers {
			b, err := s.alloc(p.BufferBytes)
			if err != nil {
				return fmt.Errorf("cuda: memory proof: buffer %d of %d: %w", j, p.Buffers, err)
			}
			m.bufs = append(m.bufs, b)
		}
		var err error
		if m.args, err = s.alloc(16 * p.Buffers); err != nil {
			return err
		}
		if m.out, err = s.alloc(8 * p.Buffers); err != nil {
			return err
		}
		m.partials, err = s.alloc(8 * p.Buffers * m.blocks)
		return err
	})
}

// foldBlocks is the number of gm_fold_partial blocks per window of words.
func foldBlocks(words int) int { return max(1, (words+foldBlockWords-1)/foldBlockWords) }

// FoldRound implements challenge.MemBackend.
func (m *MemBackend) FoldRound(ctx context.Context, offs []int, window int, rhos, out []uint64) error {
	p := m.p
	if len(offs) != p.Buffers || len(rhos) != p.Buffers || len(out) != p.Buffers {
		return fmt.Errorf("cuda: fold round: %d offsets, %d points, %d results for %d buffers: %w", len(offs), len(rhos), len(out), p.Buffers, challenge.ErrMalformed)
	}
	for _, o := range offs {
		if o < 0 || window < 0 || o+window > p.BufferBytes {
			return fmt.Errorf("cuda: fold round: window [%d, %d) outside a buffer of %d: %w", o, o+window, p.BufferBytes, challenge.ErrMalformed)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	words := window / 8
	if words == 0 {
		clear(out)
		return nil
	}
	blocks := foldBlocks(words)
	nb := p.Buffers
	for j := range nb {
		binary.LittleEndian.PutUint64(m.host[8*j:], uint64(m.bufs[j])+uint64(offs[j]))
		binary.LittleEndian.PutUint64(m.host[8*(nb+j):], rhos[j]%challenge.P)
	}
	return m.dev.do(func(s *devState) error {
		if blocks > m.blocks {
			if err := s.free(m.partials); err != nil {
				return err
			}
			m.partials = 0
			pt, err := s.alloc(8 * nb * blocks)
			if err != nil {
				return err
			}
			m.partials, m.blocks = pt, blocks
		}
		if err := s.htod(m.args, m.host[:16*nb]); err != nil {
			return err
		}
		err := s.launch(kFoldPartial, [3]uint32{uint32(blocks), uint32(nb), 1}, [3]uint32{foldThreads, 1, 1},
			m.args, m.args+devPtr(8*nb), m.partials, uint32(words), uint32(foldBlockWords))
		if err != nil {
			return err
		}
		if err := s.launch(kFoldReduce, [3]uint32{uint32(nb), 1, 1}, [3]uint32{32, 1, 1}, m.partials, m.out, uint32(blocks)); err != nil {
			return err
		}
		res := m.host[:8*nb]
		if err := s.dtoh(res, m.out); err != nil {
			return err
		}
		for j := range nb {
			out[j] = binary.LittleEndian.Uint64(res[8*j:])
		}
		return nil
	})
}

// HeldBytes implements challenge.MemBackend: the buffers' bytes on the
// device.
func (m *MemBackend) HeldBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	return int64(len(m.bufs)) * int64(m.p.BufferBytes)
}

// Close implements challenge.MemBackend: it frees the device memory. It
// is safe to call twice.
func (m *MemBackend) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	ptrs := append([]devPtr{m.args, m.out, m.partials}, m.bufs...)
	m.bufs = nil
	return m.dev.do(func(s *devState) error {
		var first error
		for _, p := range ptrs {
			if err := s.free(p); err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}
