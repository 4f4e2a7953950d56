package chain

import (
	"math/big"

	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
)

// TestDepositAndRedeemLatest: a deposit funds the channel; the supplier
// redeems the latest voucher of a lease (skipping earlier ones) and is
// paid its cumulative amount, the channel's balance falling by as much.
func TestDepositAndRedeemLatest(t *testing.T) {
	f := newFixture(t)
	f.deposit(10*money.Unit, 24*time.Hour)
	if c := f.channel(); c.Balance != 10*money.Unit || c.Window != 24*time.Hour || !c.ClosesAt.IsZero() {
		t.Fatalf("channel after deposit: %+v", c)
	}
	if got := f.balance(f.renter.addr); got != 90*money.Unit {
		t.Fatalf("renter holds %s after depositing 10 of 100", got)
	}
	f.voucher(lease(1), 1, 1*money.Unit)
	_, cv2 := f.voucher(lease(1), 2, 2500000)
	if _, err := f.redeem(cv2); err != nil {
		t.Fatalf("redeem latest: %v", err)
	}
	if got := f.balance(f.supplier.addr); got != 2500000 {
		t.Fatalf("supplier holds %s, want 2.50", got)
	}
	if c := f.channel(); c.Balance != 7500000 {
		t.Fatalf("channel holds %s, want 7.50", c.Balance)
	}
	l, err := f.supplier.a.Paid(f.ctx, f.renter.addr, f.supplier.addr, lease(1))
	if err != nil || l.Nonce != 2 || l.Paid != 2500000 {
		t.Fatalf("lane: %+v %v, want nonce 2 paid 2.50", l, err)
	}
	// A top-up adds to the balance; a shorter window than the channel's is refused.
	f.deposit(1*money.Unit, 24*time.Hour)
	if c := f.channel(); c.Balance != 8500000 {
		t.Fatalf("after top-up: %s, want 8.50", c.Balance)
	}
	_, err = f.renter.a.Deposit(f.ctx, f.supplier.addr, 1, 2*time.Hour)
	wantErr(t, "deposit shrinking the window", err, ErrWindow)
}

// TestDepositRules: the window must reach the contract's minimum, and a
// renter cannot open a channel to itself or to the zero address.
func TestDepositRules(t *testing.T) {
	f := newFixture(t)
	_, err := f.renter.a.Deposit(f.ctx, f.supplier.addr, money.Unit, minWindow-time.Second)
	wantErr(t, "window under the minimum", err, ErrWindow)
	_, err = f.renter.a.Deposit(f.ctx, f.renter.addr, money.Unit, minWindow)
	wantErr(t, "channel to oneself", err, ErrSupplier)
	_, err = f.renter.a.Redeem(f.ctx, chainpay.ChainVoucher{Supplier: f.renter.addr})
	wantErr(t, "redeem with no channel", err, ErrNoChannel)
}

// TestRedeemRefusals: older, replayed, decreasing, forged, other-supplier
// and overdrawing vouchers are refused, and a refused one moves nothing.
func TestRedeemRefusals(t *testing.T) {
	f := newFixture(t)
	f.deposit(5*money.Unit, minWindow)
	_, cv1 := f.voucher(lease(1), 1, 1*money.Unit)
	_, cv2 := f.voucher(lease(1), 2, 2*money.Unit)
	_, cv3 := f.voucher(lease(1), 3, 3*money.Unit)
	if _, err := f.redeem(cv2); err != nil {
		t.Fatalf("redeem nonce 2: %v", err)
	}
	_, err := f.redeem(cv1)
	wantErr(t, "older voucher", err, ErrStale)
	_, err = f.redeem(cv2)
	wantErr(t, "replayed voucher", err, ErrStale)

	_, dec := f.voucher(lease(1), 4, 1500000)
	_, err = f.redeem(dec)
	wantErr(t, "decreasing voucher", err, ErrDecreased)

	forger, _ := secp256k1.GeneratePrivateKey()
	forged := cv3
	forged.Sig = chainpay.Sign(f.cfg.Domain.Digest(forged), forger)
	_, err = f.redeem(forged)
	wantErr(t, "voucher signed by another key", err, chainpay.ErrSignature)

	// The same signature malleated to the high s (v flipped): the signer
	// recovers alike, but the contract takes only the low-s form.
	high := cv3
	s := new(big.Int).SetBytes(cv3.Sig[32:64])
	copy(high.Sig[32:64], common.LeftPadBytes(new(big.Int).Sub(crypto.S256().Params().N, s).Bytes(), 32))
	high.Sig[64] ^= 1
	_, err = f.redeem(high)
	wantErr(t, "high-s signature", err, chainpay.ErrSignature)

	raised := cv3
	raised.CumMicros = 4 * uint64(money.Unit)
	_, err = f.redeem(raised)
	wantErr(t, "amount raised after signing", err, chainpay.ErrSignature)

	// The other supplier presents the voucher: the contract checks it as
	// payable to the sender, so the renter's signature does not match.
	if _, err := f.renter.a.Deposit(f.ctx, f.other.addr, money.Unit, minWindow); err != nil {
		t.Fatal(err)
	}
	stolen := cv3
	stolen.Supplier = f.other.addr
	_, err = f.other.a.Redeem(f.ctx, stolen)
	wantErr(t, "voucher redeemed by another supplier", err, chainpay.ErrSignature)

	_, over := f.voucher(lease(1), 5, 6*money.Unit)
	_, err = f.redeem(over)
	wantErr(t, "overdraw", err, ErrBalance)

	if got, c := f.balance(f.supplier.addr), f.channel(); got != 2*money.Unit || c.Balance != 3*money.Unit {
		t.Fatalf("after refusals: supplier %s channel %s, want 2.00 and 3.00", got, c.Balance)
	}
	if _, err := f.redeem(cv3); err != nil {
		t.Fatalf("redeem nonce 3 after refusals: %v", err)
	}
	if got := f.balance(f.supplier.addr); got != 3*money.Unit {
		t.Fatalf("supplier %s, want 3.00", got)
	}
}

