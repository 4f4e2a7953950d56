package settle

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Receipt is a validated receipt: its envelope, signature and shape
// checked (OpenReceipt). Its usage is not: see CheckUsage.
type Receipt struct {
	*pb.Receipt
	Hash     [32]byte // SHA-256 of Raw
	Supplier peer.ID  // the signer
	Renter   peer.ID
	LeaseID  market.ID
	Raw      []byte // the signed envelope
}

// Start and End bound the interval the receipt meters.
func (r *Receipt) Start() time.Time { return time.UnixMilli(r.StartMs) }
func (r *Receipt) End() time.Time   { return time.UnixMilli(r.EndMs) }

// Voucher is a validated voucher.
type Voucher struct {
	*pb.Voucher
	Hash     [32]byte // SHA-256 of Raw
	Renter   peer.ID  // the signer
	Supplier peer.ID
	LeaseID  market.ID
	Acked    [32]byte // receipt_hash: the receipt it acknowledges
	Raw      []byte
}

// Statement is a validated statement.
type Statement struct {
	*pb.Statement
	Hash     [32]byte // SHA-256 of Raw
	Renter   peer.ID  // the signer
	Supplier peer.ID
	LeaseID  market.ID
	Raw      []byte
}

// Settlement is a validated settlement and the statement it countersigns.
type Settlement struct {
	*pb.Settlement
	Hash      [32]byte // SHA-256 of Raw
	Supplier  peer.ID  // the signer
	Statement *Statement
	Raw       []byte
}

// Evidence is validated evidence: its records prove what its kind claims.
type Evidence struct {
	*pb.Evidence
	Hash     [32]byte // SHA-256 of Raw
	Reporter peer.ID  // the signer
	Accused  peer.ID  // the signer of the records: a supplier or a renter
	LeaseID  market.ID
	Raw      []byte
}

// Sealing. Each Seal function signs a copy of its message with key after
// filling in the schema version and the signer's peer-ID field from the
// key; the caller fills in everything else. The result is the envelope to
// send.

// SealReceipt signs a receipt; it sets Version and Supplier.
func SealReceipt(r *pb.Receipt, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(ReceiptType, r, key, func(m *pb.Receipt, id []byte) { m.Version, m.Supplier = p2p.RecordVersion, id })
}

// SealVoucher signs a voucher; it sets Version and Renter.
func SealVoucher(v *pb.Voucher, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(VoucherType, v, key, func(m *pb.Voucher, id []byte) { m.Version, m.Renter = p2p.RecordVersion, id })
}

// SealStatement signs a statement; it sets Version and Renter.
func SealStatement(s *pb.Statement, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(StatementType, s, key, func(m *pb.Statement, id []byte) { m.Version, m.Renter = p2p.RecordVersion, id })
}

// SealSettlement countersigns a statement; it sets Version and Supplier.
func SealSettlement(s *pb.Settlement, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(SettlementType, s, key, func(m *pb.Settlement, id []byte) { m.Version, m.Supplier = p2p.RecordVersion, id })
}

// SealEvidence signs evidence; it sets Version and Reporter.
func SealEvidence(e *pb.Evidence, key crypto.PrivKey) ([]byte, error) {
	return p2p.SealFilled(EvidenceType, e, key, func(m *pb.Evidence, id []byte) { m.Version, m.Reporter = p2p.RecordVersion, id })
}

// Opening. Each Open function checks a signed envelope — its size first,
// then its signature, payload type and key type (p2p.Open), that its
// author field names the signer, then its fields, cheap checks first, then
// any record it embeds — and returns the decoded record. Records of
// settlement do not expire, so no clock is involved: whether a record is
// timely is for the state machine that receives it. Every error wraps
// exactly one of p2p's named errors, market.ErrMismatch or ErrBadEvidence.

