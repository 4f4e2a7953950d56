package chain

import (
	"context"
	"crypto/ecdsa"
	_ "embed"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind/v2"
	"github.com/ethereum/go-ethereum/common"
)

// The contract's ABI and creation bytecode (hex), made by
// contracts/build.sh; TestContractsUpToDate checks they are current.
var (
	//go:embed contracts/build/PaymentChannel.abi
	paymentChannelABI string
	//go:embed contracts/build/PaymentChannel.bin
	paymentChannelBin string
	//go:embed contracts/build/TestToken.abi
	testTokenABI string
	//go:embed contracts/build/TestToken.bin
	testTokenBin string
)

// ChannelABI is the PaymentChannel contract's ABI.
var ChannelABI = mustABI(paymentChannelABI)

// TestTokenABI is the ABI of TestToken (contracts/TestToken.sol): a
// 6-decimal ERC-20 that anyone may mint, for tests and local testnets,
// never a real chain.
var TestTokenABI = mustABI(testTokenABI)

func mustABI(s string) abi.ABI {
	a, err := abi.JSON(strings.NewReader(s))
	if err != nil {
		panic(fmt.Sprintf("chain: embedded ABI: %v", err))
	}
	return a
}

// Backend is what the adapter needs of a chain client: go-ethereum's
// ethclient.Client, or simulated.Backend's Client() in tests.
type Backend interface {
	bind.ContractBackend
	bind.DeployBackend
}

// DeployConfig is the PaymentChannel contract's constructor input.
type DeployConfig struct {
	Token     common.Address // an ERC-20 whose transfer and transferFrom return true
	Scale     uint64         // token base units per micro: 1 for a 6-decimal token
	MinWindow time.Duration  // the shortest close window a deposit may set (whole seconds)
}

// Deploy deploys a PaymentChannel contract with key, waits for it to be
// mined (mine, if not nil, is called after sending: the simulated
// backend's Commit) and returns its address.
func Deploy(ctx context.Context, b Backend, chainID *big.Int, key *ecdsa.PrivateKey, cfg DeployConfig, mine func()) (common.Address, error) {
	if cfg.Scale == 0 {
		return common.Address{}, fmt.Errorf("deploy: scale 0")
	}
	input, err := ChannelABI.Pack("", cfg.Token, new(big.Int).SetUint64(cfg.Scale), uint64(cfg.MinWindow/time.Second))
	if err != nil {
		return common.Address{}, fmt.Errorf("deploy: %w", err)
	}
	return deployCode(ctx, b, chainID, key, paymentChannelBin, input, mine)
}

// DeployTestToken deploys a TestToken with key, as Deploy deploys the
// channel contract: the token of a simulated or local test chain.
func DeployTestToken(ctx context.Context, b Backend, chainID *big.Int, key *ecdsa.PrivateKey, mine func()) (common.Address, error) {
	return deployCode(ctx, b, chainID, key, testTokenBin, nil, mine)
}

func deployCode(ctx context.Context, b Backend, chainID *big.Int, key *ecdsa.PrivateKey, binHex string, input []byte, mine func()) (common.Address, error) {
	opts := bind.NewKeyedTransactor(key, chainID)
	opts.Context = ctx
	addr, tx, err := bind.DeployContract(opts, common.FromHex(strings.TrimSpace(binHex)), b, input)
	if err != nil {
		return common.Address{}, fmt.Errorf("deploy: %w", mapRevert(err))
	}
	if mine != nil {
		mine()
	}
	if _, err := bind.WaitDeployed(ctx, b, tx.Hash()); err != nil {
		return common.Address{}, fmt.Errorf("deploy: %w", err)
	}
	return addr, nil
}
