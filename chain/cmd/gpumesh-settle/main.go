// Command gpumesh-settle sends a node's chain settlement transactions:
// a renter's deposit, close and withdraw, and a supplier's redeem, once
// or as a daemon beside the node that redeems by itself (docs/PROTOCOL.md
// §43). It reads the node's configuration (the [chains.NAME] table its
// `chain` key names, the payment key file) and asks the node's API for
// the chain vouchers it keeps. It is the chain module's binary, apart
// from the node's so that go-ethereum stays out of the node; `gpumesh
// settle deposit|redeem|close|withdraw|run` runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/chain"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "gpumesh-settle:", err)
		os.Exit(1)
	}
}

// app holds the global flags and what they load.
type app struct {
	data, config string
	json         bool
	out          io.Writer
	log          *slog.Logger
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	a := &app{out: stdout, log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	root := &cobra.Command{
		Use:           "gpumesh-settle",
		Short:         "Send a gpumesh node's chain settlement transactions",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.data, "data", "", "the node's data dir (default $GPUMESH_HOME or ~/.gpumesh)")
	root.PersistentFlags().StringVar(&a.config, "config", "", "the node's config file (default DATA/config.toml)")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON")
	root.AddCommand(a.depositCmd(), a.redeemCmd(), a.runCmd(), a.closeCmd(), a.withdrawCmd())
	return root
}

// session is the node's chain, payment key and adapter.
type session struct {
	cfg   node.Config
	chain *node.Chain
	a     *chain.Adapter
}

func (a *app) open(ctx context.Context) (*session, error) {
	home, _ := os.UserHomeDir()
	cfg, err := node.LoadConfig(node.Input{DataFlag: a.data, ConfigFlag: a.config, Env: os.LookupEnv, Home: home,
		ServiceDir: node.ServiceDataDir, ServiceConfig: node.ServiceConfigFile})
	if err != nil {
		return nil, err
	}
	node.RunningAPI(&cfg)
	ch, err := cfg.ActiveChain()
	if err != nil {
		return nil, err
	}
	if ch == nil {
		return nil, errors.New("the node settles off chain only: set `chain` to a [chains.NAME] table of its config file")
	}
	key, err := node.LoadChainKey(ch, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	cl, err := ethclient.DialContext(ctx, ch.RPC)
	if err != nil {
		return nil, fmt.Errorf("chain %s: %w", ch.Name, err)
	}
	ad, err := chain.New(cl, chain.Config{Domain: ch.Domain, Token: common.Address(ch.Token)}, chain.ECDSA(key))
	if err != nil {
		return nil, err
	}
	return &session{cfg: cfg, chain: ch, a: ad}, nil
}

// tx prints a mined transaction.
func (a *app) tx(what string, r *types.Receipt) error {
	if a.json {
		return json.NewEncoder(a.out).Encode(map[string]any{"action": what, "tx": r.TxHash.Hex(), "block": r.BlockNumber.Uint64(), "gas_used": r.GasUsed})
	}
	fmt.Fprintf(a.out, "%s: tx %s in block %d, %d gas\n", what, r.TxHash.Hex(), r.BlockNumber.Uint64(), r.GasUsed)
	return nil
}

func (a *app) depositCmd() *cobra.Command {
	var window time.Duration
	cmd := &cobra.Command{
		Use:   "deposit SUPPLIER_ADDRESS AMOUNT",
		Short: "Deposit AMOUNT (e.g. 25.00) into this renter's channel to a supplier's payment address",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sup, err := chainpay.ParseAddress(args[0])
			if err != nil {
				return err
			}
			m, err := money.ParseMicros(args[1])
			if err != nil || m <= 0 {
				return fmt.Errorf("amount %q: want a positive amount such as 25.00", args[1])
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			r, err := s.a.Deposit(cmd.Context(), sup, m, max(window, s.chain.MinWindow))
			if err != nil {
				return err
			}
			return a.tx("deposit", r)
		},
	}
	cmd.Flags().DurationVar(&window, "window", 0, "the close window: how long the supplier may still redeem after a close (default the chain's min_window)")
	return cmd
}

func (a *app) closeCmd() *cobra.Command {
	var renter string
	cmd := &cobra.Command{
		Use:   "close [SUPPLIER_ADDRESS]",
		Short: "Start closing this renter's channel to a supplier (it keeps the window to redeem); with --renter, a supplier closes a renter's channel to it at once",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			ren, sup := s.a.Address(), chainpay.Address{}
			switch {
			case renter != "" && len(args) == 0:
				if ren, err = chainpay.ParseAddress(renter); err != nil {
					return err
				}
				sup = s.a.Address()
			case renter == "" && len(args) == 1:
				if sup, err = chainpay.ParseAddress(args[0]); err != nil {
					return err
				}
			default:
				return errors.New("give a supplier's address (as the renter) or --renter (as the supplier), not both")
			}
			r, err := s.a.RequestClose(cmd.Context(), ren, sup)
			if err != nil {
				return err
			}
			return a.tx("close", r)
		},
	}
	cmd.Flags().StringVar(&renter, "renter", "", "as the supplier: the renter's payment address")
	return cmd
}

func (a *app) withdrawCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "withdraw SUPPLIER_ADDRESS",
		Short: "Take back what this renter's closed channel to a supplier still holds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sup, err := chainpay.ParseAddress(args[0])
			if err != nil {
				return err
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			r, err := s.a.Withdraw(cmd.Context(), sup)
			if err != nil {
				return err
			}
			return a.tx("withdraw", r)
		},
	}
}

