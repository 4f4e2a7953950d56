package settle

import (
	"bytes"
	"cmp"
	"crypto/sha256"
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

// Meter is the supplier's side of a lease: it issues the receipts, takes
// the renter's vouchers and countersigns the final statement. Each receipt
// and each voucher accepted is stored (synced) before the call returns, so
// a receipt is never sent before it is kept and the same (lease, seq) is
// never signed twice, across crashes too. It is safe for concurrent use.
type Meter struct {
	led *Ledger
	key crypto.PrivKey
	t   Terms

	mu      sync.Mutex
	seqOf   map[[32]byte]uint64 // hash -> seq of every receipt issued
	last    *Receipt            // the last receipt issued; nil: none
	acked   *Receipt            // the receipt the best voucher acknowledges
	pending []*Receipt          // the receipts after acked, in seq order
	best    *Voucher            // nil: none yet
	paidAt  time.Time           // when best was accepted
	settled []byte              // the settlement envelope, once countersigned
	chain   bool                // the lease is settled on chain: only covered counts as paid
	covered int64               // what the chain guarantees of the best chain voucher
}

// NewMeter returns the meter of the lease t names, signing with key (the
// supplier's). It resumes from what led keeps for the lease (after a
// restart: the last receipt, the best voucher); while a meter of the lease
// is in use in led, it returns that one. The terms are kept with the
// lease and must not change.
func NewMeter(led *Ledger, key crypto.PrivKey, t Terms) (*Meter, error) {
	t, err := led.adopt(market.RoleSupplier, key, t)
	if err != nil {
		return nil, fmt.Errorf("settle: meter: %w", err)
	}
	m, err := claim(led, t.LeaseID, func() (*Meter, error) {
		m := &Meter{led: led, key: key, t: t, seqOf: make(map[[32]byte]uint64), paidAt: t.Start}
		return m, m.resume()
	})
	if err != nil {
		return nil, fmt.Errorf("settle: meter of lease %s: %w", t.LeaseID.Short(), err)
	}
	return m, nil
}

// resume loads what the ledger keeps of the lease. Only the receipts
// after the one the best voucher acknowledges are opened; the others are
// hashed.
func (m *Meter) resume() error {
	lease := m.t.LeaseID
	bestRaw, at, err := m.led.bestVoucher(lease)
	if err != nil {
		return err
	}
	if bestRaw != nil {
		if m.best, err = OpenVoucher(bestRaw); err != nil {
			return fmt.Errorf("kept voucher: %w", err)
		}
		m.paidAt = at
	}
	var ackedRaw []byte
	var pending [][]byte
	var n uint64
	err = m.led.eachReceipt(lease, func(seq uint64, raw []byte) error {
		if n++; seq != n {
			return fmt.Errorf("kept receipt seq %d after seq %d", seq, n-1)
		}
		h := sha256.Sum256(raw)
		m.seqOf[h] = seq
		switch {
		case m.best != nil && h == m.best.Acked:
			ackedRaw, pending = bytes.Clone(raw), nil
		case m.best == nil || ackedRaw != nil:
			pending = append(pending, bytes.Clone(raw))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if m.best != nil {
		if ackedRaw == nil {
			return fmt.Errorf("kept voucher acknowledges no kept receipt")
		}
		if m.acked, err = OpenReceipt(ackedRaw); err != nil {
			return fmt.Errorf("kept receipt: %w", err)
		}
		m.last = m.acked
	}
	for _, raw := range pending {
		r, err := OpenReceipt(raw)
		if err != nil {
			return fmt.Errorf("kept receipt: %w", err)
		}
		m.pending = append(m.pending, r)
		m.last = r
	}
	if n > 0 && (m.last == nil || m.last.Seq != n) {
		return fmt.Errorf("%d receipts kept, but the last one could not be resumed", n)
	}
	m.settled, err = m.led.get(ksSettlements, lease[:])
	return err
}

// Terms are the meter's terms.
func (m *Meter) Terms() Terms { return m.t }

// Issue signs, stores (synced) and returns the next receipt of the lease:
// attempt's usage of gpuMs GPU-milliseconds over [start, end]. The seq,
// prev_hash and cumulative fields follow the last receipt issued. It
// refuses usage above end-start times the lease's GPUs
// (ErrInflatedUsage), an interval that starts before the last one ended
// or ends after the lease (plus one interval), an attempt older than the
// last one or one that already ended (ErrStaleAttempt), and a non-final
// receipt that adds usage while OverCredit (ErrOverCredit: pause the
// job). final marks the last receipt of the attempt; state is "running"
// or how the job ended.
func (m *Meter) Issue(attempt uint32, start, end time.Time, gpuMs int64, usage Usage, checkpointHash []byte, final bool, state string) (*Receipt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.issue(attempt, start, end, gpuMs, usage, checkpointHash, final, state)
	if err != nil {
		m.led.metrics.Receipt(metrics.Supplier, metrics.Withheld)
		return nil, fmt.Errorf("settle: lease %s: issue receipt: %w", m.t.LeaseID.Short(), err)
	}
	m.led.metrics.Receipt(metrics.Supplier, metrics.Issued)
	return r, nil
}

// Usage is what a receipt says the GPUs did in its interval: utilisation
// and memory in use, averaged over the interval's samples and the lease's
// GPUs, when Measured (NVML on real GPUs); a receipt of GPUs nothing
// measures (simulated ones) says "not measured", with both 0.
type Usage struct {
	Measured     bool
	UtilPermille uint32 // 0..1000
	MemUsedBytes uint64
}

// issue checks the usage (checkIssue), then signs and keeps the next
// receipt. Only called with m.mu held.
func (m *Meter) issue(attempt uint32, start, end time.Time, gpuMs int64, usage Usage, cp []byte, final bool, state string) (*Receipt, error) {
	if err := m.checkIssue(attempt, start, end, gpuMs, usage.UtilPermille, cp, final, state); err != nil {
		return nil, err
	}
	seq, prevCum, prevHash := uint64(1), int64(0), []byte(nil)
	if l := m.last; l != nil {
		seq, prevCum, prevHash = l.Seq+1, l.CumGpuMs, l.Hash[:]
	}
	self := m.t.Supplier
	msg := &pb.Receipt{
		Version:         p2p.RecordVersion,
		Supplier:        []byte(self),
		Renter:          []byte(m.t.Renter),
		LeaseId:         m.t.LeaseID[:],
		JobId:           m.t.JobID,
		Attempt:         attempt,
		Seq:             seq,
		StartMs:         start.UnixMilli(),
		EndMs:           end.UnixMilli(),
		Gpus:            uint32(m.t.GPUs),
		GpuMs:           gpuMs,
		UtilPermille:    usage.UtilPermille,
		UsageMeasured:   usage.Measured,
		MemUsedBytes:    usage.MemUsedBytes,
		CumGpuMs:        prevCum + gpuMs,
		PriceMicros:     m.t.PriceMicros,
		CumAmountMicros: market.AmountMicros(m.t.PriceMicros, prevCum+gpuMs),
		PrevHash:        prevHash,
		CheckpointHash:  cp,
		Final:           final,
		State:           state,
	}
	if err := checkUsage(msg); err != nil {
		return nil, err
	}
	raw, err := SealReceipt(msg, m.key)
	if err != nil {
		return nil, err
	}
	r := &Receipt{Receipt: msg, Hash: sha256.Sum256(raw), Supplier: self, Renter: m.t.Renter, LeaseID: m.t.LeaseID, Raw: raw}
	// Kept before it is returned: only a kept receipt is ever sent, and
	// after a crash Issue continues after the last kept one.
	if err := m.led.s.Put(ksReceipts, seqKey(m.t.LeaseID, seq), raw); err != nil {
		return nil, fmt.Errorf("keep receipt seq %d: %w", seq, err)
	}
	m.seqOf[r.Hash] = seq
	m.last = r
	m.pending = append(m.pending, r)
	return r, nil
}

// checkIssue checks Issue's arguments against the lease, the last receipt
// issued and the credit limit, in Issue's order.
func (m *Meter) checkIssue(attempt uint32, start, end time.Time, gpuMs int64, util uint32, cp []byte, final bool, state string) error {
	startMs, endMs := start.UnixMilli(), end.UnixMilli()
	seq, prevEnd, prevCum := uint64(1), m.t.Start.UnixMilli(), int64(0)
	if l := m.last; l != nil {
		seq, prevEnd, prevCum = l.Seq+1, l.EndMs, l.CumGpuMs
	}
	if err := checkState(state); err != nil {
		return err
	}
	switch last := m.last; {
	case m.settled != nil:
		return ErrSettled
	case attempt == 0:
		return p2p.Errf(p2p.ErrMalformed, "attempt 0")
	case last != nil && attempt < last.Attempt:
		return p2p.Errf(ErrStaleAttempt, "attempt %d, seq %d was attempt %d", attempt, last.Seq, last.Attempt)
	case last != nil && attempt == last.Attempt && last.Final:
		return p2p.Errf(ErrStaleAttempt, "attempt %d ended with seq %d", attempt, last.Seq)
	case endMs < startMs:
		return p2p.Errf(p2p.ErrMalformed, "interval %s to %s", start, end)
	case startMs < prevEnd:
		return p2p.Errf(market.ErrMismatch, "starts at %d ms, before %d ms (the end of seq %d or the lease's start)", startMs, prevEnd, seq-1)
	case end.After(m.t.End.Add(m.t.Interval)):
		return p2p.Errf(market.ErrMismatch, "ends %s, after the lease (%s) and one interval", end.UTC().Format(time.RFC3339), m.t.End.UTC().Format(time.RFC3339))
	case gpuMs < 0 || prevCum+gpuMs > MaxGPUMs:
		return p2p.Errf(p2p.ErrMalformed, "gpu_ms %d after %d", gpuMs, prevCum)
	case util > 1000:
		return p2p.Errf(p2p.ErrMalformed, "util_permille %d over 1000", util)
	case len(cp) != 0 && len(cp) != HashBytes:
		return p2p.Errf(p2p.ErrMalformed, "checkpoint hash of %d bytes", len(cp))
	case final && state == StateRunning:
		return p2p.Errf(p2p.ErrMalformed, "final receipt in state %q", state)
	case !final && gpuMs > 0 && m.overCredit():
		return p2p.Errf(ErrOverCredit, "owed %d micros, credit limit %d", m.owed(), m.t.CreditLimit)
	}
	return nil
}

// Accept takes a voucher from the renter: signed by the lease's renter,
// for this lease and supplier, acknowledging a receipt this meter issued
// (not one before the receipt the best voucher acknowledges), with a
// nonce above the best voucher's, an amount at least the best's and at
// most the acknowledged receipt's cum_amount_micros. It is stored
// (synced) as the best voucher before Accept returns. The best voucher
// sent again returns it with no error. A voucher that reuses a nonce with
// another amount, or pays less than one with a lower nonce, is evidence:
// Accept stores an Evidence (signed with the meter's key) and returns an
// error wrapping ErrEvidence. An older voucher wraps p2p.ErrStale.
func (m *Meter) Accept(voucherRaw []byte, now time.Time) (*Voucher, error) {
	v, err := OpenVoucher(voucherRaw)
	if err != nil {
		m.led.metrics.Voucher(metrics.Supplier, metrics.Refused)
		return nil, fmt.Errorf("settle: lease %s: %w", m.t.LeaseID.Short(), err)
	}
	var ev []byte
	func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		ev, err = m.accept(v, now)
	}()
	m.led.fire(ev)
	m.led.metrics.Voucher(metrics.Supplier, checked(err))
	if err != nil {
		return nil, fmt.Errorf("settle: lease %s: voucher nonce %d: %w", m.t.LeaseID.Short(), v.Nonce, err)
	}
	return v, nil
}

// accept checks and keeps v; it returns the evidence it stored, if any.
// A resent best voucher leaves v as it is: the caller returns it.
func (m *Meter) accept(v *Voucher, now time.Time) ([]byte, error) {
	switch {
	case v.Renter != m.t.Renter:
		return nil, p2p.Errf(p2p.ErrSignerMismatch, "signed by %s, the lease's renter is %s", v.Renter, m.t.Renter)
	case v.Supplier != m.t.Supplier:
		return nil, p2p.Errf(market.ErrMismatch, "names supplier %s, not %s", v.Supplier, m.t.Supplier)
	case v.LeaseID != m.t.LeaseID:
		return nil, p2p.Errf(market.ErrMismatch, "for lease %s", v.LeaseID.Short())
	}
	if b := m.best; b != nil {
		switch {
		case v.Hash == b.Hash:
			return nil, nil
		case v.Nonce == b.Nonce && v.CumAmountMicros != b.CumAmountMicros:
			return m.led.accuse(m.key, KindVoucherNonceReuse, b.Raw, v.Raw, now,
				fmt.Sprintf("nonce %d pays %d and %d micros", v.Nonce, b.CumAmountMicros, v.CumAmountMicros))
		case v.Nonce > b.Nonce && v.CumAmountMicros < b.CumAmountMicros:
			return m.led.accuse(m.key, KindVoucherDecrease, b.Raw, v.Raw, now,
				fmt.Sprintf("nonce %d pays %d micros, nonce %d paid %d", v.Nonce, v.CumAmountMicros, b.Nonce, b.CumAmountMicros))
		case v.Nonce < b.Nonce && v.CumAmountMicros > b.CumAmountMicros:
			return m.led.accuse(m.key, KindVoucherDecrease, v.Raw, b.Raw, now,
				fmt.Sprintf("nonce %d pays %d micros, after nonce %d paid %d", b.Nonce, b.CumAmountMicros, v.Nonce, v.CumAmountMicros))
		case v.Nonce <= b.Nonce:
			return nil, p2p.Errf(p2p.ErrStale, "nonce %d, the best voucher's is %d", v.Nonce, b.Nonce)
		}
	}
	if m.settled != nil {
		return nil, ErrSettled
	}
	seq, ok := m.seqOf[v.Acked]
	if !ok {
		return nil, p2p.Errf(market.ErrMismatch, "acknowledges %s, no receipt of this lease", market.ID(v.Acked).Short())
	}
	var r *Receipt
	next := uint64(1) // the first pending seq
	if m.acked != nil {
		next = m.acked.Seq + 1
	}
	switch {
	case m.acked != nil && seq == m.acked.Seq:
		r = m.acked
	case seq >= next:
		r = m.pending[seq-next]
	default:
		return nil, p2p.Errf(p2p.ErrStale, "acknowledges seq %d, before seq %d already paid", seq, m.acked.Seq)
	}
	if v.CumAmountMicros > r.CumAmountMicros {
		return nil, p2p.Errf(market.ErrMismatch, "pays %d micros, receipt seq %d charges %d", v.CumAmountMicros, seq, r.CumAmountMicros)
	}
	if err := m.led.s.Put(ksVouchers, m.t.LeaseID[:], bestEntry(v.Raw, now)); err != nil {
		return nil, fmt.Errorf("keep voucher: %w", err)
	}
	m.best, m.paidAt = v, now
	if r != m.acked {
		m.acked = r
		m.pending = append([]*Receipt(nil), m.pending[seq-next+1:]...)
	}
	return nil, nil
}

// Owed is what the renter owes: the last receipt's cum_amount_micros less
// the best voucher's.
func (m *Meter) Owed() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owed()
}

func (m *Meter) owed() int64 {
	if m.last == nil {
		return 0
	}
	if m.best == nil {
		return m.last.CumAmountMicros
	}
	paid := m.best.CumAmountMicros
	if m.chain {
		paid = min(paid, m.covered)
	}
	return m.last.CumAmountMicros - paid
}

// OverCredit reports whether Owed is above the lease's credit limit: the
// supplier pauses or stops the job until it is paid.
func (m *Meter) OverCredit() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.overCredit()
}

func (m *Meter) overCredit() bool { return m.owed() > m.t.CreditLimit }

// Unacked returns the receipts after the one the best voucher
// acknowledges, in seq order: what to send again when the renter
// reattaches.
func (m *Meter) Unacked() []*Receipt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Receipt(nil), m.pending...)
}

