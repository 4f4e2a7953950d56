package settle

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// Payer is the renter's side of a lease: it checks each receipt, keeps it
// and pays it with a voucher in one synced write before answering, states
// the lease's total at the end and keeps the supplier's countersignature.
// It is safe for concurrent use.
type Payer struct {
	led *Ledger
	key crypto.PrivKey
	t   Terms

	mu         sync.Mutex
	last       *Receipt // the last receipt acknowledged; nil: none
	best       *Voucher // the voucher that acknowledged last
	stmt       *Statement
	settlement []byte
}

// NewPayer returns the payer of the lease t names, signing with key (the
// renter's). It resumes from what led keeps for the lease; while a payer
// of the lease is in use in led, it returns that one. The terms are kept
// with the lease and must not change.
func NewPayer(led *Ledger, key crypto.PrivKey, t Terms) (*Payer, error) {
	t, err := led.adopt(market.RoleRenter, key, t)
	if err != nil {
		return nil, fmt.Errorf("settle: payer: %w", err)
	}
	p, err := claim(led, t.LeaseID, func() (*Payer, error) {
		p := &Payer{led: led, key: key, t: t}
		return p, p.resume()
	})
	if err != nil {
		return nil, fmt.Errorf("settle: payer of lease %s: %w", t.LeaseID.Short(), err)
	}
	return p, nil
}

// resume loads the last receipt, the best voucher, the statement and the
// settlement the ledger keeps for the lease.
func (p *Payer) resume() error {
	lease := p.t.LeaseID
	var lastRaw []byte
	var n uint64
	err := p.led.eachReceipt(lease, func(seq uint64, raw []byte) error {
		if n++; seq != n {
			return fmt.Errorf("kept receipt seq %d after seq %d", seq, n-1)
		}
		lastRaw = append(lastRaw[:0], raw...)
		return nil
	})
	if err != nil {
		return err
	}
	if lastRaw != nil {
		if p.last, err = OpenReceipt(lastRaw); err != nil {
			return fmt.Errorf("kept receipt: %w", err)
		}
	}
	bestRaw, _, err := p.led.bestVoucher(lease)
	if err != nil {
		return err
	}
	switch {
	case bestRaw != nil:
		if p.best, err = OpenVoucher(bestRaw); err != nil {
			return fmt.Errorf("kept voucher: %w", err)
		}
		if p.last == nil || p.best.Acked != p.last.Hash {
			return fmt.Errorf("kept voucher does not acknowledge the last kept receipt")
		}
	case p.last != nil:
		return fmt.Errorf("kept receipts but no voucher")
	}
	raw, err := p.led.get(ksStatements, lease[:])
	if err != nil {
		return err
	}
	if raw != nil {
		if p.stmt, err = OpenStatement(raw); err != nil {
			return fmt.Errorf("kept statement: %w", err)
		}
	}
	p.settlement, err = p.led.get(ksSettlements, lease[:])
	return err
}

// Terms are the payer's terms.
func (p *Payer) Terms() Terms { return p.t }

// Accept checks a receipt of the current attempt, and keeps and pays it:
// it returns the voucher envelope to send back, after storing the receipt
// and the voucher in one synced batch.
//
// Checks, in order: the envelope and shape (OpenReceipt); signed by the
// lease's supplier; for this lease, renter and job. A receipt at or below
// the last seq acknowledged returns the voucher already issued for it when
// it is the same receipt, and is receipt-equivocation evidence when it is
// not, whatever its attempt (a seq is never signed twice). Then: of
// attempt (else ErrStaleAttempt: fencing, not evidence); seq is the last
// plus one (else ErrOutOfOrder); prev_hash is the
// last receipt's hash (else chain-fork evidence); CheckUsage (else
// inflated-usage or amount-mismatch evidence); price and GPUs are the
// lease's, cum_gpu_ms adds up, the attempt did not end already, it starts
// no more than MaxOverlap before the last one ended (seq 1: not before the
// lease started), ends no later than MaxClockSkew after now (else ErrFuture) and
// no later than one interval after the lease. Evidence is stored and
// handed to OnEvidence, and the error wraps ErrEvidence; other refused
// receipts are not stored. The voucher's nonce is the last one's plus
// one; it pays the receipt's cum_amount_micros.
func (p *Payer) Accept(receiptRaw []byte, attempt uint32, now time.Time) (voucherRaw []byte, err error) {
	r, err := OpenReceipt(receiptRaw)
	if err != nil {
		p.led.metrics.Receipt(metrics.Renter, metrics.Refused)
		return nil, fmt.Errorf("settle: lease %s: %w", p.t.LeaseID.Short(), err)
	}
	var ev []byte
	func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		voucherRaw, ev, err = p.accept(r, attempt, now)
	}()
	p.led.fire(ev)
	p.led.metrics.Receipt(metrics.Renter, checked(err))
	if err != nil {
		return nil, fmt.Errorf("settle: lease %s: receipt seq %d: %w", p.t.LeaseID.Short(), r.Seq, err)
	}
	p.led.metrics.Voucher(metrics.Renter, metrics.Issued)
	return voucherRaw, nil
}