// TestTwoLeasesOneChannel: each lease is a lane of its own on one
// channel; both draw on the same balance.
func TestTwoLeasesOneChannel(t *testing.T) {
	f := newFixture(t)
	f.deposit(10*money.Unit, minWindow)
	_, a := f.voucher(lease(1), 3, 2*money.Unit)
	_, b := f.voucher(lease(2), 1, 1500000)
	for _, cv := range []chainpay.ChainVoucher{a, b} {
		if _, err := f.redeem(cv); err != nil {
			t.Fatalf("redeem lease %x: %v", cv.LeaseID[:1], err)
		}
	}
	if got, c := f.balance(f.supplier.addr), f.channel(); got != 3500000 || c.Balance != 6500000 {
		t.Fatalf("supplier %s channel %s, want 3.50 and 6.50", got, c.Balance)
	}
	// Lease 2's lane starts from its own nonce and paid amount.
	_, b2 := f.voucher(lease(2), 2, 2*money.Unit)
	if _, err := f.redeem(b2); err != nil {
		t.Fatalf("second voucher of lease 2: %v", err)
	}
	la, _ := f.supplier.a.Paid(f.ctx, f.renter.addr, f.supplier.addr, lease(1))
	lb, _ := f.supplier.a.Paid(f.ctx, f.renter.addr, f.supplier.addr, lease(2))
	if la.Paid != 2*money.Unit || lb.Paid != 2*money.Unit || lb.Nonce != 2 {
		t.Fatalf("lanes %+v %+v", la, lb)
	}
}

// TestCloseWindow: a renter's close opens the window; withdrawing inside
// it is refused, redeeming inside it succeeds, redeeming after it is
// refused, and the renter withdraws exactly the rest, once.
func TestCloseWindow(t *testing.T) {
	f := newFixture(t)
	f.deposit(10*money.Unit, 2*time.Hour)
	_, cv1 := f.voucher(lease(1), 1, 2*money.Unit)
	_, cv2 := f.voucher(lease(1), 2, 3500000)
	if _, err := f.redeem(cv1); err != nil {
		t.Fatal(err)
	}
	_, err := f.other.a.RequestClose(f.ctx, f.renter.addr, f.supplier.addr)
	wantErr(t, "close by a stranger", err, ErrNotParty)
	if _, err := f.renter.a.RequestClose(f.ctx, f.renter.addr, f.supplier.addr); err != nil {
		t.Fatalf("request close: %v", err)
	}
	c := f.channel()
	if c.ClosesAt.IsZero() {
		t.Fatal("closesAt not set")
	}
	_, err = f.renter.a.RequestClose(f.ctx, f.renter.addr, f.supplier.addr)
	wantErr(t, "second close", err, ErrClosing)
	_, err = f.renter.a.Withdraw(f.ctx, f.supplier.addr)
	wantErr(t, "withdraw inside the window", err, ErrWindowOpen)
	if _, err := f.redeem(cv2); err != nil {
		t.Fatalf("redeem inside the window: %v", err)
	}
	if err := f.sim.AdjustTime(2*time.Hour + time.Second); err != nil {
		t.Fatal(err)
	}
	_, cv3 := f.voucher(lease(1), 3, 4*money.Unit)
	_, err = f.redeem(cv3)
	wantErr(t, "redeem after the window", err, ErrClosed)
	before := f.balance(f.renter.addr)
	if _, err := f.renter.a.Withdraw(f.ctx, f.supplier.addr); err != nil {
		t.Fatalf("withdraw: %v", err)
	}
	if got := f.balance(f.renter.addr) - before; got != 6500000 {
		t.Fatalf("refund %s, want exactly 6.50 (10.00 less 3.50 redeemed)", got)
	}
	if got := f.balance(f.supplier.addr); got != 3500000 {
		t.Fatalf("supplier %s, want 3.50", got)
	}
	if _, err := f.renter.a.Withdraw(f.ctx, f.supplier.addr); err != nil {
		t.Fatalf("second withdraw: %v", err)
	}
	if got := f.balance(f.renter.addr) - before; got != 6500000 {
		t.Fatalf("a second withdraw moved money: refund now %s", got)
	}
}

