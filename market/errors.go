package market

import "errors"

// Validation failures of the market's own. The others are p2p's named
// errors (p2p.ErrMalformed, p2p.ErrExpired, ...); every rejected record
// wraps exactly one of them all, so callers can tell them apart with
// errors.Is.
var (
	// ErrMismatch: a record contradicts a record it embeds or answers
	// (a proposal whose price is not its quote's, a lease whose ID is not
	// its proposal's, a trade print not by the lease's supplier, ...).
	ErrMismatch = errors.New("record contradicts the record it embeds")
	// ErrReplayed: a record already accepted (the same signer and nonce,
	// or a second trade print of one lease) and not yet expired.
	ErrReplayed = errors.New("record replayed")
)
