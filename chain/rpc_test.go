package chain

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
)

// serveRPC serves the simulated chain's JSON-RPC over HTTP on loopback,
// as a real node's endpoint: each request is passed to the backend's own
// RPC client.
func serveRPC(t *testing.T, f *fixture) string {
	t.Helper()
	rc, err := rpc.Dial(f.ipc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage   `json:"id"`
			Method string            `json:"method"`
			Params []json.RawMessage `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		args := make([]any, len(req.Params))
		for i, p := range req.Params {
			args[i] = p
		}
		var result json.RawMessage
		resp := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		if err := rc.CallContext(r.Context(), &result, req.Method, args...); err != nil {
			resp["error"] = map[string]any{"code": -32000, "message": err.Error()}
		} else {
			resp["result"] = result
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestReaderReadsTheContract: chainpay.Reader, the node's JSON-RPC reader
// of the contract, reads the channel and lane the adapter made: balance,
// window, what a lease was paid and its nonce; with confirmations it sees
// a deposit only once enough blocks follow it; a closing channel covers
// nothing more; an endpoint on another chain is refused.
func TestReaderReadsTheContract(t *testing.T) {
	f := newFixture(t)
	url := serveRPC(t, f)
	ctx := context.Background()
	r, err := chainpay.NewReader(url, f.cfg.Domain, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckChain(ctx); err != nil {
		t.Fatalf("check chain: %v", err)
	}
	var out []any
	if err := f.renter.a.contract.Call(nil, &out, "channelId", common.Address(f.renter.addr), common.Address(f.supplier.addr)); err != nil {
		t.Fatal(err)
	}
	if got := chainpay.ChannelID(f.renter.addr, f.supplier.addr); out[0].([32]byte) != got {
		t.Fatalf("contract channelId %x, chainpay %x", out[0], got)
	}
	f.deposit(10*money.Unit, 24*time.Hour)
	_, cv := f.voucher(lease(1), 3, 2500000)
	if _, err := f.redeem(cv); err != nil {
		t.Fatal(err)
	}
	s, err := r.State(ctx, f.renter.addr, f.supplier.addr)
	if err != nil || s.Balance != 7500000 || s.Window != 24*time.Hour || !s.ClosesAt.IsZero() {
		t.Fatalf("state %+v %v, want 7.5 units, 24 h, open", s, err)
	}
	paid, nonce, err := r.LanePaid(ctx, f.renter.addr, f.supplier.addr, lease(1))
	if err != nil || paid != 2500000 || nonce != 3 {
		t.Fatalf("lane paid %d nonce %d %v, want 2500000 and 3", paid, nonce, err)
	}
	bal, paid, err := r.Channel(ctx, f.renter.addr, f.supplier.addr, lease(2))
	if err != nil || bal != 7500000 || paid != 0 {
		t.Fatalf("channel for another lease: %d %d %v", bal, paid, err)
	}

	// One confirmation: a top-up shows only after one more block.
	conf, err := chainpay.NewReader(url, f.cfg.Domain, chainpay.ReaderOptions{Confirmations: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.deposit(money.Unit, 24*time.Hour)
	if s, err := conf.State(ctx, f.renter.addr, f.supplier.addr); err != nil || s.Balance != 7500000 {
		t.Fatalf("unconfirmed top-up counted: %+v %v", s, err)
	}
	f.sim.Commit()
	if s, err := conf.State(ctx, f.renter.addr, f.supplier.addr); err != nil || s.Balance != 8500000 {
		t.Fatalf("confirmed top-up: %+v %v", s, err)
	}

	if _, err := f.renter.a.RequestClose(ctx, f.renter.addr, f.supplier.addr); err != nil {
		t.Fatal(err)
	}
	if bal, _, err := r.Channel(ctx, f.renter.addr, f.supplier.addr, lease(1)); err != nil || bal != 0 {
		t.Fatalf("closing channel covers %d (%v), want 0", bal, err)
	}
	wrong, err := chainpay.NewReader(url, chainpay.Domain{ChainID: big.NewInt(1), Contract: f.cfg.Domain.Contract}, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.CheckChain(ctx); !errors.Is(err, chainpay.ErrRPC) {
		t.Fatalf("endpoint on another chain: %v", err)
	}
	// Not the contract: an account answers eth_call with nothing.
	notContract, err := chainpay.NewReader(url, chainpay.Domain{ChainID: simChainID, Contract: f.renter.addr}, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notContract.State(ctx, f.renter.addr, f.supplier.addr); !errors.Is(err, chainpay.ErrRPC) {
		t.Fatalf("reading an account as the contract: %v", err)
	}
}
