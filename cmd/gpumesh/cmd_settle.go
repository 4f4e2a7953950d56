package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

// settleHelper is the chain module's binary, which sends the
// transactions: go-ethereum stays out of this one.
const settleHelper = "gpumesh-settle"

func newSettleCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "settle",
		Short: "Settle leases on chain: the payment key, channel status, and (through gpumesh-settle) deposit, redeem, close, withdraw, run",
		Long: `Settle pays and is paid on an EVM chain through a payment channel contract (docs/PROTOCOL.md §43).
The node's config file names the chain: a [chains.NAME] table and the chain key (docs/suppliers.md).
key and status run here; deposit, redeem, close, withdraw and run send transactions with the
gpumesh-settle binary (the chain module's, built by make settle), found beside this one or on PATH.`,
	}
	cmd.AddCommand(newSettleKeyCmd(a), newSettleStatusCmd(a))
	for _, sub := range []struct{ use, short string }{
		{"deposit SUPPLIER_ADDRESS AMOUNT", "As a renter, deposit into your channel to a supplier's payment address"},
		{"redeem", "As a supplier, redeem every kept chain voucher with value not yet redeemed"},
		{"close [SUPPLIER_ADDRESS]", "As a renter, start closing your channel to a supplier (--renter ADDRESS: as a supplier, close at once)"},
		{"withdraw SUPPLIER_ADDRESS", "As a renter, take back what your closed channel still holds"},
		{"run", "As a supplier, redeem by itself beside the node"},
	} {
		cmd.AddCommand(helperCmd(a, sub.use, sub.short))
	}
	return cmd
}

// helperCmd runs gpumesh-settle with the same subcommand, arguments and
// global flags.
func helperCmd(a *app, use, short string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              short + " (gpumesh-settle)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, err := findHelper()
			if err != nil {
				return err
			}
			argv := []string{cmd.Name()}
			if a.data != "" {
				argv = append(argv, "--data", a.data)
			}
			if a.config != "" {
				argv = append(argv, "--config", a.config)
			}
			if a.json {
				argv = append(argv, "--json")
			}
			c := exec.CommandContext(cmd.Context(), bin, append(argv, args...)...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, a.stdout, a.stderr
			if err := c.Run(); err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return silentError{fmt.Errorf("%s %s: exit %d", settleHelper, cmd.Name(), ee.ExitCode())}
				}
				return err
			}
			return nil
		},
	}
}

// findHelper looks for gpumesh-settle beside this binary, then on PATH.
func findHelper() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), settleHelper)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(settleHelper); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found beside this binary or on PATH: build it with `make settle` (the chain module's binary, which sends the transactions)", settleHelper)
}

// activeChain is the chain the config names, or an error saying how to
// name one.
func (a *app) activeChain(cmd *cobra.Command) (node.Config, *node.Chain, error) {
	cfg, err := a.loadConfig(cmd)
	if err != nil {
		return cfg, nil, err
	}
	ch, err := cfg.ActiveChain()
	if err == nil && ch == nil {
		err = usageError{errors.New("no chain: set `chain` to a [chains.NAME] table of the config file (docs/suppliers.md, Settling on chain)")}
	}
	return cfg, ch, err
}

func newSettleKeyCmd(a *app) *cobra.Command {
	var light bool
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Print this node's payment address on its chain, making the encrypted payment key file on first use",
		Long: `Key makes the secp256k1 payment key of the chain the config names, in its key_file (a go-ethereum
keystore file, 0600, encrypted with the passphrase from $GPUMESH_CHAIN_PASSPHRASE or the table's
passphrase_file), and prints its address: fund it with gas, and, as a renter, with the token. An
existing key file is loaded, never replaced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, ch, err := a.activeChain(cmd)
			if err != nil {
				return err
			}
			created := false
			key, err := node.LoadChainKey(ch, os.LookupEnv)
			if errors.Is(err, os.ErrNotExist) {
				pass, perr := node.ChainPassphrase(ch, os.LookupEnv)
				if perr != nil {
					return perr
				}
				n, p := chainpay.StandardScryptN, chainpay.StandardScryptP
				if light {
					n, p = chainpay.LightScryptN, chainpay.LightScryptP
				}
				key, err = chainpay.NewKeyFile(ch.KeyFile, pass, n, p)
				created = true
			}
			if err != nil {
				return err
			}
			out := struct {
				Chain   string `json:"chain"`
				ChainID string `json:"chain_id"`
				Address string `json:"address"`
				KeyFile string `json:"key_file"`
				Created bool   `json:"created"`
			}{ch.Name, ch.Domain.ChainID.String(), chainpay.AddressOf(key.PubKey()).String(), ch.KeyFile, created}
			if a.json {
				return a.printJSON(out)
			}
			fmt.Fprintln(a.stdout, out.Address)
			if created {
				fmt.Fprintf(a.stderr, "created a payment key in %s; keep the passphrase: without it the key is lost\n", out.KeyFile)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&light, "light-kdf", false, "a cheap scrypt cost (tests and throwaway testnet keys only)")
	return cmd
}

func newSettleStatusCmd(a *app) *cobra.Command {
	var suppliers []string
	cmd := &cobra.Command{
		Use:   "status [--supplier ADDRESS]...",
		Short: "Show the chain, this node's payment address, its renter channels to the suppliers named, and what it may redeem as a supplier",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, ch, err := a.activeChain(cmd)
			if err != nil {
				return err
			}
			key, err := node.LoadChainKey(ch, os.LookupEnv)
			if err != nil {
				return err
			}
			me := chainpay.AddressOf(key.PubKey())
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			var sups []chainpay.Address
			for _, s := range suppliers {
				sup, err := chainpay.ParseAddress(s)
				if err != nil {
					return usageError{err}
				}
				sups = append(sups, sup)
			}
			var rs []api.Redeemable
			if cfg.API != "off" {
				c, _ := readClient(cfg)
				if rs, err = c.Redeemable(ctx); err != nil {
					fmt.Fprintf(a.stderr, "the node's kept chain vouchers: %v\n", err)
				}
			}
			st, err := node.ChainStatus(ctx, ch, me, sups, rs)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(st)
			}
			fmt.Fprintf(a.stdout, "chain %s (id %s), contract %s\naddress %s\n", st.Chain, st.ChainID, st.Contract, st.Address)
			if len(st.Channels) > 0 {
				var rows [][]string
				for _, c := range st.Channels {
					rows = append(rows, []string{c.Supplier, c.Balance.String(), c.Window, orDash(c.ClosesAt)})
				}
				a.table([]string{"SUPPLIER", "BALANCE", "WINDOW", "CLOSES AT"}, rows)
			}
			if len(st.Redeemable) > 0 {
				var rows [][]string
				for _, r := range st.Redeemable {
					rows = append(rows, []string{short(r.LeaseID), r.Renter, strconv.FormatUint(r.Nonce, 10), r.Cum.String(), r.Redeemed.String(), r.Unredeemed.String(), strconv.FormatBool(r.Closing)})
				}
				a.table([]string{"LEASE", "RENTER", "NONCE", "VOUCHED", "REDEEMED", "UNREDEEMED", "CLOSING"}, rows)
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&suppliers, "supplier", nil, "a supplier's payment address: show your channel to it (repeatable)")
	return cmd
}
