package challenge

import (
	"bytes"
	"context"
	"fmt"

	"github.com/gpumesh/gpumesh/merkle"
)

// Verifier checks the openings of one GPU's challenge. It derives the
// split B once (N² bytes of ChaCha8, 2·N² bytes of memory), so checking
// K rows costs K·T·N² multiply-adds rather than K regenerations of B.
type Verifier struct {
	seed    [32]byte
	p       Params
	workers int
	bs      []uint64
}

// NewVerifier prepares a Verifier for seed and p. workers bounds the
// goroutines of VerifyOpenings (GOMAXPROCS when 0 or less).
func NewVerifier(ctx context.Context, seed [32]byte, p Params, workers int) (*Verifier, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	bs, err := splitB(ctx, seed, p.N, workers)
	if err != nil {
		return nil, fmt.Errorf("challenge: verifier: derive b: %w", err)
	}
	return &Verifier{seed: seed, p: p, workers: workers, bs: bs}, nil
}

// VerifyRow checks one opened row of the GPU with seed: its shape, its
// Merkle proof against root (ErrBadProof), its sweep value s[o.Index]
// against row·r mod P (ErrSweepMismatch), and the row itself against row
// o.Index of X_T recomputed from row o.Index of A by T row-times-matrix
// products (ErrWrongRow), cheapest first. r and s must have N elements
// (ErrMalformed otherwise). It never panics on any input.
func VerifyRow(seed [32]byte, p Params, root [32]byte, r, s []uint64, o Opening) error {
	v, err := NewVerifier(context.Background(), seed, p, 1)
	if err != nil {
		return err
	}
	return v.VerifyRow(context.Background(), root, r, s, o)
}

// VerifyRow is the package-level VerifyRow with B already derived.
func (v *Verifier) VerifyRow(ctx context.Context, root [32]byte, r, s []uint64, o Opening) error {
	if err := v.cheapChecks(root, r, s, o); err != nil {
		return err
	}
	return v.recompute(ctx, []Opening{o})
}

// VerifyOpenings checks that openings answer exactly the rows asked for,
// in order (ErrWrongIndex), and then every opening as VerifyRow does,
// recomputing the rows as one block across the verifier's workers. It
// returns the first failure.
func (v *Verifier) VerifyOpenings(ctx context.Context, root [32]byte, r, s []uint64, rows []int, openings []Opening) error {
	if len(openings) != len(rows) {
		return fmt.Errorf("challenge: %d openings for %d rows: %w", len(openings), len(rows), ErrWrongIndex)
	}
	for j, o := range openings {
		if o.Index != rows[j] {
			return fmt.Errorf("challenge: opening %d is row %d, asked %d: %w", j, o.Index, rows[j], ErrWrongIndex)
		}
		if err := v.cheapChecks(root, r, s, o); err != nil {
			return err
		}
	}
	return v.recompute(ctx, openings)
}

// cheapChecks checks shape, Merkle proof and sweep value of o.
func (v *Verifier) cheapChecks(root [32]byte, r, s []uint64, o Opening) error {
	n := v.p.N
	switch {
	case len(r) != n || len(s) != n:
		return fmt.Errorf("challenge: sweep of %d for vector of %d, want %d: %w", len(s), len(r), n, ErrMalformed)
	case o.Index < 0 || o.Index >= n:
		return fmt.Errorf("challenge: opened row %d of %d: %w", o.Index, n, ErrMalformed)
	case len(o.Row) != n:
		return fmt.Errorf("challenge: row %d: %d bytes, want %d: %w", o.Index, len(o.Row), n, ErrMalformed)
	case len(o.Proof) > MaxProofLen:
		return fmt.Errorf("challenge: row %d: proof of %d hashes: %w", o.Index, len(o.Proof), ErrMalformed)
	}
	if !merkle.Verify(root, n, o.Index, leafHash(o.Index, o.Row), o.Proof) {
		return fmt.Errorf("challenge: row %d: %w", o.Index, ErrBadProof)
	}
	if got, want := s[o.Index], dotRow(o.Row, r); got != want {
		return fmt.Errorf("challenge: row %d: sweep value %d, want %d: %w", o.Index, got, want, ErrSweepMismatch)
	}
	return nil
}

// recompute chains the rows of A at the openings' indices and compares.
func (v *Verifier) recompute(ctx context.Context, openings []Opening) error {
	n := v.p.N
	blocks := (len(openings) + rowBlock - 1) / rowBlock
	return parallel(ctx, v.workers, blocks, func(b int) error {
		part := openings[b*rowBlock : min(len(openings), (b+1)*rowBlock)]
		blk := make([]byte, len(part)*n)
		acc := make([]uint64, len(part)*n/4)
		for j, o := range part {
			deriveRowA(blk[j*n:(j+1)*n], v.seed, o.Index)
		}
		if err := chainRows(ctx, blk, len(part), n, v.p.T, v.bs, acc); err != nil {
			return fmt.Errorf("challenge: recompute rows: %w", err)
		}
		for j, o := range part {
			if !bytes.Equal(blk[j*n:(j+1)*n], o.Row) {
				return fmt.Errorf("challenge: row %d: %w", o.Index, ErrWrongRow)
			}
		}
		return nil
	})
}
