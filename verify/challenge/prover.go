package challenge

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/gpumesh/gpumesh/merkle"
)

// Opening is one opened row of X_T with its Merkle proof (sibling hashes
// from the leaf up, promoted levels skipped).
type Opening struct {
	Index int
	Row   []byte
	Proof [][32]byte
}

// Prover answers the three timed phases of a matrix challenge for all the
// GPUs it claims. gpu indexes the seeds of the last Commit.
type Prover interface {
	// Commit runs the chain for every seed (one per claimed GPU) and
	// returns the Merkle root over the rows of each X_T, in seed order.
	Commit(ctx context.Context, seeds [][32]byte, p Params) ([][32]byte, error)
	// Sweep returns X_T·r mod P for one GPU of the last Commit.
	Sweep(ctx context.Context, gpu int, r []uint64) ([]uint64, error)
	// Open returns the asked rows of one GPU's X_T with Merkle proofs.
	Open(ctx context.Context, gpu int, rows []int) ([]Opening, error)
}

// CPUOptions configures a CPUProver.
type CPUOptions struct {
	// Workers is the number of goroutines that share the work;
	// GOMAXPROCS when 0 or less.
	Workers int
}

// CPUProver is the pure-Go Prover that serves simulated GPUs: rows are
// chained in blocks of 8 across Workers goroutines, and within a block
// the product is tiled over rows of B (about 256 KiB at a time) so that
// they stay in cache. It keeps X_T and its Merkle tree per GPU (N² bytes
// plus 2·N hashes) from Commit until the next Commit. It is safe for
// concurrent use.
type CPUProver struct {
	workers int
	// skip and wrong are the fractions of rows a cheating prover leaves
	// out or corrupts (see Cheat); zero for an honest prover.
	skip, wrong float64

	mu   sync.Mutex
	gpus []*gpuResult // from the last Commit
}

// gpuResult is what the prover keeps for one GPU between the phases.
type gpuResult struct {
	p    Params
	x    Matrix
	tree *merkle.Tree
}

// NewCPUProver returns an honest CPU prover.
func NewCPUProver(opts CPUOptions) *CPUProver {
	return &CPUProver{workers: opts.Workers}
}

// Commit implements Prover. The GPUs are computed one after another, each
// using all workers (simulated GPUs share the CPU).
func (c *CPUProver) Commit(ctx context.Context, seeds [][32]byte, p Params) ([][32]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(seeds) < 1 || len(seeds) > MaxGPUs {
		return nil, fmt.Errorf("challenge: commit: %d gpus, want 1 to %d: %w", len(seeds), MaxGPUs, ErrMalformed)
	}
	xs := make([]Matrix, len(seeds))
	for g, seed := range seeds {
		x, err := c.compute(ctx, seed, p)
		if err != nil {
			return nil, fmt.Errorf("challenge: commit gpu %d: %w", g, err)
		}
		xs[g] = x
	}
	return c.CommitComputed(ctx, xs, p)
}

// compute returns X_T for seed. A cheating prover leaves the skip
// fraction of rows out (filled with cheap ChaCha8 junk) and corrupts the
// wrong fraction after computing.
func (c *CPUProver) compute(ctx context.Context, seed [32]byte, p Params) (Matrix, error) {
	n := p.N
	bs, err := splitB(ctx, seed, n, c.workers)
	if err != nil {
		return Matrix{}, err
	}
	skipped := make([]bool, n)
	for _, i := range pickRows(seed, 0, n, c.skip) {
		skipped[i] = true
	}
	x := Matrix{N: n, Data: make([]byte, n*n)}
	blocks := (n + rowBlock - 1) / rowBlock
	err = parallel(ctx, c.workers, blocks, func(b int) error {
		blk := make([]byte, rowBlock*n)
		acc := make([]uint64, rowBlock*n/4)
		var idx []int
		for i := b * rowBlock; i < min(n, (b+1)*rowBlock); i++ {
			if skipped[i] {
				fillStream(x.Row(i), subSeed(seed, labelJunk, uint32(i)))
				continue
			}
			deriveRowA(blk[len(idx)*n:(len(idx)+1)*n], seed, i)
			idx = append(idx, i)
		}
		if err := chainRows(ctx, blk, len(idx), n, p.T, bs, acc); err != nil {
			return err
		}
		for r, i := range idx {
			copy(x.Row(i), blk[r*n:(r+1)*n])
		}
		return nil
	})
	if err != nil {
		return Matrix{}, err
	}
	for _, i := range pickRows(seed, 1, n, c.wrong) {
		row := x.Row(i)
		row[i%n] ^= 0xFF
	}
	return x, nil
}

// pickRows returns round(frac·n) distinct rows (at least one when frac >
// 0), drawn from seed: the rows a cheater skips (which 0) or corrupts
// (which 1).
func pickRows(seed [32]byte, which uint32, n int, frac float64) []int {
	if frac <= 0 {
		return nil
	}
	k := min(n, max(1, int(math.Round(frac*float64(n)))))
	return drawDistinct(rand.NewChaCha8(subSeed(seed, labelPick, which)), n, k)
}

// result returns the kept result for gpu.
func (c *CPUProver) result(gpu int) (*gpuResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gpu < 0 || gpu >= len(c.gpus) {
		return nil, fmt.Errorf("challenge: gpu %d of %d: %w", gpu, len(c.gpus), ErrNotCommitted)
	}
	return c.gpus[gpu], nil
}

// Sweep implements Prover.
func (c *CPUProver) Sweep(ctx context.Context, gpu int, r []uint64) ([]uint64, error) {
	res, err := c.result(gpu)
	if err != nil {
		return nil, err
	}
	n := res.p.N
	if len(r) != n {
		return nil, fmt.Errorf("challenge: sweep gpu %d: vector of %d, want %d: %w", gpu, len(r), n, ErrMalformed)
	}
	s := make([]uint64, n)
	err = parallel(ctx, c.workers, (n+63)/64, func(b int) error {
		for i := b * 64; i < min(n, (b+1)*64); i++ {
			s[i] = dotRow(res.x.Row(i), r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("challenge: sweep gpu %d: %w", gpu, err)
	}
	return s, nil
}

// Open implements Prover.
func (c *CPUProver) Open(ctx context.Context, gpu int, rows []int) ([]Opening, error) {
	res, err := c.result(gpu)
	if err != nil {
		return nil, err
	}
	n := res.p.N
	if len(rows) > n {
		return nil, fmt.Errorf("challenge: open gpu %d: %d rows of %d: %w", gpu, len(rows), n, ErrMalformed)
	}
	out := make([]Opening, len(rows))
	for j, i := range rows {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("challenge: open gpu %d: row %d of %d: %w", gpu, i, n, ErrMalformed)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[j] = Opening{Index: i, Row: slices.Clone(res.x.Row(i)), Proof: res.tree.Proof(i)}
	}
	return out, nil
}