// OpenReceipt verifies and decodes a signed receipt. It checks shape only:
// a receipt with inflated usage or a wrong amount opens (so it can be held
// as evidence); CheckUsage tells.
func OpenReceipt(data []byte) (*Receipt, error) {
	m := &pb.Receipt{}
	signer, err := p2p.OpenAuthored(ReceiptType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	r := &Receipt{Receipt: m, Hash: sha256.Sum256(data), Supplier: signer, Raw: data}
	if err := checkReceipt(r); err != nil {
		return nil, fmt.Errorf("receipt %s seq %d: %w", market.ID(r.Hash).Short(), m.Seq, err)
	}
	return r, nil
}

// checkReceipt checks the fields of r.Receipt and fills in Renter and
// LeaseID.
func checkReceipt(r *Receipt) error {
	m := r.Receipt
	err := cmp.Or(
		checkVersion(m.Version),
		checkLen("lease_id", m.LeaseId, LeaseIDBytes),
		checkLen("job_id", m.JobId, JobIDBytes),
		checkState(m.State),
	)
	switch {
	case err != nil:
		return err
	case m.Attempt == 0:
		return p2p.Errf(p2p.ErrMalformed, "attempt is 0")
	case m.Seq == 0:
		return p2p.Errf(p2p.ErrMalformed, "seq is 0")
	case m.StartMs <= 0 || m.EndMs < m.StartMs:
		return p2p.Errf(p2p.ErrMalformed, "start_ms %d, end_ms %d: not an interval", m.StartMs, m.EndMs)
	case m.EndMs-m.StartMs > market.MaxDuration.Milliseconds():
		return p2p.Errf(p2p.ErrMalformed, "interval of %d ms, over %s", m.EndMs-m.StartMs, market.MaxDuration)
	case m.Gpus == 0 || m.Gpus > market.MaxCount:
		return p2p.Errf(p2p.ErrMalformed, "gpus %d not in 1..%d", m.Gpus, market.MaxCount)
	case m.GpuMs < 0 || m.CumGpuMs < m.GpuMs || m.CumGpuMs > MaxGPUMs:
		return p2p.Errf(p2p.ErrMalformed, "gpu_ms %d, cum_gpu_ms %d: want 0 <= gpu_ms <= cum_gpu_ms <= %d", m.GpuMs, m.CumGpuMs, MaxGPUMs)
	case m.UtilPermille > 1000:
		return p2p.Errf(p2p.ErrMalformed, "util_permille %d over 1000", m.UtilPermille)
	case !m.UsageMeasured && (m.UtilPermille != 0 || m.MemUsedBytes != 0):
		return p2p.Errf(p2p.ErrMalformed, "usage not measured, yet util_permille %d and mem_used_bytes %d", m.UtilPermille, m.MemUsedBytes)
	case m.MemUsedBytes > MaxMemUsedBytes:
		return p2p.Errf(p2p.ErrMalformed, "mem_used_bytes %d over %d", m.MemUsedBytes, uint64(MaxMemUsedBytes))
	case m.PriceMicros <= 0 || m.PriceMicros > market.MaxPriceMicros:
		return p2p.Errf(p2p.ErrMalformed, "price_micros %d not in 1..%d", m.PriceMicros, int64(market.MaxPriceMicros))
	case m.CumAmountMicros < 0 || m.CumAmountMicros > MaxAmountMicros:
		return p2p.Errf(p2p.ErrMalformed, "cum_amount_micros %d not in 0..%d", m.CumAmountMicros, MaxAmountMicros)
	case m.Seq == 1 && len(m.PrevHash) != 0:
		return p2p.Errf(p2p.ErrMalformed, "prev_hash of seq 1 is %d bytes, want none", len(m.PrevHash))
	case m.Seq > 1 && len(m.PrevHash) != HashBytes:
		return p2p.Errf(p2p.ErrMalformed, "prev_hash is %d bytes, want %d", len(m.PrevHash), HashBytes)
	case len(m.CheckpointHash) != 0 && len(m.CheckpointHash) != HashBytes:
		return p2p.Errf(p2p.ErrMalformed, "checkpoint_hash is %d bytes, want %d or none", len(m.CheckpointHash), HashBytes)
	case m.Final && m.State == StateRunning:
		return p2p.Errf(p2p.ErrMalformed, "final receipt in state %q", m.State)
	}
	renter, err := p2p.ParsePeer("renter", m.Renter)
	if err != nil {
		return err
	}
	if renter == r.Supplier {
		return p2p.Errf(p2p.ErrMalformed, "renter is the supplier")
	}
	r.Renter, r.LeaseID = renter, market.ID(m.LeaseId)
	return nil
}

// CheckUsage checks what a receipt charges: its gpu_ms is at most its
// interval times its GPUs (else ErrInflatedUsage), and its
// cum_amount_micros is exactly market.AmountMicros(price_micros,
// cum_gpu_ms) (else ErrAmountMismatch). Whether cum_gpu_ms adds up along
// the chain needs the previous receipt; the Payer and Ledger.Verify check
// that.
func CheckUsage(r *Receipt) error { return checkUsage(r.Receipt) }

func checkUsage(m *pb.Receipt) error {
	if inflated(m) {
		return p2p.Errf(ErrInflatedUsage, "gpu_ms %d over %d ms times %d gpus = %d", m.GpuMs, m.EndMs-m.StartMs, m.Gpus, wallGPUMs(m))
	}
	if amountWrong(m) {
		return p2p.Errf(ErrAmountMismatch, "cum_amount_micros %d, but %d gpu-ms at %d micros per gpu-hour is %d",
			m.CumAmountMicros, m.CumGpuMs, m.PriceMicros, market.AmountMicros(m.PriceMicros, m.CumGpuMs))
	}
	return nil
}

// OpenVoucher verifies and decodes a signed voucher.
func OpenVoucher(data []byte) (*Voucher, error) {
	m := &pb.Voucher{}
	signer, err := p2p.OpenAuthored(VoucherType, data, m, func() []byte { return m.Renter })
	if err != nil {
		return nil, fmt.Errorf("voucher: %w", err)
	}
	v := &Voucher{Voucher: m, Hash: sha256.Sum256(data), Renter: signer, Raw: data}
	if err := checkVoucher(v); err != nil {
		return nil, fmt.Errorf("voucher %s nonce %d: %w", market.ID(v.Hash).Short(), m.Nonce, err)
	}
	return v, nil
}

func checkVoucher(v *Voucher) error {
	m := v.Voucher
	err := cmp.Or(
		checkVersion(m.Version),
		checkLen("lease_id", m.LeaseId, LeaseIDBytes),
		checkLen("receipt_hash", m.ReceiptHash, HashBytes),
	)
	switch {
	case err != nil:
		return err
	case m.Nonce == 0:
		return p2p.Errf(p2p.ErrMalformed, "nonce is 0")
	case m.CumAmountMicros < 0 || m.CumAmountMicros > MaxAmountMicros:
		return p2p.Errf(p2p.ErrMalformed, "cum_amount_micros %d not in 0..%d", m.CumAmountMicros, MaxAmountMicros)
	case m.CreatedMs <= 0:
		return p2p.Errf(p2p.ErrMalformed, "created_ms %d", m.CreatedMs)
	}
	supplier, err := p2p.ParsePeer("supplier", m.Supplier)
	if err != nil {
		return err
	}
	if supplier == v.Renter {
		return p2p.Errf(p2p.ErrMalformed, "supplier is the renter")
	}
	v.Supplier, v.LeaseID, v.Acked = supplier, market.ID(m.LeaseId), [32]byte(m.ReceiptHash)
	return nil
}

// OpenStatement verifies and decodes a signed statement.
func OpenStatement(data []byte) (*Statement, error) {
	m := &pb.Statement{}
	signer, err := p2p.OpenAuthored(StatementType, data, m, func() []byte { return m.Renter })
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	s := &Statement{Statement: m, Hash: sha256.Sum256(data), Renter: signer, Raw: data}
	if err := checkStatement(s); err != nil {
		return nil, fmt.Errorf("statement %s: %w", market.ID(s.Hash).Short(), err)
	}
	return s, nil
}

func checkStatement(s *Statement) error {
	m := s.Statement
	err := cmp.Or(
		checkVersion(m.Version),
		checkLen("lease_id", m.LeaseId, LeaseIDBytes),
		checkLen("job_id", m.JobId, JobIDBytes),
		checkLen("receipts_root", m.ReceiptsRoot, HashBytes),
	)
	empty := emptyRoot()
	switch {
	case err != nil:
		return err
	case m.Receipts != m.FinalSeq:
		return p2p.Errf(p2p.ErrMalformed, "%d receipts up to final_seq %d: acknowledged receipts run from seq 1", m.Receipts, m.FinalSeq)
	case m.CumGpuMs < 0 || m.CumGpuMs > MaxGPUMs:
		return p2p.Errf(p2p.ErrMalformed, "cum_gpu_ms %d not in 0..%d", m.CumGpuMs, MaxGPUMs)
	case m.TotalMicros < 0 || m.TotalMicros > MaxAmountMicros:
		return p2p.Errf(p2p.ErrMalformed, "total_micros %d not in 0..%d", m.TotalMicros, MaxAmountMicros)
	case m.FinalSeq == 0 && (len(m.FinalVoucherHash) != 0 || m.CumGpuMs != 0 || m.TotalMicros != 0 || !bytes.Equal(m.ReceiptsRoot, empty[:])):
		return p2p.Errf(p2p.ErrMalformed, "no receipts, but a voucher, usage, an amount or a root that is not the empty tree's")
	case m.FinalSeq > 0 && len(m.FinalVoucherHash) != HashBytes:
		return p2p.Errf(p2p.ErrMalformed, "final_voucher_hash is %d bytes, want %d", len(m.FinalVoucherHash), HashBytes)
	case !validOutcome(m.Outcome):
		return p2p.Errf(p2p.ErrMalformed, "outcome %.32q is not an outcome", m.Outcome)
	case m.CreatedMs <= 0:
		return p2p.Errf(p2p.ErrMalformed, "created_ms %d", m.CreatedMs)
	}
	supplier, err := p2p.ParsePeer("supplier", m.Supplier)
	if err != nil {
		return err
	}
	if supplier == s.Renter {
		return p2p.Errf(p2p.ErrMalformed, "supplier is the renter")
	}
	s.Supplier, s.LeaseID = supplier, market.ID(m.LeaseId)
	return nil
}

// OpenSettlement verifies and decodes a settlement and the statement it
// embeds, which must name the settlement's signer as its supplier.
func OpenSettlement(data []byte) (*Settlement, error) {
	m := &pb.Settlement{}
	signer, err := p2p.OpenAuthored(SettlementType, data, m, func() []byte { return m.Supplier })
	if err != nil {
		return nil, fmt.Errorf("settlement: %w", err)
	}
	s := &Settlement{Settlement: m, Hash: sha256.Sum256(data), Supplier: signer, Raw: data}
	if err := checkSettlement(s); err != nil {
		return nil, fmt.Errorf("settlement %s: %w", market.ID(s.Hash).Short(), err)
	}
	return s, nil
}

func checkSettlement(s *Settlement) error {
	m := s.Settlement
	switch {
	case m.Version != p2p.RecordVersion:
		return checkVersion(m.Version)
	case m.CreatedMs <= 0:
		return p2p.Errf(p2p.ErrMalformed, "created_ms %d", m.CreatedMs)
	}
	st, err := OpenStatement(m.Statement)
	if err != nil {
		return err
	}
	if st.Supplier != s.Supplier {
		return p2p.Errf(market.ErrMismatch, "countersigned by %s, statement names supplier %s", s.Supplier, st.Supplier)
	}
	s.Statement = st
	return nil
}

// OpenEvidence verifies and decodes evidence and checks, from its records
// alone, that they prove what its kind claims:
//
//   - receipt-equivocation: a and b are receipts signed by one supplier
//     for the same lease and seq, with different hashes;
//   - chain-fork: a and b are receipts signed by one supplier for one
//     lease, b.seq = a.seq+1 and b.prev_hash is not a's hash;
//   - inflated-usage: a is a receipt whose gpu_ms is over its interval
//     times its gpus; b is empty;
//   - amount-mismatch: a is a receipt whose cum_amount_micros is not the
//     price of its cum_gpu_ms; b is empty;
//   - voucher-nonce-reuse: a and b are vouchers signed by one renter for
//     one lease with the same nonce and different amounts;
//   - voucher-decrease: a and b are vouchers signed by one renter for one
//     lease, b.nonce > a.nonce and b's amount below a's.
//
// Evidence whose records are valid but prove nothing wraps ErrBadEvidence.
func OpenEvidence(data []byte) (*Evidence, error) {
	m := &pb.Evidence{}
	signer, err := p2p.OpenAuthored(EvidenceType, data, m, func() []byte { return m.Reporter })
	if err != nil {
		return nil, fmt.Errorf("evidence: %w", err)
	}
	e := &Evidence{Evidence: m, Hash: sha256.Sum256(data), Reporter: signer, Raw: data}
	if err := checkEvidence(e); err != nil {
		return nil, fmt.Errorf("evidence %s (%.32q): %w", market.ID(e.Hash).Short(), m.Kind, err)
	}
	return e, nil
}

func checkEvidence(e *Evidence) error {
	m := e.Evidence
	switch {
	case m.Version != p2p.RecordVersion:
		return checkVersion(m.Version)
	case !validKind(m.Kind):
		return p2p.Errf(p2p.ErrMalformed, "kind is not an evidence kind")
	case m.CreatedMs <= 0:
		return p2p.Errf(p2p.ErrMalformed, "created_ms %d", m.CreatedMs)
	}
	switch m.Kind {
	case KindReceiptEquivocation, KindChainFork:
		a, b, err := openReceiptPair(m.A, m.B)
		if err != nil {
			return err
		}
		e.Accused, e.LeaseID = a.Supplier, a.LeaseID
		if m.Kind == KindReceiptEquivocation {
			if a.Seq != b.Seq || a.Hash == b.Hash {
				return p2p.Errf(ErrBadEvidence, "receipts seq %d and %d: not two different receipts for one seq", a.Seq, b.Seq)
			}
			return nil
		}
		if b.Seq != a.Seq+1 || bytes.Equal(b.PrevHash, a.Hash[:]) {
			return p2p.Errf(ErrBadEvidence, "receipt seq %d does not fork from seq %d", b.Seq, a.Seq)
		}
		return nil
	case KindInflatedUsage, KindAmountMismatch:
		if len(m.B) != 0 {
			return p2p.Errf(p2p.ErrMalformed, "b is %d bytes, want none for %s", len(m.B), m.Kind)
		}
		a, err := OpenReceipt(m.A)
		if err != nil {
			return fmt.Errorf("a: %w", err)
		}
		e.Accused, e.LeaseID = a.Supplier, a.LeaseID
		if m.Kind == KindInflatedUsage && !inflated(a.Receipt) {
			return p2p.Errf(ErrBadEvidence, "receipt seq %d: gpu_ms %d within its interval times its gpus", a.Seq, a.GpuMs)
		}
		if m.Kind == KindAmountMismatch && !amountWrong(a.Receipt) {
			return p2p.Errf(ErrBadEvidence, "receipt seq %d: cum_amount_micros %d is the price of its usage", a.Seq, a.CumAmountMicros)
		}
		return nil
	default: // KindVoucherNonceReuse, KindVoucherDecrease
		a, b, err := openVoucherPair(m.A, m.B)
		if err != nil {
			return err
		}
		e.Accused, e.LeaseID = a.Renter, a.LeaseID
		if m.Kind == KindVoucherNonceReuse {
			if a.Nonce != b.Nonce || a.CumAmountMicros == b.CumAmountMicros {
				return p2p.Errf(ErrBadEvidence, "vouchers nonce %d and %d: not one nonce with two amounts", a.Nonce, b.Nonce)
			}
			return nil
		}
		if b.Nonce <= a.Nonce || b.CumAmountMicros >= a.CumAmountMicros {
			return p2p.Errf(ErrBadEvidence, "voucher nonce %d amount %d after nonce %d amount %d: no decrease", b.Nonce, b.CumAmountMicros, a.Nonce, a.CumAmountMicros)
		}
		return nil
	}
}

// inflated reports whether a receipt claims more GPU time than its
// interval times its GPUs.
func inflated(m *pb.Receipt) bool { return m.GpuMs > wallGPUMs(m) }

// wallGPUMs is a receipt's interval times its GPUs; the shape checks keep
// it far from overflowing.
func wallGPUMs(m *pb.Receipt) int64 { return (m.EndMs - m.StartMs) * int64(m.Gpus) }

// amountWrong reports whether a receipt's cumulative amount is not the
// price of its cumulative usage.
func amountWrong(m *pb.Receipt) bool {
	return m.CumAmountMicros != market.AmountMicros(m.PriceMicros, m.CumGpuMs)
}

// openReceiptPair opens two receipts signed by one supplier for one lease.
func openReceiptPair(ra, rb []byte) (a, b *Receipt, err error) {
	if a, err = OpenReceipt(ra); err != nil {
		return nil, nil, fmt.Errorf("a: %w", err)
	}
	if b, err = OpenReceipt(rb); err != nil {
		return nil, nil, fmt.Errorf("b: %w", err)
	}
	switch {
	case a.Supplier != b.Supplier:
		return nil, nil, p2p.Errf(ErrBadEvidence, "receipts signed by %s and %s", a.Supplier, b.Supplier)
	case a.LeaseID != b.LeaseID:
		return nil, nil, p2p.Errf(ErrBadEvidence, "receipts of leases %s and %s", a.LeaseID.Short(), b.LeaseID.Short())
	}
	return a, b, nil
}

// openVoucherPair opens two vouchers signed by one renter for one lease.
func openVoucherPair(va, vb []byte) (a, b *Voucher, err error) {
	if a, err = OpenVoucher(va); err != nil {
		return nil, nil, fmt.Errorf("a: %w", err)
	}
	if b, err = OpenVoucher(vb); err != nil {
		return nil, nil, fmt.Errorf("b: %w", err)
	}
	switch {
	case a.Renter != b.Renter:
		return nil, nil, p2p.Errf(ErrBadEvidence, "vouchers signed by %s and %s", a.Renter, b.Renter)
	case a.LeaseID != b.LeaseID:
		return nil, nil, p2p.Errf(ErrBadEvidence, "vouchers of leases %s and %s", a.LeaseID.Short(), b.LeaseID.Short())
	}
	return a, b, nil
}

// open checks a record's envelope and that the peer its author field names
// is its signer.

func checkVersion(v uint32) error {
	if v != p2p.RecordVersion {
		return p2p.Errf(p2p.ErrUnsupported, "version %d", v)
	}
	return nil
}

func checkLen(field string, b []byte, n int) error {
	if len(b) != n {
		return p2p.Errf(p2p.ErrMalformed, "%s is %d bytes, want %d", field, len(b), n)
	}
	return nil
}

// checkState checks that s is empty or a state slug: ^[a-z][a-z-]{0,31}$.
func checkState(s string) error {
	ok := len(s) <= MaxStateBytes
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c == '-' && i > 0
	}
	if !ok {
		return p2p.Errf(p2p.ErrMalformed, "state %.32q is not a state name", s)
	}
	return nil
}