// redeemer is the session's redeemer of the node's kept chain vouchers.
func (s *session) redeemer(p chain.RedeemPolicy, log *slog.Logger) (*chain.Redeemer, error) {
	token, err := api.ReadToken(s.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("the node's API token: %w", err)
	}
	return chain.NewRedeemer(s.a, api.NewClient(s.cfg.API, token, api.WithTimeout(30*time.Second)), p, log), nil
}

func (a *app) printRedeemed(rs []chain.Redeemed) error {
	if a.json {
		if rs == nil {
			rs = []chain.Redeemed{}
		}
		return json.NewEncoder(a.out).Encode(rs)
	}
	for _, r := range rs {
		line := fmt.Sprintf("lease %.12s renter %s nonce %d: %s of %s redeemed (%s)", r.LeaseID, r.Renter, r.Nonce, r.Redeemed, r.CumMicros, r.Why)
		if r.Err != "" {
			line += ": " + r.Err
		}
		fmt.Fprintln(a.out, line)
	}
	return nil
}

func (a *app) redeemCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "redeem",
		Short: "As a supplier, redeem every kept chain voucher with value not yet redeemed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			r, err := s.redeemer(chain.RedeemPolicy{}, a.log)
			if err != nil {
				return err
			}
			rs, err := r.Once(cmd.Context(), true)
			if perr := a.printRedeemed(rs); err == nil {
				err = perr
			}
			return err
		},
	}
}

func (a *app) runCmd() *cobra.Command {
	var poll, every time.Duration
	var threshold string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "As a supplier, redeem by itself beside the node: when a lease settles, above a threshold, periodically, and at once when a renter starts a close",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			th, err := money.ParseMicros(threshold)
			if err != nil {
				return fmt.Errorf("--threshold: %w", err)
			}
			s, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			if poll <= 0 || poll > s.chain.MinWindow/4 {
				return fmt.Errorf("--poll %s: want a positive period of at most a quarter of the chain's min_window (%s)", poll, s.chain.MinWindow)
			}
			r, err := s.redeemer(chain.RedeemPolicy{Threshold: th, Every: every}, a.log)
			if err != nil {
				return err
			}
			a.log.Info("redeeming", "chain", s.chain.Name, "address", s.a.Address(), "poll", poll, "threshold", th, "every", every)
			if err := r.Run(cmd.Context(), poll); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&poll, "poll", 30*time.Second, "how often to look at the node's vouchers and the channels")
	cmd.Flags().DurationVar(&every, "every", 6*time.Hour, "redeem everything unredeemed at least this often (0: never for this reason)")
	cmd.Flags().StringVar(&threshold, "threshold", "10.00", "redeem a lease when its unredeemed value reaches this amount")
	return cmd
}