// accept is Accept's checks, in its order, then the voucher: the parties,
// a seq already acknowledged (again), the attempt and seq, the evidence
// a receipt may be (accuse), then the receipt against the last one
// (checkNext). Only called with p.mu held.
func (p *Payer) accept(r *Receipt, attempt uint32, now time.Time) (voucher, evidence []byte, err error) {
	if err := p.checkParties(r); err != nil {
		return nil, nil, err
	}
	if p.last != nil && r.Seq <= p.last.Seq {
		return p.again(r, now)
	}
	if r.Attempt != attempt {
		return nil, nil, p2p.Errf(ErrStaleAttempt, "attempt %d, the job is at attempt %d", r.Attempt, attempt)
	}
	if p.stmt != nil {
		return nil, nil, ErrSettled
	}
	if want := p.lastSeq() + 1; r.Seq != want {
		return nil, nil, p2p.Errf(ErrOutOfOrder, "want seq %d first", want)
	}
	if ev, accused, err := p.accuse(r, now); accused {
		return nil, ev, err
	}
	if err := p.checkNext(r, now); err != nil {
		return nil, nil, err
	}
	raw, err := p.pay(r, now)
	return raw, nil, err
}

// lastSeq is the seq of the last receipt acknowledged, 0 for none.
func (p *Payer) lastSeq() uint64 {
	if p.last == nil {
		return 0
	}
	return p.last.Seq
}

// checkParties: r is signed by the lease's supplier, for its lease,
// renter and job.
func (p *Payer) checkParties(r *Receipt) error {
	t := p.t
	switch {
	case r.Supplier != t.Supplier:
		return p2p.Errf(p2p.ErrSignerMismatch, "signed by %s, the lease's supplier is %s", r.Supplier, t.Supplier)
	case r.LeaseID != t.LeaseID:
		return p2p.Errf(market.ErrMismatch, "of lease %s", r.LeaseID.Short())
	case r.Renter != t.Renter:
		return p2p.Errf(market.ErrMismatch, "names renter %s", r.Renter)
	case !bytes.Equal(r.JobId, t.JobID):
		return p2p.Errf(market.ErrMismatch, "of job %x, not %x", r.JobId, t.JobID)
	}
	return nil
}

// accuse stores evidence when r proves its signer misbehaved: it forks the
// chain (prev_hash is not the last receipt's hash), or fails CheckUsage.
// accused reports whether it did; err then wraps ErrEvidence (or is the
// failure to store it).
func (p *Payer) accuse(r *Receipt, now time.Time) (evidence []byte, accused bool, err error) {
	if last := p.last; last != nil && !bytes.Equal(r.PrevHash, last.Hash[:]) {
		ev, err := p.led.accuse(p.key, KindChainFork, last.Raw, r.Raw, now,
			fmt.Sprintf("seq %d names prev_hash %x, seq %d is %s", r.Seq, r.PrevHash, last.Seq, market.ID(last.Hash).Short()))
		return ev, true, err
	}
	if err := CheckUsage(r); err != nil {
		kind := KindAmountMismatch
		if errors.Is(err, ErrInflatedUsage) {
			kind = KindInflatedUsage
		}
		ev, err := p.led.accuse(p.key, kind, r.Raw, nil, now, err.Error())
		return ev, true, err
	}
	return nil, false, nil
}

