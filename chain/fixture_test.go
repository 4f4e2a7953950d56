package chain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/params"
	lcrypto "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/money"
)

// simChainID is the simulated backend's chain ID.
var simChainID = params.AllDevChainProtocolChanges.ChainID

// party is one account on the simulated chain: its payment key, its
// libp2p identity and its adapter.
type party struct {
	key  *ecdsa.PrivateKey
	pay  *secp256k1.PrivateKey // key, as the node holds it
	addr chainpay.Address
	peer lcrypto.PrivKey
	id   peer.ID
	a    *Adapter
}

// fixture is a simulated chain with a test token, a PaymentChannel
// (scale 1, minimum window 1 h) and three funded parties.
type fixture struct {
	t                       *testing.T
	ctx                     context.Context
	sim                     *simulated.Backend
	ipc                     string // the chain's JSON-RPC socket
	token                   *bind.BoundContract
	cfg                     Config
	renter, supplier, other *party
}

const minWindow = time.Hour

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	keys := make([]*ecdsa.PrivateKey, 4) // deployer, renter, supplier, other
	alloc := types.GenesisAlloc{}
	for i := range keys {
		k, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
		alloc[crypto.PubkeyToAddress(k.PublicKey)] = types.Account{Balance: new(big.Int).Mul(big.NewInt(1000), big.NewInt(params.Ether))}
	}
	ipc := filepath.Join(t.TempDir(), "sim.ipc")
	sim := simulated.NewBackend(alloc, func(nc *node.Config, _ *ethconfig.Config) { nc.IPCPath = ipc })
	t.Cleanup(func() { sim.Close() })
	cl := sim.Client()
	tokenAddr, err := DeployTestToken(ctx, cl, simChainID, keys[0], func() { sim.Commit() })
	if err != nil {
		t.Fatalf("deploy token: %v", err)
	}
	contract, err := Deploy(ctx, cl, simChainID, keys[0], DeployConfig{Token: tokenAddr, Scale: 1, MinWindow: minWindow}, func() { sim.Commit() })
	if err != nil {
		t.Fatalf("deploy channel: %v", err)
	}
	f := &fixture{t: t, ctx: ctx, sim: sim, ipc: ipc, cfg: Config{
		Domain: chainpay.Domain{ChainID: simChainID, Contract: chainpay.Address(contract)}, Token: tokenAddr, Mine: func() { sim.Commit() },
	}}
	f.token = bind.NewBoundContract(tokenAddr, TestTokenABI, cl, cl, cl)
	ps := make([]*party, 3)
	for i := range ps {
		pk, _, err := lcrypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(pk)
		a, err := New(cl, f.cfg, keys[i+1])
		if err != nil {
			t.Fatal(err)
		}
		pay := secp256k1.PrivKeyFromBytes(crypto.FromECDSA(keys[i+1]))
		ps[i] = &party{key: keys[i+1], pay: pay, addr: a.Address(), peer: pk, id: id, a: a}
	}
	f.renter, f.supplier, f.other = ps[0], ps[1], ps[2]
	f.mint(f.renter.addr, 100*money.Unit)
	return f
}

func (f *fixture) mint(to chainpay.Address, m money.Micros) {
	f.t.Helper()
	opts := bind.NewKeyedTransactor(f.renter.key, simChainID)
	data, err := TestTokenABI.Pack("mint", common.Address(to), big.NewInt(int64(m)))
	if err != nil {
		f.t.Fatal(err)
	}
	tx, err := f.token.RawTransact(opts, data)
	if err != nil {
		f.t.Fatalf("mint: %v", err)
	}
	f.sim.Commit()
	if _, err := bind.WaitMined(f.ctx, f.sim.Client(), tx.Hash()); err != nil {
		f.t.Fatal(err)
	}
}

// balance is an account's token balance in micros.
func (f *fixture) balance(of chainpay.Address) money.Micros {
	f.t.Helper()
	var out []any
	if err := f.token.Call(&bind.CallOpts{Context: f.ctx}, &out, "balanceOf", common.Address(of)); err != nil {
		f.t.Fatal(err)
	}
	return money.Micros(out[0].(*big.Int).Int64())
}

func (f *fixture) channel() Channel {
	f.t.Helper()
	c, err := f.renter.a.Channel(f.ctx, f.renter.addr, f.supplier.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// deposit opens the renter's channel to the supplier.
func (f *fixture) deposit(m money.Micros, window time.Duration) *types.Receipt {
	f.t.Helper()
	r, err := f.renter.a.Deposit(f.ctx, f.supplier.addr, m, window)
	if err != nil {
		f.t.Fatalf("deposit: %v", err)
	}
	return r
}

// voucher is a gpumesh voucher the renter signs to the supplier on lease,
// with its chain voucher signed by signer (the renter's key unless a test
// forges it) payable to pay.
func (f *fixture) voucher(lease market.ID, nonce uint64, cum money.Micros) (*settle.Voucher, chainpay.ChainVoucher) {
	f.t.Helper()
	raw, err := settle.SealVoucher(&pb.Voucher{
		Supplier: []byte(f.supplier.id), LeaseId: lease[:], Nonce: nonce, CumAmountMicros: int64(cum),
		ReceiptHash: make([]byte, 32), CreatedMs: time.Now().UnixMilli(),
	}, f.renter.peer)
	if err != nil {
		f.t.Fatal(err)
	}
	v, err := settle.OpenVoucher(raw)
	if err != nil {
		f.t.Fatal(err)
	}
	cv, err := chainpay.VoucherOf(f.renter.addr, f.supplier.addr, v)
	if err != nil {
		f.t.Fatal(err)
	}
	cv, err = chainpay.SignVoucher(f.cfg.Domain, f.renter.pay, cv)
	if err != nil {
		f.t.Fatal(err)
	}
	return v, cv
}

// redeem redeems cv as the supplier and returns the error.
func (f *fixture) redeem(cv chainpay.ChainVoucher) (*types.Receipt, error) {
	return f.supplier.a.Redeem(f.ctx, cv)
}

// wantErr fails unless err is want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

func lease(n byte) market.ID { return market.ID{n, 0xee} }
