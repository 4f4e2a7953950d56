package settle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// Keyspaces of the ledger, one per kind of record. A seq is 8 bytes big
// endian, so a lease's receipts iterate in seq order.
var (
	ksLeases      = store.MustKeyspace("settle-leases")      // lease ID -> leaseMeta (JSON): role and terms
	ksReceipts    = store.MustKeyspace("settle-receipts")    // lease ID ‖ seq -> receipt envelope
	ksAcks        = store.MustKeyspace("settle-acks")        // lease ID ‖ seq -> the renter's voucher for that receipt (renter side)
	ksVouchers    = store.MustKeyspace("settle-vouchers")    // lease ID -> accepted-at unix ms (8 bytes) ‖ best voucher envelope
	ksStatements  = store.MustKeyspace("settle-statements")  // lease ID -> statement envelope
	ksSettlements = store.MustKeyspace("settle-settlements") // lease ID -> settlement envelope
	ksEvidence    = store.MustKeyspace("settle-evidence")    // evidence hash -> evidence envelope
	ksChain       = store.MustKeyspace("settle-chain")       // lease ID -> nonce (8 bytes) ‖ the best chain voucher frame (supplier side)
)

// Ledger keeps receipts, vouchers, statements, settlements and evidence
// in a store, for the Meters and Payers made on it and for audit. Every
// write a peer will rely on is made (synced, on a Badger store) before
// the call that makes it returns. It is safe for concurrent use.
type Ledger struct {
	s       store.Store
	metrics *metrics.Settle // nil: nothing counted

	mu         sync.Mutex
	onEvidence []func(raw []byte)

	regMu sync.Mutex
	open  map[market.ID]any // the *Meter or *Payer of each lease in use
}

// LedgerOption adjusts OpenLedger.
type LedgerOption func(*Ledger)

// WithMetrics has the Meters and Payers of the ledger count the receipts
// and vouchers they issue and check in m.
func WithMetrics(m *metrics.Settle) LedgerOption { return func(l *Ledger) { l.metrics = m } }

// OpenLedger returns the ledger kept in s.
func OpenLedger(s store.Store, opts ...LedgerOption) (*Ledger, error) {
	if s == nil {
		return nil, errors.New("settle: open ledger: nil store")
	}
	l := &Ledger{s: s, open: make(map[market.ID]any)}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// checked is the outcome of checking a receipt or a voucher that err
// refused (nil: accepted).
func checked(err error) metrics.Outcome {
	switch {
	case err == nil:
		return metrics.Accepted
	case errors.Is(err, ErrEvidence):
		return metrics.Evidence
	default:
		return metrics.Refused
	}
}

// seqKey is lease ‖ seq, the key of a receipt or of its voucher.
func seqKey(lease market.ID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), lease[:]...), seq)
}

// claim returns the machine kept for lease in this ledger, or makes one
// with mk and keeps it: one Meter or Payer per lease, so no two of them
// sign for the same lease at once.
func claim[M *Meter | *Payer](l *Ledger, lease market.ID, mk func() (M, error)) (M, error) {
	l.regMu.Lock()
	defer l.regMu.Unlock()
	if x, ok := l.open[lease]; ok {
		if m, ok := x.(M); ok {
			return m, nil
		}
		var zero M
		return zero, p2p.Errf(market.ErrMismatch, "lease %s is in use in another role", lease.Short())
	}
	m, err := mk()
	if err != nil {
		var zero M
		return zero, err
	}
	l.open[lease] = m
	return m, nil
}

// release forgets the machine of a settled lease; a later NewMeter or
// NewPayer resumes a settled one from the store.
func (l *Ledger) release(lease market.ID, m any) {
	l.regMu.Lock()
	defer l.regMu.Unlock()
	if l.open[lease] == m {
		delete(l.open, lease)
	}
}

// keepTerms stores the role and terms of a lease, or checks them against
// those stored.
// adopt checks terms t, that key is the party's of role in them (the
// supplier's for a Meter, the renter's for a Payer), and keeps the terms
// with the lease. It returns t with its own copy of the job ID.
func (l *Ledger) adopt(role market.Role, key crypto.PrivKey, t Terms) (Terms, error) {
	if err := t.check(); err != nil {
		return t, err
	}
	t.JobID = bytes.Clone(t.JobID)
	want, verb := t.Supplier, "supplied"
	if role == market.RoleRenter {
		want, verb = t.Renter, "rented"
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return t, fmt.Errorf("key: %w", err)
	}
	if self != want {
		return t, fmt.Errorf("%w: key is %s's, lease %s is %s by %s", p2p.ErrSignerMismatch, self, t.LeaseID.Short(), verb, want)
	}
	return t, l.keepTerms(role, t)
}

