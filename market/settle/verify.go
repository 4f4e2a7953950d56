package settle

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Report is the audit of one lease's records (gpumesh receipts --verify).
type Report struct {
	LeaseID    string      `json:"lease_id"`
	Role       market.Role `json:"role"`
	Supplier   string      `json:"supplier"`
	Renter     string      `json:"renter"`
	Receipts   int         `json:"receipts"`
	Attempts   []uint32    `json:"attempts"`
	GPUSeconds float64     `json:"gpu_seconds"`
	// UtilPct and MemUsedBytes are the GPUs' utilisation and memory in
	// use over the receipts whose usage was measured, weighted by their
	// gpu_ms; null when no receipt's was (simulated GPUs).
	UtilPct      *float64 `json:"util_pct"`
	MemUsedBytes *uint64  `json:"mem_used_bytes"`
	AmountMicros int64    `json:"amount_micros"` // the last receipt's cum_amount_micros
	PaidMicros   int64    `json:"paid_micros"`   // the best voucher's
	Settled      bool     `json:"settled"`       // a valid settlement is kept
	Valid        bool     `json:"valid"`         // no problems
	Problems     []string `json:"problems"`
}

// Verify audits what the ledger keeps of lease as of now. It opens every
// receipt, voucher, statement and settlement again (every signature) and
// checks: receipts are seq 1, 2, ... with no gap, each names the hash of
// the one before, all are signed by the lease's supplier for its renter,
// job, GPUs and price; CheckUsage holds for each, cum_gpu_ms adds up,
// intervals do not overlap by more than MaxOverlap, none ends after now
// plus MaxClockSkew or after the lease plus one interval, attempts never
// go back and an attempt that ended takes no more receipts. The best
// voucher is the renter's, acknowledges a kept receipt and pays no more
// than it; at the renter, every receipt has its voucher, nonces increase
// and amounts pay each receipt in full. A statement's root, totals and
// final voucher match the receipts; a settlement countersigns exactly the
// statement kept. Each problem names the record and seq where it is; the
// report is Valid when there are none. The error is for a lease the
// ledger does not keep, or a store failure.
func (l *Ledger) Verify(lease market.ID, now time.Time) (Report, error) {
	meta, t, err := l.meta(lease)
	if err != nil {
		return Report{}, fmt.Errorf("settle: verify: %w", err)
	}
	a := &audit{t: t, now: now, rep: Report{
		LeaseID:  lease.String(),
		Role:     meta.Role,
		Supplier: t.Supplier.String(),
		Renter:   t.Renter.String(),
		Attempts: []uint32{},
		Problems: []string{},
	}}
	if err := l.auditReceipts(lease, a); err != nil {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	best, err := l.auditBestVoucher(lease, a)
	if err != nil {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	if meta.Role == market.RoleRenter {
		if err := l.auditVouchers(lease, a, best); err != nil {
			return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
		}
	}
	if err := l.auditStatement(lease, a, best); err != nil {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	a.rep.Valid = len(a.rep.Problems) == 0
	return a.rep, nil
}

// audit is one run of Verify: the lease's terms, the report it fills and
// the receipts it found, for the checks of the records that follow them.
type audit struct {
	t   Terms
	now time.Time
	rep Report

	hashes   [][32]byte // by seq-1, while seqs are contiguous
	receipts []*Receipt // likewise; nil where one could not be opened
	seqOf    map[[32]byte]int
}

// problem records a problem.
func (a *audit) problem(format string, args ...any) {
	a.rep.Problems = append(a.rep.Problems, fmt.Sprintf(format, args...))
}

// receiptOf is the kept receipt whose hash is h, or nil.
func (a *audit) receiptOf(h [32]byte) *Receipt {
	if i, ok := a.seqOf[h]; ok {
		return a.receipts[i-1]
	}
	return nil
}

// auditReceipts opens the kept receipts in seq order up to the first gap,
// checks each (checkChained) and fills the report's receipt totals.
func (l *Ledger) auditReceipts(lease market.ID, a *audit) error {
	var prev *Receipt
	err := l.eachReceipt(lease, func(seq uint64, raw []byte) error {
		want := uint64(len(a.hashes)) + 1
		if seq != want {
			a.problem("receipt seq %d missing (next kept is seq %d)", want, seq)
			return errStop
		}
		raw = bytes.Clone(raw)
		a.hashes = append(a.hashes, sha256.Sum256(raw))
		r, err := OpenReceipt(raw)
		if err != nil {
			a.problem("receipt seq %d: %v", seq, err)
			a.receipts, prev = append(a.receipts, nil), nil
			return nil
		}
		a.receipts = append(a.receipts, r)
		checkChained(a.t, r, seq, prev, a.now, a.problem)
		if !slices.Contains(a.rep.Attempts, r.Attempt) {
			a.rep.Attempts = append(a.rep.Attempts, r.Attempt)
		}
		prev = r
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	slices.Sort(a.rep.Attempts)
	a.rep.Receipts = len(a.hashes)
	if n := len(a.receipts); n > 0 && a.receipts[n-1] != nil {
		last := a.receipts[n-1]
		a.rep.GPUSeconds = float64(last.CumGpuMs) / 1000
		a.rep.AmountMicros = last.CumAmountMicros
	}
	a.rep.UtilPct, a.rep.MemUsedBytes = measuredUsage(a.receipts)
	a.seqOf = make(map[[32]byte]int, len(a.hashes))
	for i, h := range a.hashes {
		a.seqOf[h] = i + 1
	}
	return nil
}

// auditBestVoucher opens and checks the best voucher kept, if any, and
// returns it (nil when there is none or it does not open).
func (l *Ledger) auditBestVoucher(lease market.ID, a *audit) (*Voucher, error) {
	raw, _, err := l.bestVoucher(lease)
	if err != nil || raw == nil {
		return nil, err
	}
	best, err := OpenVoucher(raw)
	if err != nil {
		a.problem("best voucher: %v", err)
		return nil, nil
	}
	checkVoucherOf(a.t, best, "best voucher", a.problem)
	a.rep.PaidMicros = best.CumAmountMicros
	checkBestVoucher(best, a.receiptOf(best.Acked), a.problem)
	return best, nil
}

// auditVouchers checks, at the renter, the voucher kept for each receipt,
// and that the last of them is the best.
func (l *Ledger) auditVouchers(lease market.ID, a *audit, best *Voucher) error {
	var prev *Voucher
	acks := 0
	err := l.eachSeq(ksAcks, lease, func(seq uint64, raw []byte) error {
		acks++
		what := fmt.Sprintf("voucher of seq %d", seq)
		v, err := OpenVoucher(bytes.Clone(raw))
		if err != nil {
			a.problem("%s: %v", what, err)
			return nil
		}
		checkVoucherOf(a.t, v, what, a.problem)
		checkVoucherPays(v, seq, len(a.receipts), a.receiptOf(v.Acked), what, a.problem)
		checkVoucherAfter(v, prev, what, a.problem)
		prev = v
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case acks != len(a.hashes):
		a.problem("%d receipts but %d vouchers", len(a.hashes), acks)
	case prev != nil && best != nil && prev.Hash != best.Hash:
		a.problem("the best voucher is not the last receipt's")
	}
	return nil
}

// auditStatement checks the statement kept, if any, and the settlement
// kept, if any; the report is Settled when that settlement is sound.
func (l *Ledger) auditStatement(lease market.ID, a *audit, best *Voucher) error {
	stmtRaw, err := l.get(ksStatements, lease[:])
	if err != nil {
		return err
	}
	if stmtRaw != nil {
		checkStatementOf(a.t, stmtRaw, a.hashes, a.receipts, best, a.problem)
	}
	stlRaw, err := l.get(ksSettlements, lease[:])
	if err != nil || stlRaw == nil {
		return err
	}
	before := len(a.rep.Problems)
	checkSettlementOf(a.t, stlRaw, stmtRaw, a.problem)
	a.rep.Settled = len(a.rep.Problems) == before
	return nil
}

// checkChained checks receipt r, kept at seq, against the terms and the
// receipt before it (nil when it is seq 1 or could not be opened): one
// check per property, in this order.
func checkChained(t Terms, r *Receipt, seq uint64, prev *Receipt, now time.Time, problem func(string, ...any)) {
	checkReceiptTerms(t, r, seq, problem)
	if err := CheckUsage(r); err != nil {
		problem("receipt seq %d: %v", seq, err)
	}
	checkReceiptEnd(t, r, seq, now, problem)
	if prev != nil {
		checkReceiptLink(r, seq, prev, problem)
	}
	if seq == 1 || prev != nil {
		checkReceiptCumulative(t, r, seq, prev, problem)
		checkReceiptStart(t, r, seq, prev, problem)
	}
}

// checkReceiptTerms: r is the receipt kept at seq, signed by the lease's
// supplier for its lease, renter, job, GPUs and price.
func checkReceiptTerms(t Terms, r *Receipt, seq uint64, problem func(string, ...any)) {
	switch {
	case r.Seq != seq:
		problem("receipt kept as seq %d is seq %d", seq, r.Seq)
	case r.Supplier != t.Supplier:
		problem("receipt seq %d signed by %s, not the lease's supplier", seq, r.Supplier)
	case r.LeaseID != t.LeaseID || r.Renter != t.Renter || !bytes.Equal(r.JobId, t.JobID):
		problem("receipt seq %d is for lease %s, renter %s, job %x", seq, r.LeaseID.Short(), r.Renter, r.JobId)
	case int(r.Gpus) != t.GPUs || r.PriceMicros != t.PriceMicros:
		problem("receipt seq %d: %d gpus at %d micros, the lease is %d at %d", seq, r.Gpus, r.PriceMicros, t.GPUs, t.PriceMicros)
	}
}

// checkReceiptEnd: r ends no later than now plus MaxClockSkew, nor after
// the lease plus one interval.
func checkReceiptEnd(t Terms, r *Receipt, seq uint64, now time.Time, problem func(string, ...any)) {
	end := r.End()
	if end.After(now.Add(MaxClockSkew)) {
		problem("receipt seq %d ends %s, in the future", seq, end.UTC().Format(time.RFC3339))
	}
	if end.After(t.End.Add(t.Interval)) {
		problem("receipt seq %d ends %s, after the lease", seq, end.UTC().Format(time.RFC3339))
	}
}

// checkReceiptLink: r names the hash of prev, its attempt does not go
// back, and prev did not end r's attempt.
func checkReceiptLink(r *Receipt, seq uint64, prev *Receipt, problem func(string, ...any)) {
	switch {
	case !bytes.Equal(r.PrevHash, prev.Hash[:]):
		problem("receipt seq %d: prev_hash %x is not the hash of seq %d", seq, r.PrevHash, prev.Seq)
	case r.Attempt < prev.Attempt:
		problem("receipt seq %d: attempt %d after attempt %d", seq, r.Attempt, prev.Attempt)
	case r.Attempt == prev.Attempt && prev.Final:
		problem("receipt seq %d: attempt %d ended with seq %d", seq, r.Attempt, prev.Seq)
	}
}

// checkReceiptCumulative: r's cum_gpu_ms is prev's (0 for seq 1, prev
// nil) plus its own gpu_ms.
func checkReceiptCumulative(t Terms, r *Receipt, seq uint64, prev *Receipt, problem func(string, ...any)) {
	prevCum := int64(0)
	if prev != nil {
		prevCum = prev.CumGpuMs
	}
	if r.CumGpuMs != prevCum+r.GpuMs {
		problem("receipt seq %d: cum_gpu_ms %d, want %d + %d", seq, r.CumGpuMs, prevCum, r.GpuMs)
	}
}

// checkReceiptStart: seq 1 starts no earlier than the lease; a later
// receipt no more than MaxOverlap before prev ended.
func checkReceiptStart(t Terms, r *Receipt, seq uint64, prev *Receipt, problem func(string, ...any)) {
	prevEnd := t.Start.UnixMilli()
	if prev != nil {
		prevEnd = prev.EndMs
	}
	switch {
	case seq == 1 && r.StartMs < prevEnd:
		problem("receipt seq 1 starts at %d ms, before the lease's start, %d ms", r.StartMs, prevEnd)
	case r.StartMs < prevEnd-MaxOverlap.Milliseconds():
		problem("receipt seq %d starts at %d ms, over %s before %d ms", seq, r.StartMs, MaxOverlap, prevEnd)
	}
}

// checkVoucherOf checks that v is the lease's renter's, for the lease.
func checkVoucherOf(t Terms, v *Voucher, what string, problem func(string, ...any)) {
	switch {
	case v.Renter != t.Renter:
		problem("%s signed by %s, not the lease's renter", what, v.Renter)
	case v.Supplier != t.Supplier || v.LeaseID != t.LeaseID:
		problem("%s is for lease %s, supplier %s", what, v.LeaseID.Short(), v.Supplier)
	}
}

// checkBestVoucher: the best voucher acknowledges a kept receipt, acked
// (nil when none is kept), and pays no more than it charges.
func checkBestVoucher(best *Voucher, acked *Receipt, problem func(string, ...any)) {
	switch {
	case acked == nil:
		problem("best voucher nonce %d acknowledges %s, no kept receipt", best.Nonce, market.ID(best.Acked).Short())
	case best.CumAmountMicros > acked.CumAmountMicros:
		problem("best voucher nonce %d pays %d micros, above receipt seq %d's %d", best.Nonce, best.CumAmountMicros, acked.Seq, acked.CumAmountMicros)
	}
}

// checkVoucherPays: v, kept for seq, acknowledges the receipt of that seq,
// one of the kept receipts (acked: the one it names, or nil), and pays it
// in full.
func checkVoucherPays(v *Voucher, seq uint64, kept int, acked *Receipt, what string, problem func(string, ...any)) {
	switch {
	case seq == 0 || seq > uint64(kept) || acked == nil || acked.Seq != seq:
		problem("%s acknowledges %s, not receipt seq %d", what, market.ID(v.Acked).Short(), seq)
	case v.CumAmountMicros != acked.CumAmountMicros:
		problem("%s pays %d micros, the receipt charges %d", what, v.CumAmountMicros, acked.CumAmountMicros)
	}
}

// checkVoucherAfter: v's nonce is above prev's (the voucher of the seq
// before; nil for the first) and it pays no less.
func checkVoucherAfter(v, prev *Voucher, what string, problem func(string, ...any)) {
	if prev != nil && (v.Nonce <= prev.Nonce || v.CumAmountMicros < prev.CumAmountMicros) {
		problem("%s: nonce %d pays %d micros after nonce %d paid %d", what, v.Nonce, v.CumAmountMicros, prev.Nonce, prev.CumAmountMicros)
	}
}

// checkStatementOf checks the kept statement against the terms, the
// receipts and the best voucher.
func checkStatementOf(t Terms, raw []byte, hashes [][32]byte, receipts []*Receipt, best *Voucher, problem func(string, ...any)) {
	s, err := OpenStatement(raw)
	if err != nil {
		problem("statement: %v", err)
		return
	}
	if !checkStatementTerms(t, s, len(hashes), problem) {
		return
	}
	if root := ReceiptsRoot(hashes[:s.FinalSeq]); !bytes.Equal(s.ReceiptsRoot, root[:]) {
		problem("statement's receipts_root %x is not the root of receipts 1..%d, %x", s.ReceiptsRoot, s.FinalSeq, root)
	}
	if s.FinalSeq == 0 {
		return
	}
	if r := receipts[s.FinalSeq-1]; r != nil && (s.CumGpuMs != r.CumGpuMs || s.TotalMicros != r.CumAmountMicros) {
		problem("statement states %d gpu-ms, %d micros; receipt seq %d has %d, %d", s.CumGpuMs, s.TotalMicros, r.Seq, r.CumGpuMs, r.CumAmountMicros)
	}
	if best == nil || !bytes.Equal(s.FinalVoucherHash, best.Hash[:]) {
		problem("statement's final_voucher_hash %x is not the best voucher's", s.FinalVoucherHash)
	}
}

// checkStatementTerms: s is signed by the lease's renter for its supplier,
// lease and job, and states no more receipts than kept. It reports
// whether s passed, so that the checks against the receipts may follow.
func checkStatementTerms(t Terms, s *Statement, kept int, problem func(string, ...any)) bool {
	switch {
	case s.Renter != t.Renter:
		problem("statement signed by %s, not the lease's renter", s.Renter)
	case s.Supplier != t.Supplier || s.LeaseID != t.LeaseID || !bytes.Equal(s.JobId, t.JobID):
		problem("statement is for lease %s, supplier %s, job %x", s.LeaseID.Short(), s.Supplier, s.JobId)
	case s.FinalSeq > uint64(kept):
		problem("statement's final_seq %d, only %d receipts kept", s.FinalSeq, kept)
	default:
		return true
	}
	return false
}

// checkSettlementOf: the settlement kept is signed by the lease's supplier
// and countersigns exactly the statement kept (stmtRaw, nil when none).
func checkSettlementOf(t Terms, raw, stmtRaw []byte, problem func(string, ...any)) {
	switch s, err := OpenSettlement(raw); {
	case err != nil:
		problem("settlement: %v", err)
	case s.Supplier != t.Supplier:
		problem("settlement signed by %s, not the lease's supplier", s.Supplier)
	case !bytes.Equal(s.Statement.Raw, stmtRaw):
		problem("settlement countersigns statement %s, not the one kept", market.ID(s.Statement.Hash).Short())
	}
}

// measuredUsage averages the utilisation (in %) and memory in use of the
// receipts whose usage was measured, weighted by gpu_ms (evenly when
// none has any); nil when none was measured.
func measuredUsage(rs []*Receipt) (*float64, *uint64) {
	var n int
	var w, util, mem float64
	for _, r := range rs {
		if r == nil || !r.UsageMeasured {
			continue
		}
		n++
		wt := float64(r.GpuMs)
		w += wt
		util += wt * float64(r.UtilPermille) / 10
		mem += wt * float64(r.MemUsedBytes)
	}
	if n == 0 {
		return nil, nil
	}
	if w == 0 { // every measured interval was empty: an even mean
		for _, r := range rs {
			if r != nil && r.UsageMeasured {
				util += float64(r.UtilPermille) / 10
				mem += float64(r.MemUsedBytes)
			}
		}
		w = float64(n)
	}
	u, m := util/w, uint64(mem/w)
	return &u, &m
}