// Last returns the last receipt issued, or nil.
func (m *Meter) Last() *Receipt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// LastPaid is when the best voucher was accepted; the lease's start when
// there is none.
func (m *Meter) LastPaid() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paidAt
}

// Countersign checks the renter's statement against the meter's own
// records — the lease, renter, supplier and job; final_seq is the receipt
// the best voucher acknowledges, which pays it in full; receipts_root is
// the root of the meter's receipts 1..final_seq; cum_gpu_ms and
// total_micros are that receipt's; final_voucher_hash is the best
// voucher's — then seals a Settlement embedding it, stores both (synced)
// and returns the settlement envelope. Countersigning the same statement
// again returns the same settlement; another statement after it is
// refused with ErrSettled. A statement that contradicts the records wraps
// market.ErrMismatch.
func (m *Meter) Countersign(stmtRaw []byte, now time.Time) ([]byte, error) {
	out, err := m.countersign(stmtRaw, now)
	if err != nil {
		return nil, fmt.Errorf("settle: lease %s: countersign: %w", m.t.LeaseID.Short(), err)
	}
	m.led.release(m.t.LeaseID, m)
	return out, nil
}

func (m *Meter) countersign(stmtRaw []byte, now time.Time) ([]byte, error) {
	s, err := OpenStatement(stmtRaw)
	if err != nil {
		return nil, err
	}
	switch {
	case s.Renter != m.t.Renter:
		return nil, p2p.Errf(p2p.ErrSignerMismatch, "statement signed by %s, the lease's renter is %s", s.Renter, m.t.Renter)
	case s.Supplier != m.t.Supplier || s.LeaseID != m.t.LeaseID || !bytes.Equal(s.JobId, m.t.JobID):
		return nil, p2p.Errf(market.ErrMismatch, "statement of lease %s, job %x, supplier %s", s.LeaseID.Short(), s.JobId, s.Supplier)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled != nil {
		if bytes.Equal(m.settledStatement(), stmtRaw) {
			return m.settled, nil
		}
		return nil, ErrSettled
	}
	var ackedSeq uint64
	if m.acked != nil {
		ackedSeq = m.acked.Seq
	}
	switch {
	case s.FinalSeq != ackedSeq:
		return nil, p2p.Errf(market.ErrMismatch, "final_seq %d, the best voucher acknowledges seq %d", s.FinalSeq, ackedSeq)
	case ackedSeq > 0 && s.CumGpuMs != m.acked.CumGpuMs:
		return nil, p2p.Errf(market.ErrMismatch, "cum_gpu_ms %d, receipt seq %d has %d", s.CumGpuMs, ackedSeq, m.acked.CumGpuMs)
	case ackedSeq > 0 && s.TotalMicros != m.acked.CumAmountMicros:
		return nil, p2p.Errf(market.ErrMismatch, "total_micros %d, receipt seq %d charges %d", s.TotalMicros, ackedSeq, m.acked.CumAmountMicros)
	case ackedSeq > 0 && m.best.CumAmountMicros != m.acked.CumAmountMicros:
		return nil, p2p.Errf(market.ErrMismatch, "the best voucher pays %d of receipt seq %d's %d micros", m.best.CumAmountMicros, ackedSeq, m.acked.CumAmountMicros)
	case ackedSeq > 0 && !bytes.Equal(s.FinalVoucherHash, m.best.Hash[:]):
		return nil, p2p.Errf(market.ErrMismatch, "final_voucher_hash %x is not the best voucher's %s", s.FinalVoucherHash, market.ID(m.best.Hash).Short())
	}
	hashes, err := m.led.receiptHashes(m.t.LeaseID, ackedSeq)
	if err != nil {
		return nil, err
	}
	if root := ReceiptsRoot(hashes); !bytes.Equal(s.ReceiptsRoot, root[:]) {
		return nil, p2p.Errf(market.ErrMismatch, "receipts_root %x is not the root of receipts 1..%d, %x", s.ReceiptsRoot, ackedSeq, root)
	}
	raw, err := SealSettlement(&pb.Settlement{Statement: stmtRaw, CreatedMs: now.UnixMilli()}, m.key)
	if err != nil {
		return nil, err
	}
	lease := m.t.LeaseID[:]
	err = m.led.s.Batch(func(b store.Batch) error {
		return cmp.Or(b.Put(ksStatements, lease, stmtRaw), b.Put(ksSettlements, lease, raw))
	})
	if err != nil {
		return nil, fmt.Errorf("keep settlement: %w", err)
	}
	m.settled = raw
	return raw, nil
}

// settledStatement is the statement the kept settlement embeds.
func (m *Meter) settledStatement() []byte {
	s, err := OpenSettlement(m.settled)
	if err != nil {
		return nil
	}
	return s.Statement.Raw
}