// checkNext checks r, the next seq, against the lease's terms, the last
// receipt acknowledged, now, and the best voucher.
func (p *Payer) checkNext(r *Receipt, now time.Time) error {
	t, last := p.t, p.last
	prevEnd, prevCum := t.Start.UnixMilli(), int64(0)
	if last != nil {
		prevEnd, prevCum = last.EndMs, last.CumGpuMs
	}
	end := r.End()
	switch {
	case r.PriceMicros != t.PriceMicros || int(r.Gpus) != t.GPUs:
		return p2p.Errf(market.ErrMismatch, "%d gpus at %d micros, the lease is %d at %d", r.Gpus, r.PriceMicros, t.GPUs, t.PriceMicros)
	case r.CumGpuMs != prevCum+r.GpuMs:
		return p2p.Errf(market.ErrMismatch, "cum_gpu_ms %d, want %d + %d", r.CumGpuMs, prevCum, r.GpuMs)
	case last != nil && r.Attempt < last.Attempt:
		return p2p.Errf(ErrStaleAttempt, "attempt %d after seq %d of attempt %d", r.Attempt, last.Seq, last.Attempt)
	case last != nil && r.Attempt == last.Attempt && last.Final:
		return p2p.Errf(market.ErrMismatch, "attempt %d ended with seq %d", r.Attempt, last.Seq)
	case last == nil && r.StartMs < prevEnd:
		// Billing starts at the lease's start, never before it.
		return p2p.Errf(market.ErrMismatch, "seq 1 starts at %d ms, before the lease's start, %d ms", r.StartMs, prevEnd)
	case r.StartMs < prevEnd-MaxOverlap.Milliseconds():
		return p2p.Errf(market.ErrMismatch, "starts at %d ms, over %s before %d ms (the end of seq %d or the lease's start)", r.StartMs, MaxOverlap, prevEnd, p.lastSeq())
	case end.After(now.Add(MaxClockSkew)):
		return p2p.Errf(ErrFuture, "ends %s, after now (%s) and %s", end.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), MaxClockSkew)
	case end.After(t.End.Add(t.Interval)):
		return p2p.Errf(market.ErrMismatch, "ends %s, after the lease (%s) and one interval", end.UTC().Format(time.RFC3339), t.End.UTC().Format(time.RFC3339))
	case p.best != nil && r.CumAmountMicros < p.best.CumAmountMicros:
		return p2p.Errf(market.ErrMismatch, "charges %d micros, %d paid already", r.CumAmountMicros, p.best.CumAmountMicros)
	}
	return nil
}

// pay issues the voucher for r, the next nonce paying its
// cum_amount_micros, and keeps r and the voucher together.
func (p *Payer) pay(r *Receipt, now time.Time) ([]byte, error) {
	t := p.t
	nonce := uint64(1)
	if p.best != nil {
		nonce = p.best.Nonce + 1
	}
	msg := &pb.Voucher{
		Version:         p2p.RecordVersion,
		Renter:          []byte(t.Renter),
		Supplier:        []byte(t.Supplier),
		LeaseId:         t.LeaseID[:],
		Nonce:           nonce,
		CumAmountMicros: r.CumAmountMicros,
		ReceiptHash:     r.Hash[:],
		CreatedMs:       now.UnixMilli(),
	}
	raw, err := SealVoucher(msg, p.key)
	if err != nil {
		return nil, err
	}
	v := &Voucher{Voucher: msg, Hash: sha256.Sum256(raw), Renter: t.Renter, Supplier: t.Supplier, LeaseID: t.LeaseID, Acked: r.Hash, Raw: raw}
	key := seqKey(t.LeaseID, r.Seq)
	err = p.led.s.Batch(func(b store.Batch) error {
		return cmp.Or(
			b.Put(ksReceipts, key, r.Raw),
			b.Put(ksAcks, key, raw),
			b.Put(ksVouchers, t.LeaseID[:], bestEntry(raw, now)),
		)
	})
	if err != nil {
		return nil, fmt.Errorf("keep receipt and voucher: %w", err)
	}
	p.last, p.best = r, v
	return raw, nil
}

// again answers a receipt at or below the last seq acknowledged: the
// voucher already issued when it is the same receipt, else evidence.
func (p *Payer) again(r *Receipt, now time.Time) (voucher, evidence []byte, err error) {
	key := seqKey(p.t.LeaseID, r.Seq)
	kept, err := p.led.get(ksReceipts, key)
	if err != nil || kept == nil {
		return nil, nil, cmp.Or(err, fmt.Errorf("receipt seq %d is not kept", r.Seq))
	}
	if sha256.Sum256(kept) != r.Hash {
		ev, err := p.led.accuse(p.key, KindReceiptEquivocation, kept, r.Raw, now,
			fmt.Sprintf("two receipts for seq %d", r.Seq))
		return nil, ev, err
	}
	v, err := p.led.get(ksAcks, key)
	if err != nil || v == nil {
		return nil, nil, cmp.Or(err, fmt.Errorf("voucher of seq %d is not kept", r.Seq))
	}
	return v, nil, nil
}

