package challenge

import (
	"context"
	"fmt"
)

// CommitComputed makes c answer Sweep and Open for matrices X_T computed
// elsewhere, as its own Commit would have after computing them: a GPU
// prover (package verify/cuda) computes X_T on the device, one per seed
// in seed order, and hands them here. It builds each Merkle tree on c's
// workers, replaces the last Commit's results with xs and returns the
// roots. Each matrix must be p.N×p.N; c keeps them (no copy).
func (c *CPUProver) CommitComputed(ctx context.Context, xs []Matrix, p Params) ([][32]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(xs) < 1 || len(xs) > MaxGPUs {
		return nil, fmt.Errorf("challenge: commit: %d gpus, want 1 to %d: %w", len(xs), MaxGPUs, ErrMalformed)
	}
	results := make([]*gpuResult, len(xs))
	roots := make([][32]byte, len(xs))
	for g, x := range xs {
		if x.N != p.N || len(x.Data) != p.N*p.N {
			return nil, fmt.Errorf("challenge: commit gpu %d: matrix of %d bytes (n=%d), want n=%d: %w", g, len(x.Data), x.N, p.N, ErrMalformed)
		}
		tree, err := buildTree(ctx, x, c.workers)
		if err != nil {
			return nil, fmt.Errorf("challenge: commit gpu %d: merkle tree: %w", g, err)
		}
		results[g] = &gpuResult{p: p, x: x, tree: tree}
		roots[g] = tree.Root()
	}
	c.mu.Lock()
	c.gpus = results
	c.mu.Unlock()
	return roots, nil
}
