package chain

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
)

// erc20ABI is the part of ERC-20 the adapter calls (approve, before a
// deposit).
var erc20ABI = mustABI(`[{"type":"function","name":"approve","stateMutability":"nonpayable","inputs":[{"name":"spender","type":"address"},{"name":"amount","type":"uint256"}],"outputs":[{"name":"","type":"bool"}]}]`)

// Config names one deployment of the contract.
type Config struct {
	chainpay.Domain                // chain ID and contract address
	Token           common.Address // the contract's token
	// Mine, if not nil, is called after each transaction is sent: the
	// simulated backend's Commit in tests; nil on a real chain.
	Mine func()
}

// Adapter sends one payment key's transactions to the contract and reads
// its state. A renter's adapter deposits, closes and withdraws; a
// supplier's redeems. Its methods wait for their transaction's receipt
// and return it; a revert is one of the named errors (ErrStale...).
type Adapter struct {
	b        Backend
	cfg      Config
	key      *ecdsa.PrivateKey
	addr     common.Address
	contract *bind.BoundContract
	token    *bind.BoundContract
}

// New makes an adapter for key on the deployment cfg names.
func New(b Backend, cfg Config, key *ecdsa.PrivateKey) (*Adapter, error) {
	if err := cfg.Domain.Check(); err != nil {
		return nil, err
	}
	return &Adapter{
		b: b, cfg: cfg, key: key, addr: crypto.PubkeyToAddress(key.PublicKey),
		contract: bind.NewBoundContract(common.Address(cfg.Contract), ChannelABI, b, b, b),
		token:    bind.NewBoundContract(cfg.Token, erc20ABI, b, b, b),
	}, nil
}

// Address is the adapter's payment address.
func (a *Adapter) Address() chainpay.Address { return chainpay.Address(a.addr) }

// Domain is the EIP-712 domain of the adapter's deployment.
func (a *Adapter) Domain() chainpay.Domain { return a.cfg.Domain }

// Channel is the contract's state of one (renter, supplier) channel.
type Channel struct {
	Balance  money.Micros  // deposited, less redeemed and withdrawn
	Window   time.Duration // the close window; 0: no channel
	ClosesAt time.Time     // zero while open; from then redeem is refused and withdraw allowed
}

// Channel reads the channel from renter to supplier.
func (a *Adapter) Channel(ctx context.Context, renter, supplier chainpay.Address) (Channel, error) {
	var out []any
	if err := a.contract.Call(&bind.CallOpts{Context: ctx}, &out, "channels", chainpay.ChannelID(renter, supplier)); err != nil {
		return Channel{}, fmt.Errorf("channel: %w", err)
	}
	bal := out[0].(*big.Int)
	if !bal.IsInt64() {
		return Channel{}, fmt.Errorf("channel: balance %s micros does not fit money.Micros", bal)
	}
	c := Channel{Balance: money.Micros(bal.Int64()), Window: time.Duration(out[1].(uint64)) * time.Second}
	if at := out[2].(uint64); at != 0 {
		c.ClosesAt = time.Unix(int64(at), 0)
	}
	return c, nil
}

// Lane is what the contract has paid on one lease.
type Lane struct {
	Nonce uint64       // of the last voucher redeemed; 0: none
	Paid  money.Micros // cumulative
}

// Paid reads what the lease has been paid from the channel from renter to
// supplier.
func (a *Adapter) Paid(ctx context.Context, renter, supplier chainpay.Address, lease [32]byte) (Lane, error) {
	var out []any
	if err := a.contract.Call(&bind.CallOpts{Context: ctx}, &out, "lanes", chainpay.ChannelID(renter, supplier), lease); err != nil {
		return Lane{}, fmt.Errorf("lane: %w", err)
	}
	paid := out[1].(*big.Int)
	if !paid.IsInt64() {
		return Lane{}, fmt.Errorf("lane: paid %s micros does not fit money.Micros", paid)
	}
	return Lane{Nonce: out[0].(uint64), Paid: money.Micros(paid.Int64())}, nil
}

