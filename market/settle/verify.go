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
	LeaseID      string      `json:"lease_id"`
	Role         market.Role `json:"role"`
	Supplier     string      `json:"supplier"`
	Renter       string      `json:"renter"`
	Receipts     int         `json:"receipts"`
	Attempts     []uint32    `json:"attempts"`
	GPUSeconds   float64     `json:"gpu_seconds"`
	AmountMicros int64       `json:"amount_micros"` // the last receipt's cum_amount_micros
	PaidMicros   int64       `json:"paid_micros"`   // the best voucher's
	Settled      bool        `json:"settled"`       // a valid settlement is kept
	Valid        bool        `json:"valid"`         // no problems
	Problems     []string    `json:"problems"`
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
	rep := Report{
		LeaseID:  lease.String(),
		Role:     meta.Role,
		Supplier: t.Supplier.String(),
		Renter:   t.Renter.String(),
		Attempts: []uint32{},
		Problems: []string{},
	}
	problem := func(format string, args ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...)) }

	// Receipts.
	var hashes [][32]byte // by seq-1, while seqs are contiguous
	var receipts []*Receipt
	var prev *Receipt
	err = l.eachReceipt(lease, func(seq uint64, raw []byte) error {
		want := uint64(len(hashes)) + 1
		if seq != want {
			problem("receipt seq %d missing (next kept is seq %d)", want, seq)
			return errStop
		}
		raw = bytes.Clone(raw)
		hashes = append(hashes, sha256.Sum256(raw))
		r, err := OpenReceipt(raw)
		if err != nil {
			problem("receipt seq %d: %v", seq, err)
			receipts, prev = append(receipts, nil), nil
			return nil
		}
		receipts = append(receipts, r)
		checkChained(t, r, seq, prev, now, problem)
		if !slices.Contains(rep.Attempts, r.Attempt) {
			rep.Attempts = append(rep.Attempts, r.Attempt)
		}
		prev = r
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	slices.Sort(rep.Attempts)
	rep.Receipts = len(hashes)
	if n := len(receipts); n > 0 && receipts[n-1] != nil {
		last := receipts[n-1]
		rep.GPUSeconds = float64(last.CumGpuMs) / 1000
		rep.AmountMicros = last.CumAmountMicros
	}
	seqOf := make(map[[32]byte]int, len(hashes))
	for i, h := range hashes {
		seqOf[h] = i + 1
	}
	receiptOf := func(h [32]byte) *Receipt {
		if i, ok := seqOf[h]; ok {
			return receipts[i-1]
		}
		return nil
	}

	// The best voucher.
	bestRaw, _, err := l.bestVoucher(lease)
	if err != nil {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	var best *Voucher
	if bestRaw != nil {
		if best, err = OpenVoucher(bestRaw); err != nil {
			problem("best voucher: %v", err)
		} else {
			checkVoucherOf(t, best, "best voucher", problem)
			rep.PaidMicros = best.CumAmountMicros
			if r := receiptOf(best.Acked); r == nil {
				problem("best voucher nonce %d acknowledges %s, no kept receipt", best.Nonce, market.ID(best.Acked).Short())
			} else if best.CumAmountMicros > r.CumAmountMicros {
				problem("best voucher nonce %d pays %d micros, above receipt seq %d's %d", best.Nonce, best.CumAmountMicros, r.Seq, r.CumAmountMicros)
			}
		}
	}

	// The renter's voucher for each receipt.
	if meta.Role == market.RoleRenter {
		var prevV *Voucher
		acks := 0
		err = l.eachSeq(ksAcks, lease, func(seq uint64, raw []byte) error {
			acks++
			what := fmt.Sprintf("voucher of seq %d", seq)
			v, err := OpenVoucher(bytes.Clone(raw))
			if err != nil {
				problem("%s: %v", what, err)
				return nil
			}
			checkVoucherOf(t, v, what, problem)
			switch r := receiptOf(v.Acked); {
			case seq == 0 || seq > uint64(len(receipts)) || r == nil || r.Seq != seq:
				problem("%s acknowledges %s, not receipt seq %d", what, market.ID(v.Acked).Short(), seq)
			case v.CumAmountMicros != r.CumAmountMicros:
				problem("%s pays %d micros, the receipt charges %d", what, v.CumAmountMicros, r.CumAmountMicros)
			}
			if prevV != nil && (v.Nonce <= prevV.Nonce || v.CumAmountMicros < prevV.CumAmountMicros) {
				problem("%s: nonce %d pays %d micros after nonce %d paid %d", what, v.Nonce, v.CumAmountMicros, prevV.Nonce, prevV.CumAmountMicros)
			}
			prevV = v
			return nil
		})
		if err != nil {
			return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
		}
		switch {
		case acks != len(hashes):
			problem("%d receipts but %d vouchers", len(hashes), acks)
		case prevV != nil && best != nil && prevV.Hash != best.Hash:
			problem("the best voucher is not the last receipt's")
		}
	}

	// The statement and its settlement.
	stmtRaw, err := l.get(ksStatements, lease[:])
	if err != nil {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	if stmtRaw != nil {
		checkStatementOf(t, stmtRaw, hashes, receipts, best, problem)
	}
	stlRaw, err := l.get(ksSettlements, lease[:])
	if err != nil {
		return Report{}, fmt.Errorf("settle: verify lease %s: %w", lease.Short(), err)
	}
	if stlRaw != nil {
		before := len(rep.Problems)
		switch s, err := OpenSettlement(stlRaw); {
		case err != nil:
			problem("settlement: %v", err)
		case s.Supplier != t.Supplier:
			problem("settlement signed by %s, not the lease's supplier", s.Supplier)
		case !bytes.Equal(s.Statement.Raw, stmtRaw):
			problem("settlement countersigns statement %s, not the one kept", market.ID(s.Statement.Hash).Short())
		}
		rep.Settled = len(rep.Problems) == before
	}
	rep.Valid = len(rep.Problems) == 0
	return rep, nil
}

// checkChained checks receipt r, kept at seq, against the terms and the
// receipt before it (nil when it is seq 1 or could not be opened).
func checkChained(t Terms, r *Receipt, seq uint64, prev *Receipt, now time.Time, problem func(string, ...any)) {
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
	if err := CheckUsage(r); err != nil {
		problem("receipt seq %d: %v", seq, err)
	}
	end := r.End()
	if end.After(now.Add(MaxClockSkew)) {
		problem("receipt seq %d ends %s, in the future", seq, end.UTC().Format(time.RFC3339))
	}
	if end.After(t.End.Add(t.Interval)) {
		problem("receipt seq %d ends %s, after the lease", seq, end.UTC().Format(time.RFC3339))
	}
	prevEnd, prevCum := t.Start.UnixMilli(), int64(0)
	if prev != nil {
		prevEnd, prevCum = prev.EndMs, prev.CumGpuMs
		switch {
		case !bytes.Equal(r.PrevHash, prev.Hash[:]):
			problem("receipt seq %d: prev_hash %x is not the hash of seq %d", seq, r.PrevHash, prev.Seq)
		case r.Attempt < prev.Attempt:
			problem("receipt seq %d: attempt %d after attempt %d", seq, r.Attempt, prev.Attempt)
		case r.Attempt == prev.Attempt && prev.Final:
			problem("receipt seq %d: attempt %d ended with seq %d", seq, r.Attempt, prev.Seq)
		}
	}
	if seq == 1 || prev != nil {
		if r.CumGpuMs != prevCum+r.GpuMs {
			problem("receipt seq %d: cum_gpu_ms %d, want %d + %d", seq, r.CumGpuMs, prevCum, r.GpuMs)
		}
		switch {
		case seq == 1 && r.StartMs < prevEnd:
			problem("receipt seq 1 starts at %d ms, before the lease's start, %d ms", r.StartMs, prevEnd)
		case r.StartMs < prevEnd-MaxOverlap.Milliseconds():
			problem("receipt seq %d starts at %d ms, over %s before %d ms", seq, r.StartMs, MaxOverlap, prevEnd)
		}
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

// checkStatementOf checks the kept statement against the receipts and the
// best voucher.
func checkStatementOf(t Terms, raw []byte, hashes [][32]byte, receipts []*Receipt, best *Voucher, problem func(string, ...any)) {
	s, err := OpenStatement(raw)
	if err != nil {
		problem("statement: %v", err)
		return
	}
	switch {
	case s.Renter != t.Renter:
		problem("statement signed by %s, not the lease's renter", s.Renter)
		return
	case s.Supplier != t.Supplier || s.LeaseID != t.LeaseID || !bytes.Equal(s.JobId, t.JobID):
		problem("statement is for lease %s, supplier %s, job %x", s.LeaseID.Short(), s.Supplier, s.JobId)
		return
	case s.FinalSeq > uint64(len(hashes)):
		problem("statement's final_seq %d, only %d receipts kept", s.FinalSeq, len(hashes))
		return
	}
	if root := ReceiptsRoot(hashes[:s.FinalSeq]); !bytes.Equal(s.ReceiptsRoot, root[:]) {
		problem("statement's receipts_root %x is not the root of receipts 1..%d, %x", s.ReceiptsRoot, s.FinalSeq, root)
	}
	if s.FinalSeq == 0 {
		return
	}
	switch r := receipts[s.FinalSeq-1]; {
	case r == nil:
	case s.CumGpuMs != r.CumGpuMs || s.TotalMicros != r.CumAmountMicros:
		problem("statement states %d gpu-ms, %d micros; receipt seq %d has %d, %d", s.CumGpuMs, s.TotalMicros, r.Seq, r.CumGpuMs, r.CumAmountMicros)
	}
	if best == nil || !bytes.Equal(s.FinalVoucherHash, best.Hash[:]) {
		problem("statement's final_voucher_hash %x is not the best voucher's", s.FinalVoucherHash)
	}
}
