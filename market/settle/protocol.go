package settle

import (
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
)

// Record parameters of settlement. These are the source of truth for
// docs/PROTOCOL.md; changing any of them is a wire change: bump the
// version in the identifier and document it there.
const (
	// Signed-envelope domains, one per record type.
	ReceiptDomain    = "gpumesh-receipt-v1"
	VoucherDomain    = "gpumesh-voucher-v1"
	StatementDomain  = "gpumesh-statement-v1"
	SettlementDomain = "gpumesh-settlement-v1"
	EvidenceDomain   = "gpumesh-evidence-v1"

	// Payload types written into each envelope.
	ReceiptPayloadType    = "/gpumesh/receipt/1"
	VoucherPayloadType    = "/gpumesh/voucher/1"
	StatementPayloadType  = "/gpumesh/statement/1"
	SettlementPayloadType = "/gpumesh/settlement/1"
	EvidencePayloadType   = "/gpumesh/evidence/1"

	// Largest signed envelope of each record type, in bytes. A settlement
	// embeds a statement; evidence embeds up to two receipts or vouchers.
	MaxReceiptSize    = 2 << 10
	MaxVoucherSize    = 1 << 10
	MaxStatementSize  = 2 << 10
	MaxSettlementSize = 4 << 10
	MaxEvidenceSize   = 8 << 10

	// LeaseIDBytes and JobIDBytes are the lengths of a lease ID and a job
	// ID; HashBytes is the length of every hash a record carries.
	LeaseIDBytes = 32
	JobIDBytes   = 16
	HashBytes    = 32

	// MaxStateBytes bounds a receipt's state and a statement's outcome.
	MaxStateBytes = 32

	// MaxGPUMs bounds gpu_ms and cum_gpu_ms: a lease of market.MaxCount
	// GPUs for market.MaxDuration. It keeps AmountMicros within int64.
	MaxGPUMs = int64(market.MaxDuration/time.Millisecond) * market.MaxCount
	// MaxAmountMicros bounds every amount: MaxGPUMs at market.MaxPriceMicros.
	MaxAmountMicros = MaxGPUMs / 3_600_000 * market.MaxPriceMicros
	// MaxMemUsedBytes bounds a receipt's mem_used_bytes: 16 TiB, far
	// above any GPU's memory.
	MaxMemUsedBytes = 1 << 44

	// MaxOverlap is how far a receipt may start before the previous one
	// ended, for the renter (clock jitter between intervals); the supplier
	// never issues an overlap.
	MaxOverlap = 2 * time.Second
	// MaxClockSkew is how far in the renter's future a receipt may end:
	// the skew the network tolerates (p2p.ClockSkew), so that a supplier
	// whose clock runs that far ahead can still bill, at most that much
	// early.
	MaxClockSkew = p2p.ClockSkew
)

// Outcomes of a lease, as a statement names them.
const (
	OutcomeSucceeded  = "succeeded"
	OutcomeFailed     = "failed"
	OutcomeStopped    = "stopped"
	OutcomeFailedOver = "failed-over"
	OutcomeExpired    = "expired"
	OutcomeHalted     = "halted"
	// OutcomeInterrupted: the supplier restarted under the job.
	OutcomeInterrupted = "interrupted"
	// OutcomeFenced: the renter moved the job to another supplier.
	OutcomeFenced = "fenced"
)

// StateRunning is the state of a receipt that is not final.
const StateRunning = "running"

// Kinds of evidence. Each names what its records prove; see OpenEvidence.
const (
	// KindReceiptEquivocation: a and b are receipts by one supplier for
	// the same lease and seq with different hashes.
	KindReceiptEquivocation = "receipt-equivocation"
	// KindChainFork: a and b are receipts by one supplier for one lease,
	// b.seq = a.seq+1, and b.prev_hash is not a's hash.
	KindChainFork = "chain-fork"
	// KindInflatedUsage: a is a receipt whose gpu_ms exceeds its interval
	// times its GPUs; b is empty.
	KindInflatedUsage = "inflated-usage"
	// KindAmountMismatch: a is a receipt whose cum_amount_micros is not
	// AmountMicros(price_micros, cum_gpu_ms); b is empty.
	KindAmountMismatch = "amount-mismatch"
	// KindVoucherNonceReuse: a and b are vouchers by one renter for one
	// lease with the same nonce and different amounts.
	KindVoucherNonceReuse = "voucher-nonce-reuse"
	// KindVoucherDecrease: a and b are vouchers by one renter for one
	// lease, b.nonce > a.nonce and b's amount below a's.
	KindVoucherDecrease = "voucher-decrease"
)

// The record types of settlement, for p2p.Seal and p2p.Open.
var (
	ReceiptType    = p2p.RecordType{Domain: ReceiptDomain, PayloadType: ReceiptPayloadType, MaxSize: MaxReceiptSize}
	VoucherType    = p2p.RecordType{Domain: VoucherDomain, PayloadType: VoucherPayloadType, MaxSize: MaxVoucherSize}
	StatementType  = p2p.RecordType{Domain: StatementDomain, PayloadType: StatementPayloadType, MaxSize: MaxStatementSize}
	SettlementType = p2p.RecordType{Domain: SettlementDomain, PayloadType: SettlementPayloadType, MaxSize: MaxSettlementSize}
	EvidenceType   = p2p.RecordType{Domain: EvidenceDomain, PayloadType: EvidencePayloadType, MaxSize: MaxEvidenceSize}
)

// validOutcome reports whether s is one of the outcomes.
func validOutcome(s string) bool {
	switch s {
	case OutcomeSucceeded, OutcomeFailed, OutcomeStopped, OutcomeFailedOver, OutcomeExpired, OutcomeHalted, OutcomeInterrupted, OutcomeFenced:
		return true
	}
	return false
}

// validKind reports whether s is one of the evidence kinds.
func validKind(s string) bool {
	switch s {
	case KindReceiptEquivocation, KindChainFork, KindInflatedUsage, KindAmountMismatch, KindVoucherNonceReuse, KindVoucherDecrease:
		return true
	}
	return false
}
