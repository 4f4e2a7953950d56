package node

import (
	"cmp"
	"fmt"
	"math/big"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gpumesh/gpumesh/market/chainpay"
)

// A node settles on chain with the deployment of one [chains.NAME] table
// of its config file, named by the `chain` key (docs/PROTOCOL.md §43):
//
//	chain = "base-sepolia"
//	settle_require = true
//
//	[chains.base-sepolia]
//	rpc = "https://sepolia.base.org"
//	chain_id = 84532
//	contract = "0x…"            # the PaymentChannel deployment
//	token = "0x…"               # its ERC-20 (6 decimals: 1 micro = 1 unit)
//	key_file = "chain-key.json" # relative to the data dir
//	confirmations = 2
//	min_window = "24h"
//
// The key file's passphrase comes from $GPUMESH_CHAIN_PASSPHRASE, or from
// the table's passphrase_file; it is never logged or shown.

// ChainPassphraseEnv holds the payment key file's passphrase.
const ChainPassphraseEnv = "GPUMESH_CHAIN_PASSPHRASE"

// ChainConfig is one [chains.NAME] table.
type ChainConfig struct {
	RPC            string `toml:"rpc" json:"rpc"`
	ChainID        int64  `toml:"chain_id" json:"chain_id"`
	Contract       string `toml:"contract" json:"contract"`
	Token          string `toml:"token" json:"token"`
	KeyFile        string `toml:"key_file" json:"key_file"`
	PassphraseFile string `toml:"passphrase_file" json:"passphrase_file,omitempty"`
	Confirmations  int64  `toml:"confirmations" json:"confirmations"`
	MinWindow      string `toml:"min_window" json:"min_window"`
}

// Chain is a ChainConfig checked, with its paths resolved.
type Chain struct {
	Name           string
	RPC            string
	Domain         chainpay.Domain
	Token          chainpay.Address
	KeyFile        string // absolute
	PassphraseFile string // absolute; "" for none
	Confirmations  uint64
	MinWindow      time.Duration
}

// parseChains reads the [chains.*] tables of a config file; any other
// key in them is an error.
func parseChains(b []byte, path string) (map[string]ChainConfig, error) {
	var f struct {
		Chains map[string]ChainConfig `toml:"chains"`
	}
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return nil, fmt.Errorf("config: parse %s: chains: %w", path, err)
	}
	var unknown []string
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == "chains" {
			unknown = append(unknown, k.String())
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("config: %s: unknown keys %s (a chain table has rpc, chain_id, contract, token, key_file, passphrase_file, confirmations, min_window)", path, strings.Join(unknown, ", "))
	}
	return f.Chains, nil
}

// ActiveChain checks the table the `chain` key names; nil when the node
// settles off chain only.
func (c Config) ActiveChain() (*Chain, error) {
	if c.Chain == "" {
		if c.SettleRequire {
			return nil, fmt.Errorf("config: settle_require is set but no chain is (set chain to a [chains.NAME] table)")
		}
		return nil, nil
	}
	t, ok := c.Chains[c.Chain]
	if !ok {
		names := make([]string, 0, len(c.Chains))
		for n := range c.Chains {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("config: chain %q: no [chains.%s] table (tables: %s)", c.Chain, c.Chain, strings.Join(names, ", "))
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("config: [chains.%s]: "+format, append([]any{c.Chain}, args...)...)
	}
	ch := &Chain{Name: c.Chain, RPC: t.RPC}
	if !strings.HasPrefix(t.RPC, "http://") && !strings.HasPrefix(t.RPC, "https://") {
		return nil, bad("rpc %q: want an http:// or https:// JSON-RPC endpoint", t.RPC)
	}
	if t.ChainID <= 0 {
		return nil, bad("chain_id %d: want the chain's ID, above 0", t.ChainID)
	}
	contract, err := chainpay.ParseAddress(t.Contract)
	if err != nil {
		return nil, bad("contract: %v", err)
	}
	ch.Domain = chainpay.Domain{ChainID: big.NewInt(t.ChainID), Contract: contract}
	if ch.Token, err = chainpay.ParseAddress(t.Token); err != nil {
		return nil, bad("token: %v", err)
	}
	if t.KeyFile == "" {
		return nil, bad("key_file: not set (gpumesh settle key makes one)")
	}
	ch.KeyFile = c.dataPath(t.KeyFile)
	if t.PassphraseFile != "" {
		ch.PassphraseFile = c.dataPath(t.PassphraseFile)
	}
	if t.Confirmations < 0 {
		return nil, bad("confirmations %d: want 0 or more", t.Confirmations)
	}
	ch.Confirmations = uint64(t.Confirmations)
	if ch.MinWindow, err = time.ParseDuration(cmp.Or(t.MinWindow, "24h")); err != nil || ch.MinWindow < time.Hour {
		return nil, bad("min_window %q: want a duration of 1h or more", t.MinWindow)
	}
	return ch, nil
}

// dataPath resolves p against the data dir.
func (c Config) dataPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.DataDir, p)
}