func (l *Ledger) keepTerms(role market.Role, t Terms) error {
	want := metaOf(role, t)
	metas := store.NewTyped(l.s, ksLeases, store.JSONCodec[leaseMeta]{})
	got, err := metas.Get(t.LeaseID[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return metas.Put(t.LeaseID[:], want)
	case err != nil:
		return err
	case got != want:
		return p2p.Errf(market.ErrMismatch, "lease %s is kept as %+v, not %+v", t.LeaseID.Short(), got, want)
	}
	return nil
}

// meta returns the role and terms kept for lease.
func (l *Ledger) meta(lease market.ID) (leaseMeta, Terms, error) {
	m, err := store.NewTyped(l.s, ksLeases, store.JSONCodec[leaseMeta]{}).Get(lease[:])
	if err != nil {
		return m, Terms{}, fmt.Errorf("lease %s: %w", lease.Short(), err)
	}
	t, err := m.terms(lease)
	if err != nil {
		return m, Terms{}, fmt.Errorf("lease %s: kept terms: %w", lease.Short(), err)
	}
	return m, t, nil
}

// eachReceipt calls fn with the seq and envelope of each receipt of lease,
// in seq order; raw is valid only during the call.
func (l *Ledger) eachReceipt(lease market.ID, fn func(seq uint64, raw []byte) error) error {
	return l.eachSeq(ksReceipts, lease, fn)
}

func (l *Ledger) eachSeq(ks store.Keyspace, lease market.ID, fn func(seq uint64, raw []byte) error) error {
	return l.s.Iterate(ks, lease[:], func(key, raw []byte) error {
		if len(key) != len(lease)+8 {
			return fmt.Errorf("settle: %s key %x: not lease ‖ seq", ks.Name(), key)
		}
		return fn(binary.BigEndian.Uint64(key[len(lease):]), raw)
	})
}

// receiptHashes returns the hashes of lease's receipts 1..upto in seq
// order; it fails unless all of them are kept.
func (l *Ledger) receiptHashes(lease market.ID, upto uint64) ([][32]byte, error) {
	hashes := make([][32]byte, 0, upto)
	err := l.eachReceipt(lease, func(seq uint64, raw []byte) error {
		if seq > upto {
			return errStop
		}
		if seq != uint64(len(hashes))+1 {
			return fmt.Errorf("settle: lease %s: receipt seq %d kept after seq %d", lease.Short(), seq, len(hashes))
		}
		hashes = append(hashes, sha256.Sum256(raw))
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if uint64(len(hashes)) != upto {
		return nil, fmt.Errorf("settle: lease %s: %d receipts kept, want %d", lease.Short(), len(hashes), upto)
	}
	return hashes, nil
}

// errStop ends an iteration early.
var errStop = errors.New("stop")

// get returns the value under key, or nil when there is none.
func (l *Ledger) get(ks store.Keyspace, key []byte) ([]byte, error) {
	v, err := l.s.Get(ks, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return v, err
}

// bestVoucher returns the best voucher of lease and when it was accepted;
// raw is nil when there is none.
func (l *Ledger) bestVoucher(lease market.ID) (raw []byte, at time.Time, err error) {
	v, err := l.get(ksVouchers, lease[:])
	switch {
	case err != nil || v == nil:
		return nil, time.Time{}, err
	case len(v) < 8:
		return nil, time.Time{}, fmt.Errorf("settle: lease %s: best voucher entry of %d bytes", lease.Short(), len(v))
	}
	return v[8:], time.UnixMilli(int64(binary.BigEndian.Uint64(v))), nil
}

// Paid reads, from the best voucher kept for lease, the amount paid and
// the nonce of that voucher (a gpumesh renter numbers its vouchers as the
// receipts they acknowledge, so it counts the receipts paid). It opens no
// Meter or Payer: it is for showing a lease, not for acting on it.
func (l *Ledger) Paid(lease market.ID) (nonce uint64, paidMicros int64, err error) {
	raw, _, err := l.bestVoucher(lease)
	if err != nil || raw == nil {
		return 0, 0, err
	}
	v, err := OpenVoucher(raw)
	if err != nil {
		return 0, 0, fmt.Errorf("settle: lease %s: kept voucher: %w", lease.Short(), err)
	}
	return v.Nonce, v.CumAmountMicros, nil
}

// bestEntry is the value kept under ksVouchers.
func bestEntry(raw []byte, at time.Time) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(at.UnixMilli())), raw...)
}

// OnEvidence registers fn to be called, outside every lock, with each
// evidence envelope newly stored: made by a Meter or Payer of this ledger
// (its reporter is the node itself: gossip it) or received through
// AddEvidence (already gossiped). fn must not block for long.
func (l *Ledger) OnEvidence(fn func(raw []byte)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onEvidence = append(l.onEvidence, fn)
}

// fire calls the OnEvidence functions with raw.
func (l *Ledger) fire(raw []byte) {
	if raw == nil {
		return
	}
	l.mu.Lock()
	fns := slices.Clone(l.onEvidence)
	l.mu.Unlock()
	for _, fn := range fns {
		fn(raw)
	}
}

// putEvidence stores an evidence envelope unless it is kept already and
// reports whether it was new.
func (l *Ledger) putEvidence(raw []byte) (bool, error) {
	h := sha256.Sum256(raw)
	old, err := l.get(ksEvidence, h[:])
	if err != nil || old != nil {
		return false, err
	}
	if err := l.s.Put(ksEvidence, h[:], raw); err != nil {
		return false, fmt.Errorf("settle: keep evidence: %w", err)
	}
	return true, nil
}

// accuse seals evidence of kind from records a and b with key, stores it
// and returns it with an error wrapping ErrEvidence that says what it
// proves; the caller fires it once it holds no lock.
func (l *Ledger) accuse(key crypto.PrivKey, kind string, a, b []byte, now time.Time, what string) ([]byte, error) {
	raw, err := SealEvidence(&pb.Evidence{Kind: kind, A: a, B: b, CreatedMs: now.UnixMilli()}, key)
	if err != nil {
		return nil, fmt.Errorf("%w (%s: %s), but sealing it failed: %v", ErrEvidence, kind, what, err)
	}
	if _, err := l.putEvidence(raw); err != nil {
		return nil, fmt.Errorf("%w (%s: %s), but keeping it failed: %v", ErrEvidence, kind, what, err)
	}
	return raw, fmt.Errorf("%w: %s: %s", ErrEvidence, kind, what)
}

// AddEvidence checks evidence received from a peer (OpenEvidence) and
// stores it; storing it again is a no-op. Evidence created more than
// p2p.ClockSkew after now is refused. The OnEvidence functions are called
// when it is new.
func (l *Ledger) AddEvidence(raw []byte, now time.Time) error {
	e, err := OpenEvidence(raw)
	if err != nil {
		return err
	}
	if created := time.UnixMilli(e.CreatedMs); created.After(now.Add(p2p.ClockSkew)) {
		return p2p.Errf(p2p.ErrFutureDated, "evidence %s created %s", market.ID(e.Hash).Short(), created.UTC().Format(time.RFC3339))
	}
	fresh, err := l.putEvidence(raw)
	if err != nil {
		return err
	}
	if fresh {
		l.fire(raw)
	}
	return nil
}

// Evidence returns every evidence record kept, in hash order.
func (l *Ledger) Evidence() ([]*Evidence, error) {
	var out []*Evidence
	err := l.s.Iterate(ksEvidence, nil, func(key, raw []byte) error {
		e, err := OpenEvidence(append([]byte(nil), raw...))
		if err != nil {
			return fmt.Errorf("settle: kept evidence %x: %w", key, err)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// Leases returns the leases this ledger meters or pays, in ID order.
func (l *Ledger) Leases() ([]market.ID, error) {
	var out []market.ID
	err := l.s.Iterate(ksLeases, nil, func(key, _ []byte) error {
		if len(key) != len(market.ID{}) {
			return fmt.Errorf("settle: lease key %x is not a lease ID", key)
		}
		out = append(out, market.ID(key))
		return nil
	})
	return out, err
}

// Receipts returns the receipts kept for lease, opened, in seq order.
func (l *Ledger) Receipts(lease market.ID) ([]*Receipt, error) {
	var out []*Receipt
	err := l.eachReceipt(lease, func(seq uint64, raw []byte) error {
		r, err := OpenReceipt(append([]byte(nil), raw...))
		if err != nil {
			return fmt.Errorf("settle: lease %s: kept receipt seq %d: %w", lease.Short(), seq, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}