// HashVoucher asks the contract for a chain voucher's EIP-712 digest (the
// golden vector of Domain.Digest).
func (a *Adapter) HashVoucher(ctx context.Context, cv chainpay.ChainVoucher) ([32]byte, error) {
	var out []any
	err := a.contract.Call(&bind.CallOpts{Context: ctx}, &out, "hashVoucher",
		common.Address(cv.Renter), common.Address(cv.Supplier), cv.LeaseID, cv.Nonce, cv.CumMicros, cv.VoucherHash)
	if err != nil {
		return [32]byte{}, fmt.Errorf("hashVoucher: %w", err)
	}
	return out[0].([32]byte), nil
}

// Deposit opens or tops up the channel from the adapter's address to
// supplier with m and sets its close window (at least the contract's
// minimum and the channel's current one); it cancels a pending close. It
// first approves the contract to take the tokens.
func (a *Adapter) Deposit(ctx context.Context, supplier chainpay.Address, m money.Micros, window time.Duration) (*types.Receipt, error) {
	if m < 0 {
		return nil, fmt.Errorf("deposit: negative amount %s", m)
	}
	var out []any
	if err := a.contract.Call(&bind.CallOpts{Context: ctx}, &out, "scale"); err != nil {
		return nil, fmt.Errorf("deposit: scale: %w", err)
	}
	units := new(big.Int).Mul(big.NewInt(int64(m)), out[0].(*big.Int))
	if _, err := a.send(ctx, a.token, erc20ABI, "approve", common.Address(a.cfg.Contract), units); err != nil {
		return nil, fmt.Errorf("deposit: approve: %w", err)
	}
	r, err := a.send(ctx, a.contract, ChannelABI, "deposit", common.Address(supplier), big.NewInt(int64(m)), uint64(window/time.Second))
	if err != nil {
		return nil, fmt.Errorf("deposit: %w", err)
	}
	return r, nil
}

// Redeem redeems cv, a chain voucher payable to the adapter's address:
// the contract pays the lease's cumulative amount less what it has paid,
// or nothing.
func (a *Adapter) Redeem(ctx context.Context, cv chainpay.ChainVoucher) (*types.Receipt, error) {
	if common.Address(cv.Supplier) != a.addr {
		return nil, fmt.Errorf("redeem: voucher pays %s, not this key's %s", cv.Supplier, a.addr)
	}
	r, err := a.send(ctx, a.contract, ChannelABI, "redeem", common.Address(cv.Renter), cv.LeaseID, cv.Nonce, cv.CumMicros, cv.VoucherHash,
		cv.Sig[64], [32]byte(cv.Sig[:32]), [32]byte(cv.Sig[32:64]))
	if err != nil {
		return nil, fmt.Errorf("redeem lease %x nonce %d: %w", cv.LeaseID[:4], cv.Nonce, err)
	}
	return r, nil
}

// RequestClose closes the channel from renter to supplier: from the
// renter, the supplier keeps the channel's window to redeem; from the
// supplier, at once.
func (a *Adapter) RequestClose(ctx context.Context, renter, supplier chainpay.Address) (*types.Receipt, error) {
	r, err := a.send(ctx, a.contract, ChannelABI, "requestClose", common.Address(renter), common.Address(supplier))
	if err != nil {
		return nil, fmt.Errorf("request close: %w", err)
	}
	return r, nil
}

// Withdraw takes back, once the close window has passed, what the
// channel from the adapter's address to supplier still holds.
func (a *Adapter) Withdraw(ctx context.Context, supplier chainpay.Address) (*types.Receipt, error) {
	r, err := a.send(ctx, a.contract, ChannelABI, "withdraw", common.Address(supplier))
	if err != nil {
		return nil, fmt.Errorf("withdraw: %w", err)
	}
	return r, nil
}

// send packs and sends one transaction, waits for its receipt and maps a
// revert to its named error.
func (a *Adapter) send(ctx context.Context, c *bind.BoundContract, ab abi.ABI, method string, args ...any) (*types.Receipt, error) {
	data, err := ab.Pack(method, args...)
	if err != nil {
		return nil, err
	}
	opts := bind.NewKeyedTransactor(a.key, a.cfg.ChainID)
	opts.Context = ctx
	tx, err := c.RawTransact(opts, data)
	if err != nil {
		return nil, mapRevert(err)
	}
	if a.cfg.Mine != nil {
		a.cfg.Mine()
	}
	r, err := bind.WaitMined(ctx, a.b, tx.Hash())
	if err != nil {
		return nil, err
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return r, fmt.Errorf("%w: transaction %s failed", ErrReverted, tx.Hash())
	}
	return r, nil
}
