// Package chaintest runs a simulated EVM chain (go-ethereum's simulated
// backend) with a TestToken and a PaymentChannel deployed and funded
// accounts, for tests of chain settlement: in process, and over HTTP
// JSON-RPC on loopback as a real endpoint, which the node's
// chainpay.Reader and the gpumesh-settle binary use.
package chaintest

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/gpumesh/gpumesh/chain"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
)

// ChainID is the simulated chain's ID.
var ChainID = params.AllDevChainProtocolChanges.ChainID

// MinWindow is the deployed contract's shortest close window.
const MinWindow = time.Hour

// Chain is a simulated chain with the contract deployed (scale 1).
type Chain struct {
	Sim    *simulated.Backend
	Domain chainpay.Domain
	Token  common.Address
	// Keys are funded with ether for gas; Keys[0] deployed the contracts.
	Keys []*ecdsa.PrivateKey
	// IPC is the chain's JSON-RPC socket.
	IPC string

	t     testing.TB
	token *bind.BoundContract
	url   string
	mu    sync.Mutex // serialises Commit with AutoMine
}

// New starts a chain with accounts funded accounts (besides the
// deployer), deploys the token and the contract, and closes it when the
// test ends.
func New(t testing.TB, accounts int) *Chain {
	t.Helper()
	ctx := context.Background()
	c := &Chain{t: t, IPC: filepath.Join(t.TempDir(), "sim.ipc")}
	alloc := types.GenesisAlloc{}
	for range accounts + 1 {
		k, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		c.Keys = append(c.Keys, k)
		alloc[crypto.PubkeyToAddress(k.PublicKey)] = types.Account{Balance: new(big.Int).Mul(big.NewInt(1000), big.NewInt(params.Ether))}
	}
	c.Sim = simulated.NewBackend(alloc, func(nc *node.Config, _ *ethconfig.Config) { nc.IPCPath = c.IPC })
	t.Cleanup(func() { c.Sim.Close() })
	cl := c.Sim.Client()
	var err error
	if c.Token, err = chain.DeployTestToken(ctx, cl, ChainID, c.Keys[0], c.Commit); err != nil {
		t.Fatalf("deploy token: %v", err)
	}
	contract, err := chain.Deploy(ctx, cl, ChainID, c.Keys[0], chain.DeployConfig{Token: c.Token, Scale: 1, MinWindow: MinWindow}, c.Commit)
	if err != nil {
		t.Fatalf("deploy channel: %v", err)
	}
	c.Domain = chainpay.Domain{ChainID: ChainID, Contract: chainpay.Address(contract)}
	c.token = bind.NewBoundContract(c.Token, chain.TestTokenABI, cl, cl, cl)
	return c
}

// Commit mines a block.
func (c *Chain) Commit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Sim.Commit()
}

// AutoMine mines a block every period until the test ends: for clients
// that send transactions and wait for them, as on a real chain.
func (c *Chain) AutoMine(every time.Duration) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c.Commit()
			}
		}
	}()
	c.t.Cleanup(func() { close(done); wg.Wait() })
}

// Config is the adapter configuration of the deployment (mine: Commit, or
// nil with AutoMine).
func (c *Chain) Config(mine func()) chain.Config {
	return chain.Config{Domain: c.Domain, Token: c.Token, Mine: mine}
}

// Address is a key's payment address.
func Address(k *ecdsa.PrivateKey) chainpay.Address {
	return chainpay.Address(crypto.PubkeyToAddress(k.PublicKey))
}

// Mint gives to m of the token.
func (c *Chain) Mint(to chainpay.Address, m money.Micros) {
	c.t.Helper()
	opts := bind.NewKeyedTransactor(c.Keys[0], ChainID)
	data, err := chain.TestTokenABI.Pack("mint", common.Address(to), big.NewInt(int64(m)))
	if err != nil {
		c.t.Fatal(err)
	}
	tx, err := c.token.RawTransact(opts, data)
	if err != nil {
		c.t.Fatalf("mint: %v", err)
	}
	c.Commit()
	if _, err := bind.WaitMined(context.Background(), c.Sim.Client(), tx.Hash()); err != nil {
		c.t.Fatal(err)
	}
}

// Balance is an account's token balance.
func (c *Chain) Balance(of chainpay.Address) money.Micros {
	c.t.Helper()
	var out []any
	if err := c.token.Call(&bind.CallOpts{Context: context.Background()}, &out, "balanceOf", common.Address(of)); err != nil {
		c.t.Fatal(err)
	}
	return money.Micros(out[0].(*big.Int).Int64())
}

// URL serves the chain's JSON-RPC over HTTP on loopback, as a real
// node's endpoint, and returns its address: each request is passed to
// the chain's own RPC server.
func (c *Chain) URL() string {
	c.t.Helper()
	if c.url != "" {
		return c.url
	}
	rc, err := rpc.Dial(c.IPC)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(rc.Close)
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
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	c.t.Cleanup(srv.Close)
	c.url = srv.URL
	return c.url
}
