package settle

import (
	"errors"
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// TestChainCoverPausesUncoveredRenter: on a chain-settled lease a voucher
// counts as paid only as far as its chain voucher's check says the
// channel covers it. A renter whose channel is empty goes over credit
// after the credit limit's worth of intervals although every voucher is
// signed, and is paid up again once its channel covers the vouchers; a
// refused chain voucher covers nothing and is not kept; the best chain
// voucher frame is kept, synced, across a restart.
func TestChainCoverPausesUncoveredRenter(t *testing.T) {
	x := newPair(t)
	x.m.RequireChain()
	var balance int64 // what the renter's channel covers
	frame := "frame"
	check := func(v *Voucher) (int64, []byte, error) { return balance, []byte(frame), nil }
	var lastV []byte
	for i := 0; !x.m.OverCredit(); i++ {
		if i > 10 {
			t.Fatal("an empty channel never went over credit")
		}
		r := x.issue(t)
		v, err := x.p.Accept(r.Raw, x.attempt, x.now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.m.AcceptChain(v, check, x.now); err != nil {
			t.Fatal(err)
		}
		lastV = v
	}
	if x.m.Owed() <= x.terms.CreditLimit {
		t.Fatalf("over credit with %d owed, limit %d", x.m.Owed(), x.terms.CreditLimit)
	}

	// A refused chain voucher (forged, say) covers nothing, and is not kept.
	balance = 1 << 40
	bad := func(v *Voucher) (int64, []byte, error) { return balance, []byte("forged frame"), errors.New("forged") }
	if _, err := x.m.AcceptChain(lastV, bad, x.now); err == nil {
		t.Fatal("a refused chain voucher was taken")
	}
	if !x.m.OverCredit() {
		t.Fatal("a refused chain voucher covered the debt")
	}
	if f, _, _ := x.sled.ChainVoucher(x.terms.LeaseID); string(f) != "frame" {
		t.Fatalf("kept frame %q, want the last good one", f)
	}

	// The channel is funded: the best voucher, sent again with its chain
	// voucher, is covered in full, and metering goes on.
	if _, err := x.m.AcceptChain(lastV, check, x.now); err != nil {
		t.Fatal(err)
	}
	if x.m.OverCredit() || x.m.Owed() != 0 {
		t.Fatalf("funded: owed %d, over credit %v", x.m.Owed(), x.m.OverCredit())
	}
	// The covered best voucher sent again is not checked again.
	checked := 0
	count := func(v *Voucher) (int64, []byte, error) { checked++; return balance, []byte(frame), nil }
	if _, err := x.m.AcceptChain(lastV, count, x.now); err != nil || checked != 0 {
		t.Fatalf("a covered voucher again: %v, checked %d times", err, checked)
	}
	r := x.issue(t)
	v, err := x.p.Accept(r.Raw, x.attempt, x.now)
	if err != nil {
		t.Fatal(err)
	}
	frame = "next frame"
	if _, err := x.m.AcceptChain(v, check, x.now); err != nil {
		t.Fatal(err)
	}
	x.reopen(t)
	f, nonce, err := x.sled.ChainVoucher(x.terms.LeaseID)
	if err != nil || string(f) != "next frame" || nonce != r.Seq {
		t.Fatalf("after restart: frame %q nonce %d %v, want the last one, nonce %d", f, nonce, err, r.Seq)
	}
	n := 0
	if err := x.sled.EachChainVoucher(func(lease market.ID, nonce uint64, kept []byte) error {
		n++
		if lease != x.terms.LeaseID || nonce != r.Seq || string(kept) != "next frame" {
			t.Errorf("listed lease %s nonce %d %q", lease.Short(), nonce, kept)
		}
		return nil
	}); err != nil || n != 1 {
		t.Fatalf("EachChainVoucher: %d entries, %v", n, err)
	}
}

// TestOffChainLeaseIgnoresCover: a lease not made chain-settled counts
// its vouchers as paid whatever a chain would cover.
func TestOffChainLeaseIgnoresCover(t *testing.T) {
	x := newPair(t)
	for range 5 {
		r := x.issue(t)
		v, err := x.p.Accept(r.Raw, x.attempt, x.now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.m.AcceptChain(v, func(*Voucher) (int64, []byte, error) { return 0, []byte("frame"), nil }, x.now); err != nil {
			t.Fatal(err)
		}
	}
	if x.m.Owed() != 0 || x.m.ChainSettled() {
		t.Fatalf("owed %d, chain settled %v", x.m.Owed(), x.m.ChainSettled())
	}
}
