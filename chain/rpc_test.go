package chain_test

import (
	"context"
	"encoding/hex"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/gpumesh/gpumesh/chain"
	"github.com/gpumesh/gpumesh/chain/chaintest"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

// actor is one funded account with its adapter.
type actor struct {
	a   *chain.Adapter
	pay *secp256k1.PrivateKey
}

func newActor(t *testing.T, c *chaintest.Chain, i int, mine func()) actor {
	t.Helper()
	a, err := chain.New(c.Sim.Client(), c.Config(mine), c.Keys[i])
	if err != nil {
		t.Fatal(err)
	}
	return actor{a: a, pay: secp256k1.PrivKeyFromBytes(crypto.FromECDSA(c.Keys[i]))}
}

// TestReaderReadsTheContract: chainpay.Reader, the node's JSON-RPC reader
// of the contract, reads the channel and lane the adapter made: balance,
// window, what a lease was paid and its nonce; with confirmations it sees
// a deposit only once enough blocks follow it; a closing channel covers
// nothing more; an endpoint on another chain is refused.
func TestReaderReadsTheContract(t *testing.T) {
	c := chaintest.New(t, 2)
	ren, sup := newActor(t, c, 1, c.Commit), newActor(t, c, 2, c.Commit)
	c.Mint(ren.a.Address(), 100*money.Unit)
	url := c.URL()
	ctx := context.Background()
	lease := func(n byte) [32]byte { return [32]byte{n, 0xee} }
	r, err := chainpay.NewReader(url, c.Domain, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckChain(ctx); err != nil {
		t.Fatalf("check chain: %v", err)
	}
	var out []any
	cl := c.Sim.Client()
	contract := bind.NewBoundContract(common.Address(c.Domain.Contract), chain.ChannelABI, cl, cl, cl)
	if err := contract.Call(nil, &out, "channelId", common.Address(ren.a.Address()), common.Address(sup.a.Address())); err != nil {
		t.Fatal(err)
	}
	if got := chainpay.ChannelID(ren.a.Address(), sup.a.Address()); out[0].([32]byte) != got {
		t.Fatalf("contract channelId %x, chainpay %x", out[0], got)
	}
	if _, err := ren.a.Deposit(ctx, sup.a.Address(), 10*money.Unit, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	cv, err := chainpay.SignVoucher(c.Domain, ren.pay, chainpay.ChainVoucher{
		Renter: ren.a.Address(), Supplier: sup.a.Address(), LeaseID: lease(1), Nonce: 3, CumMicros: 2500000, VoucherHash: [32]byte{9},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.a.Redeem(ctx, cv); err != nil {
		t.Fatal(err)
	}
	s, err := r.State(ctx, ren.a.Address(), sup.a.Address())
	if err != nil || s.Balance != 7500000 || s.Window != 24*time.Hour || !s.ClosesAt.IsZero() {
		t.Fatalf("state %+v %v, want 7.5 units, 24 h, open", s, err)
	}
	paid, nonce, err := r.LanePaid(ctx, ren.a.Address(), sup.a.Address(), lease(1))
	if err != nil || paid != 2500000 || nonce != 3 {
		t.Fatalf("lane paid %d nonce %d %v, want 2500000 and 3", paid, nonce, err)
	}
	bal, paid, err := r.Channel(ctx, ren.a.Address(), sup.a.Address(), lease(2))
	if err != nil || bal != 7500000 || paid != 0 {
		t.Fatalf("channel for another lease: %d %d %v", bal, paid, err)
	}

	// One confirmation: a top-up shows only after one more block.
	conf, err := chainpay.NewReader(url, c.Domain, chainpay.ReaderOptions{Confirmations: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ren.a.Deposit(ctx, sup.a.Address(), money.Unit, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if s, err := conf.State(ctx, ren.a.Address(), sup.a.Address()); err != nil || s.Balance != 7500000 {
		t.Fatalf("unconfirmed top-up counted: %+v %v", s, err)
	}
	c.Commit()
	if s, err := conf.State(ctx, ren.a.Address(), sup.a.Address()); err != nil || s.Balance != 8500000 {
		t.Fatalf("confirmed top-up: %+v %v", s, err)
	}

	if _, err := ren.a.RequestClose(ctx, ren.a.Address(), sup.a.Address()); err != nil {
		t.Fatal(err)
	}
	if bal, _, err := r.Channel(ctx, ren.a.Address(), sup.a.Address(), lease(1)); err != nil || bal != 0 {
		t.Fatalf("closing channel covers %d (%v), want 0", bal, err)
	}
	wrong, err := chainpay.NewReader(url, chainpay.Domain{ChainID: big.NewInt(1), Contract: c.Domain.Contract}, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.CheckChain(ctx); !errors.Is(err, chainpay.ErrRPC) {
		t.Fatalf("endpoint on another chain: %v", err)
	}
	// Not the contract: an account answers eth_call with nothing.
	notContract, err := chainpay.NewReader(url, chainpay.Domain{ChainID: chaintest.ChainID, Contract: ren.a.Address()}, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notContract.State(ctx, ren.a.Address(), sup.a.Address()); !errors.Is(err, chainpay.ErrRPC) {
		t.Fatalf("reading an account as the contract: %v", err)
	}
}

// TestChainStatus: `gpumesh settle status`'s reading (node.ChainStatus)
// of a renter's channel and of a supplier's kept chain vouchers: the
// balance and window, what a lease's lane has been paid and what is left
// to redeem, and that a close shows on both.
func TestChainStatus(t *testing.T) {
	c := chaintest.New(t, 2)
	ren, sup := newActor(t, c, 1, c.Commit), newActor(t, c, 2, c.Commit)
	c.Mint(ren.a.Address(), 10*money.Unit)
	ctx := context.Background()
	if _, err := ren.a.Deposit(ctx, sup.a.Address(), 5*money.Unit, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	sign := func(nonce uint64, cum money.Micros) chainpay.ChainVoucher {
		cv, err := chainpay.SignVoucher(c.Domain, ren.pay, chainpay.ChainVoucher{
			Renter: ren.a.Address(), Supplier: sup.a.Address(), LeaseID: [32]byte{7}, Nonce: nonce, CumMicros: uint64(cum), VoucherHash: [32]byte{byte(nonce)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return cv
	}
	if _, err := sup.a.Redeem(ctx, sign(1, money.Unit)); err != nil {
		t.Fatal(err)
	}
	kept, err := chainpay.EncodeRedeemable(c.Domain, sign(2, 3*money.Unit))
	if err != nil {
		t.Fatal(err)
	}
	ch := &node.Chain{Name: "sim", RPC: c.URL(), Domain: c.Domain}
	rs := []api.Redeemable{{LeaseID: "07", Raw: hex.EncodeToString(kept)}}

	st, err := node.ChainStatus(ctx, ch, ren.a.Address(), []chainpay.Address{sup.a.Address()}, nil)
	if err != nil || len(st.Channels) != 1 || st.Channels[0].Balance != 4*money.Unit || st.Channels[0].Window != "2h0m0s" || st.Channels[0].ClosesAt != "" {
		t.Fatalf("renter's status %+v %v", st, err)
	}
	st, err = node.ChainStatus(ctx, ch, sup.a.Address(), nil, rs)
	if err != nil || len(st.Redeemable) != 1 {
		t.Fatalf("supplier's status %+v %v", st, err)
	}
	if r := st.Redeemable[0]; r.Cum != 3*money.Unit || r.Redeemed != money.Unit || r.Unredeemed != 2*money.Unit || r.Nonce != 2 || r.Closing {
		t.Fatalf("kept voucher's status %+v", r)
	}
	// Another supplier's status leaves this supplier's voucher out.
	if st, err := node.ChainStatus(ctx, ch, ren.a.Address(), nil, rs); err != nil || len(st.Redeemable) != 0 {
		t.Fatalf("another address's status %+v %v", st, err)
	}
	if _, err := ren.a.RequestClose(ctx, ren.a.Address(), sup.a.Address()); err != nil {
		t.Fatal(err)
	}
	st, err = node.ChainStatus(ctx, ch, sup.a.Address(), nil, rs)
	if err != nil || !st.Redeemable[0].Closing {
		t.Fatalf("after a close: %+v %v", st, err)
	}
	st, err = node.ChainStatus(ctx, ch, ren.a.Address(), []chainpay.Address{sup.a.Address()}, nil)
	if err != nil || st.Channels[0].ClosesAt == "" {
		t.Fatalf("renter's status after a close: %+v %v", st, err)
	}
}