// Last returns the last receipt acknowledged, or nil.
func (p *Payer) Last() *Receipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Paid is what the best voucher pays, in micros.
func (p *Payer) Paid() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.best == nil {
		return 0
	}
	return p.best.CumAmountMicros
}

// Statement signs, stores (synced) and returns the renter's statement of
// the lease: every receipt acknowledged (their RFC 6962 root, the last
// seq, its cumulative usage and amount), the last voucher and outcome.
// After it the payer takes no more receipts (ErrSettled). Asking again
// with the same outcome returns the same statement.
func (p *Payer) Statement(outcome string, now time.Time) ([]byte, error) {
	raw, err := p.statement(outcome, now)
	if err != nil {
		return nil, fmt.Errorf("settle: lease %s: statement: %w", p.t.LeaseID.Short(), err)
	}
	return raw, nil
}

func (p *Payer) statement(outcome string, now time.Time) ([]byte, error) {
	if !validOutcome(outcome) {
		return nil, p2p.Errf(p2p.ErrMalformed, "outcome %q is not an outcome", outcome)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stmt != nil {
		if p.stmt.Outcome == outcome {
			return p.stmt.Raw, nil
		}
		return nil, p2p.Errf(ErrSettled, "stated already with outcome %s", p.stmt.Outcome)
	}
	t := p.t
	msg := &pb.Statement{
		Supplier:  []byte(t.Supplier),
		LeaseId:   t.LeaseID[:],
		JobId:     t.JobID,
		Outcome:   outcome,
		CreatedMs: now.UnixMilli(),
	}
	var upto uint64
	if l := p.last; l != nil {
		upto = l.Seq
		msg.FinalSeq, msg.Receipts, msg.CumGpuMs, msg.TotalMicros = l.Seq, l.Seq, l.CumGpuMs, l.CumAmountMicros
		msg.FinalVoucherHash = p.best.Hash[:]
	}
	hashes, err := p.led.receiptHashes(t.LeaseID, upto)
	if err != nil {
		return nil, err
	}
	root := ReceiptsRoot(hashes)
	msg.ReceiptsRoot = root[:]
	raw, err := SealStatement(msg, p.key)
	if err != nil {
		return nil, err
	}
	s, err := OpenStatement(raw)
	if err != nil {
		return nil, err
	}
	if err := p.led.s.Put(ksStatements, t.LeaseID[:], raw); err != nil {
		return nil, fmt.Errorf("keep statement: %w", err)
	}
	p.stmt = s
	return raw, nil
}

// Settle checks the supplier's settlement — signed by the lease's
// supplier, countersigning exactly the payer's statement — and stores it
// (synced). Settling again is a no-op.
func (p *Payer) Settle(settlementRaw []byte) error {
	if err := p.settle(settlementRaw); err != nil {
		return fmt.Errorf("settle: lease %s: settlement: %w", p.t.LeaseID.Short(), err)
	}
	p.led.release(p.t.LeaseID, p)
	return nil
}

func (p *Payer) settle(raw []byte) error {
	s, err := OpenSettlement(raw)
	if err != nil {
		return err
	}
	if s.Supplier != p.t.Supplier {
		return p2p.Errf(p2p.ErrSignerMismatch, "signed by %s, the lease's supplier is %s", s.Supplier, p.t.Supplier)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stmt == nil:
		return p2p.Errf(market.ErrMismatch, "no statement made yet")
	case !bytes.Equal(s.Statement.Raw, p.stmt.Raw):
		return p2p.Errf(market.ErrMismatch, "countersigns statement %s, not ours, %s", market.ID(s.Statement.Hash).Short(), market.ID(p.stmt.Hash).Short())
	case p.settlement != nil:
		return nil
	}
	if err := p.led.s.Put(ksSettlements, p.t.LeaseID[:], raw); err != nil {
		return fmt.Errorf("keep settlement: %w", err)
	}
	p.settlement = raw
	return nil
}