// TestCooperativeClose: the supplier's close ends the window at once,
// and the renter withdraws the rest at once.
func TestCooperativeClose(t *testing.T) {
	f := newFixture(t)
	f.deposit(4*money.Unit, 24*time.Hour)
	_, cv := f.voucher(lease(1), 1, money.Unit)
	if _, err := f.redeem(cv); err != nil {
		t.Fatal(err)
	}
	if _, err := f.supplier.a.RequestClose(f.ctx, f.renter.addr, f.supplier.addr); err != nil {
		t.Fatalf("supplier's close: %v", err)
	}
	f.sim.Commit() // the next block is later than closesAt
	before := f.balance(f.renter.addr)
	if _, err := f.renter.a.Withdraw(f.ctx, f.supplier.addr); err != nil {
		t.Fatalf("withdraw after a cooperative close: %v", err)
	}
	if got := f.balance(f.renter.addr) - before; got != 3*money.Unit {
		t.Fatalf("refund %s, want 3.00", got)
	}
}

// TestGasPerOperation logs the gas of each operation on the simulated
// chain (every dev fork active; an L2's figures differ) for
// bench/RESULTS.md.
func TestGasPerOperation(t *testing.T) {
	f := newFixture(t)
	dep := f.deposit(10*money.Unit, minWindow)
	_, a1 := f.voucher(lease(1), 1, money.Unit)
	_, a2 := f.voucher(lease(1), 2, 2*money.Unit)
	_, b1 := f.voucher(lease(2), 1, money.Unit)
	r1, err1 := f.redeem(a1)
	r2, err2 := f.redeem(a2)
	r3, err3 := f.redeem(b1)
	rc, err4 := f.renter.a.RequestClose(f.ctx, f.renter.addr, f.supplier.addr)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.sim.AdjustTime(minWindow + time.Second); err != nil {
		t.Fatal(err)
	}
	wd, err := f.renter.a.Withdraw(f.ctx, f.supplier.addr)
	if err != nil {
		t.Fatal(err)
	}
	// The baseline: a plain ERC-20 transfer of the same token, to an
	// account that holds none (as the supplier's first redeem pays one)
	// and again to it.
	transfer := func() uint64 {
		t.Helper()
		data, err := TestTokenABI.Pack("transfer", common.Address(f.other.addr), big.NewInt(int64(money.Unit)))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := f.token.RawTransact(bind.NewKeyedTransactor(f.renter.key, simChainID), data)
		if err != nil {
			t.Fatal(err)
		}
		f.sim.Commit()
		rc, err := bind.WaitMined(f.ctx, f.sim.Client(), tx.Hash())
		if err != nil {
			t.Fatal(err)
		}
		return rc.GasUsed
	}
	tNew, tAgain := transfer(), transfer()
	t.Logf("gas baseline: ERC-20 transfer (new holder) %7d", tNew)
	t.Logf("gas baseline: ERC-20 transfer (holder)     %7d", tAgain)
	for _, op := range []struct {
		name string
		gas  uint64
	}{
		{"deposit (first, without approve)", dep.GasUsed},
		{"redeem (first of the channel)", r1.GasUsed},
		{"redeem (later, same lease)", r2.GasUsed},
		{"redeem (first of a second lease)", r3.GasUsed},
		{"requestClose", rc.GasUsed},
		{"withdraw", wd.GasUsed},
	} {
		t.Logf("gas %-34s %7d", op.name, op.gas)
		if op.gas == 0 || op.gas > 300_000 {
			t.Errorf("%s used %d gas", op.name, op.gas)
		}
	}
}
