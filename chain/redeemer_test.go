package chain

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
)

// keptVouchers is a supplier node's answer to a redeemer: the chain
// vouchers it keeps and which leases settled (what GET
// /api/v1/chain/redeemable and /receipts answer).
type keptVouchers struct {
	rs      []api.Redeemable
	settled map[string]bool
}

func (k *keptVouchers) Redeemable(context.Context) ([]api.Redeemable, error) { return k.rs, nil }
func (k *keptVouchers) Receipts(context.Context, string) ([]settle.Report, error) {
	var out []settle.Report
	for id, s := range k.settled {
		out = append(out, settle.Report{LeaseID: id, Settled: s})
	}
	return out, nil
}

func (k *keptVouchers) keep(t *testing.T, f *fixture, cv chainpay.ChainVoucher) string {
	t.Helper()
	raw, err := chainpay.EncodeRedeemable(f.cfg.Domain, cv)
	if err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(cv.LeaseID[:])
	for i, r := range k.rs {
		if r.LeaseID == id {
			k.rs = append(k.rs[:i], k.rs[i+1:]...)
			break
		}
	}
	k.rs = append(k.rs, api.Redeemable{LeaseID: id, Nonce: cv.Nonce, CumMicros: money.Micros(cv.CumMicros), Raw: hex.EncodeToString(raw)})
	return id
}

// TestRedeemerPolicy: a pass leaves a lease below the threshold and not
// settled alone; redeems one whose value reaches the threshold, one whose
// lease settled, and every one at once when the renter starts closing
// the channel (inside the window, which a later voucher would miss);
// never sends a voucher already redeemed; and ignores another supplier's.
func TestRedeemerPolicy(t *testing.T) {
	f := newFixture(t)
	f.deposit(10*money.Unit, 2*time.Hour)
	node := &keptVouchers{settled: map[string]bool{}}
	r := NewRedeemer(f.supplier.a, node, RedeemPolicy{Threshold: 2 * money.Unit}, quietRedeemLog())
	ctx := context.Background()
	find := func(rs []Redeemed, id string) Redeemed {
		for _, x := range rs {
			if x.LeaseID == id {
				return x
			}
		}
		t.Fatalf("lease %s not in the pass", id)
		return Redeemed{}
	}

	_, small := f.voucher(lease(1), 1, money.Unit)
	idSmall := node.keep(t, f, small)
	_, big := f.voucher(lease(2), 1, 3*money.Unit)
	idBig := node.keep(t, f, big)
	_, done := f.voucher(lease(3), 1, money.Unit/2)
	idDone := node.keep(t, f, done)
	node.settled[idDone] = true
	// Another supplier's chain voucher on this node: not this key's to redeem.
	other := small
	other.Supplier = f.other.addr
	other.LeaseID = lease(4)
	other, _ = chainpay.SignVoucher(f.cfg.Domain, f.renter.pay, other)
	node.keep(t, f, other)

	rs, err := r.Once(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("pass over %d leases, want 3 (not the other supplier's): %+v", len(rs), rs)
	}
	if x := find(rs, idSmall); x.Redeemed != 0 || x.Why != "waiting (below the threshold, lease not settled)" {
		t.Errorf("small lease: %+v", x)
	}
	if x := find(rs, idBig); x.Redeemed != 3*money.Unit || x.Why != "above the threshold" || x.Err != "" {
		t.Errorf("lease above the threshold: %+v", x)
	}
	if x := find(rs, idDone); x.Redeemed != money.Unit/2 || x.Why != "the lease settled" {
		t.Errorf("settled lease: %+v", x)
	}
	if got := f.balance(f.supplier.addr); got != 3*money.Unit+money.Unit/2 {
		t.Fatalf("supplier holds %s, want 3.50", got)
	}

	// The renter starts a close: the small lease's voucher goes at once.
	if _, err := f.renter.a.RequestClose(ctx, f.renter.addr, f.supplier.addr); err != nil {
		t.Fatal(err)
	}
	rs, err = r.Once(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if x := find(rs, idSmall); x.Redeemed != money.Unit || x.Why != "the renter is closing the channel" {
		t.Errorf("small lease on a close: %+v", x)
	}
	if x := find(rs, idBig); x.Redeemed != 0 || x.Why != "already redeemed" {
		t.Errorf("a redeemed lease again: %+v", x)
	}
	if got := f.balance(f.supplier.addr); got != 4*money.Unit+money.Unit/2 {
		t.Fatalf("supplier holds %s after the close pass, want 4.50", got)
	}
}

func quietRedeemLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
