package challenge

import "errors"

// Sentinel errors; functions wrap them with what failed, so test with
// errors.Is.
var (
	// ErrParams: sizes outside the bounds of Params.Validate or
	// MemParams.Validate.
	ErrParams = errors.New("invalid challenge parameters")
	// ErrMalformed: an input of the wrong shape (length, index range,
	// proof length) — from a peer, never a computation's result.
	ErrMalformed = errors.New("malformed challenge input")
	// ErrBadProof: a Merkle proof that does not lead to the committed root.
	ErrBadProof = errors.New("merkle proof does not match the root")
	// ErrWrongRow: an opened row that differs from the recomputed one.
	ErrWrongRow = errors.New("opened row differs from the recomputed row")
	// ErrSweepMismatch: a sweep value that differs from row·r mod P.
	ErrSweepMismatch = errors.New("sweep value differs from row·r mod p")
	// ErrWrongIndex: openings that are not exactly the rows asked for.
	ErrWrongIndex = errors.New("openings do not match the rows asked for")
	// ErrNotCommitted: Sweep or Open for a GPU without a commit.
	ErrNotCommitted = errors.New("no commit for this gpu")
	// ErrTooSlow: a measured time above the accepted bound.
	ErrTooSlow = errors.New("slower than the claimed device allows")
	// ErrTooFast: a measured time below what the claimed device can do.
	ErrTooFast = errors.New("faster than physically possible for the claimed device")
	// ErrMemDeadline: a memory proof answered after its deadline.
	ErrMemDeadline = errors.New("memory proof missed its deadline")
	// ErrMemDigest: a memory proof window digest that does not match.
	ErrMemDigest = errors.New("memory proof digest differs from the recomputed window")
	// ErrBadCheat: a cheat specification ParseCheat cannot read.
	ErrBadCheat = errors.New("invalid cheat specification")
)
