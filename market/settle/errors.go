package settle

import (
	"errors"

	"github.com/gpumesh/gpumesh/p2p"
)

// Failures of settlement's own. The others are p2p's named errors (a
// malformed or forged record: p2p.ErrMalformed, p2p.ErrSignerMismatch,
// ...; an old voucher: p2p.ErrStale) and market.ErrMismatch (a record that
// contradicts the lease's terms or the records it answers). Every refused
// record wraps exactly one of them all, so callers can tell them apart
// with errors.Is.
var (
	// ErrEvidence: the record proves that its signer misbehaved (two
	// receipts for one seq, a forked chain, inflated usage, a wrong
	// amount, a reused voucher nonce, a decreasing voucher). An Evidence
	// record was stored and handed to the Ledger's OnEvidence functions;
	// the caller should stop dealing with the peer on this lease.
	ErrEvidence = errors.New("peer misbehaved: evidence stored")
	// ErrStaleAttempt: a receipt of another attempt than the current one
	// (the attempt is the fencing token: a supplier the job moved away
	// from keeps metering). Not evidence; the receipt is not stored.
	ErrStaleAttempt = errors.New("receipt of a stale attempt")
	// ErrOutOfOrder: a receipt whose seq is not the next one; the
	// missing ones must come first. Not stored.
	ErrOutOfOrder = errors.New("receipt out of order")
	// ErrFuture: a receipt that ends in the renter's future by more than
	// MaxClockSkew. It is p2p.ErrFutureDated.
	ErrFuture = p2p.ErrFutureDated
	// ErrOverCredit: the meter will not issue another receipt that adds
	// usage while the renter owes more than the credit limit; the
	// supplier must pause or stop the job (and may issue a final receipt).
	ErrOverCredit = errors.New("renter over its credit limit")
	// ErrSettled: the lease already has a statement (or, at the supplier,
	// a settlement), so it takes no more receipts or vouchers, and no
	// other statement.
	ErrSettled = errors.New("lease already settled")
	// ErrInflatedUsage: a receipt claims more GPU time than its interval
	// times its GPUs (CheckUsage).
	ErrInflatedUsage = errors.New("usage above wall-clock time times gpus")
	// ErrAmountMismatch: a receipt's cumulative amount is not the price
	// of its cumulative usage (CheckUsage).
	ErrAmountMismatch = errors.New("amount is not the price of the usage")
	// ErrBadEvidence: an evidence record whose records do not prove what
	// its kind claims (no conflict, different signers or leases, ...).
	ErrBadEvidence = errors.New("evidence does not prove its claim")
)
