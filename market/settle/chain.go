package settle

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// A lease settled on chain (docs/PROTOCOL.md §43.6) pays with vouchers
// that each come with a chain voucher the supplier can redeem from the
// renter's payment channel. The Meter knows nothing of chains: the job
// layer checks each chain voucher (package chainpay) and says how much
// of the voucher the channel covers, and the Meter counts only that as
// paid, so the over-credit pause holds a renter whose channel is empty
// or short, and the supplier's exposure stays one receipt interval plus
// the credit limit.

// ChainCheck checks the chain voucher that came with v, a voucher the
// Meter has accepted, and returns how much of v's cumulative amount the
// channel covers (at most v.CumAmountMicros) and the bytes to keep for a
// redeemer; an error refuses the chain voucher, which then covers
// nothing and is not kept.
type ChainCheck func(v *Voucher) (covered int64, keep []byte, err error)

// RequireChain makes the lease chain-settled from now on: only what the
// chain vouchers cover counts as paid. It cannot be undone.
func (m *Meter) RequireChain() {
	m.mu.Lock()
	m.chain = true
	m.mu.Unlock()
}

// ChainSettled reports whether RequireChain was called.
func (m *Meter) ChainSettled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.chain
}

// AcceptChain takes a voucher of a chain-settled lease with its chain
// voucher: the voucher as Accept takes it, then check; when check passes
// and the voucher is the best one, what check says to keep (what a
// redeemer presents) is kept, synced, beside the best voucher, and what
// it covers counts as paid. It returns the voucher and what refused it
// or its chain voucher.
func (m *Meter) AcceptChain(voucherRaw []byte, check ChainCheck, now time.Time) (*Voucher, error) {
	v, err := m.Accept(voucherRaw, now)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	done := m.best != nil && m.best.Hash == v.Hash && m.covered >= v.CumAmountMicros
	m.mu.Unlock()
	if done {
		// The best voucher again, already covered: nothing to check, and
		// a renter that repeats it cannot make the supplier read the
		// chain again and again.
		return v, nil
	}
	covered, frame, err := check(v)
	if err != nil {
		// The voucher itself was taken (and counted) by Accept.
		return v, fmt.Errorf("settle: lease %s: chain voucher nonce %d: %w", m.t.LeaseID.Short(), v.Nonce, err)
	}
	covered = min(covered, v.CumAmountMicros)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.best == nil || m.best.Hash != v.Hash {
		return v, nil // a later voucher came meanwhile; its own chain voucher counts
	}
	if _, kept, err := m.led.chainVoucher(m.t.LeaseID); err != nil {
		return v, fmt.Errorf("settle: lease %s: %w", m.t.LeaseID.Short(), err)
	} else if kept < v.Nonce {
		entry := append(binary.BigEndian.AppendUint64(nil, v.Nonce), frame...)
		if err := m.led.s.Put(ksChain, m.t.LeaseID[:], entry); err != nil {
			return v, fmt.Errorf("settle: lease %s: keep chain voucher: %w", m.t.LeaseID.Short(), err)
		}
	}
	m.covered = max(m.covered, covered)
	return v, nil
}

// ChainVoucher returns what a supplier kept of the best chain voucher of
// lease (AcceptChain) and its voucher's nonce; nil when there is none.
func (l *Ledger) ChainVoucher(lease market.ID) (frame []byte, nonce uint64, err error) {
	return l.chainVoucher(lease)
}

func (l *Ledger) chainVoucher(lease market.ID) ([]byte, uint64, error) {
	v, err := l.get(ksChain, lease[:])
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("read chain voucher: %w", err)
	case v == nil:
		return nil, 0, nil
	case len(v) < 8:
		return nil, 0, fmt.Errorf("read chain voucher: entry of %d bytes", len(v))
	}
	return v[8:], binary.BigEndian.Uint64(v[:8]), nil
}

// EachChainVoucher calls fn with every lease's kept chain voucher, in
// lease ID order, until fn returns an error; kept is valid only during
// the call.
func (l *Ledger) EachChainVoucher(fn func(lease market.ID, nonce uint64, kept []byte) error) error {
	return l.s.Iterate(ksChain, nil, func(k, v []byte) error {
		if len(k) != len(market.ID{}) || len(v) < 8 {
			return fmt.Errorf("chain voucher entry: key of %d bytes, value of %d", len(k), len(v))
		}
		return fn(market.ID(k), binary.BigEndian.Uint64(v[:8]), v[8:])
	})
}
