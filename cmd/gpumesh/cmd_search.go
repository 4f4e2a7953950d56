package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/light"
)

func newSearchCmd(a *app) *cobra.Command {
	var (
		timeout time.Duration
		walkDHT bool
		simOK   bool
	)
	cmd := &cobra.Command{
		Use:   "search [FILTER...]",
		Short: "Find GPU offers on the network (runs as a light client)",
		Long: `Search joins the network as a light client (DHT client mode, an ephemeral identity
unless --data is given), asks its bootstrap nodes for the signed profiles of the suppliers
of the models the filter allows (one round trip each; every profile's signature and expiry
are checked here), and prints the offers that match. When no bootstrap node answers, or
with --dht, it also looks the suppliers up in the DHT and fetches each profile there, and
warns when the DHT finds suppliers that the bootstrap nodes left out.

Filter terms are KEY OP VALUE, space-separated; OP is one of = != < <= > >=; | separates
alternatives. Keys: model, count, free, vram (GiB), cc, region, price (per GPU-hour),
rep (0-1), uptime (%), tflops, verified, simulated.

Offers of simulated GPUs (--gpus sim:..., as on a testnet) are left out unless the filter
says something of them (simulated=true) or --allow-simulated is given: a simulated GPU is no
hardware. The count left out is shown on stderr.`,
		Example: `  gpumesh search --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo... model=h100-sxm|a100-80gb vram>=80
  gpumesh search region=eu-west simulated=false --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.quiet = true
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			f, err := market.ParseFilter(strings.Join(args, " "))
			if err != nil {
				return usageError{err}
			}
			var opts []light.Option
			if walkDHT {
				opts = append(opts, light.WithCrossCheck())
			}
			if !defaultDataDir(cfg) {
				key, _, err := node.LoadOrCreateKey(cfg.DataDir)
				if err != nil {
					return err
				}
				opts = append(opts, light.WithKey(key))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			sp := a.spin("joining the network")
			lc, err := a.joinLight(ctx, cfg, opts...)
			sp.Stop()
			if err != nil {
				return err
			}
			defer lc.Close()
			sp = a.spin("searching")
			offers, err := lc.Search(ctx, f)
			sp.Stop()
			if err != nil {
				return err
			}
			if real, added := f.RealOnly(simOK); added {
				all := len(offers)
				offers = slices.DeleteFunc(offers, func(o market.Offer) bool { ok, _ := real.Match(o); return !ok })
				if hidden := all - len(offers); hidden > 0 {
					fmt.Fprintf(a.stderr, "%d %s of simulated GPUs left out (add simulated=true to the filter, or --allow-simulated, to see them)\n", hidden, map[bool]string{true: "offer", false: "offers"}[hidden == 1])
				}
			}
			return a.printOffers(offers)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 20*time.Second, "give up after this long")
	cmd.Flags().BoolVar(&simOK, "allow-simulated", false, "also show offers of simulated GPUs when the filter says nothing of them")
	cmd.Flags().BoolVar(&walkDHT, "dht", false, "also walk the DHT (slower: a lookup, then one per supplier) to cross-check what the bootstrap nodes list")
	return cmd
}

func (a *app) printOffers(offers []market.Offer) error {
	if a.json {
		return a.printJSON(orEmpty(offers))
	}
	if len(offers) == 0 {
		fmt.Fprintln(a.stdout, "no offers match")
		return nil
	}
	var rows [][]string
	for _, o := range offers {
		price := "-"
		if o.PriceMicros > 0 {
			price = o.PriceMicros.String()
		}
		rep := "-"
		if o.Reputation != nil {
			rep = fmt.Sprintf("%.2f", *o.Reputation)
		}
		rows = append(rows, []string{shortID(o.PeerID), o.Model, fmt.Sprintf("%d/%d", o.Free, o.Count), price, strconv.Itoa(o.VRAMGiB), o.ComputeCapability, strconv.Itoa(o.TFLOPS), o.Region, orDash(o.Reach), rep, strconv.FormatBool(o.Verified), strconv.FormatBool(o.Simulated), time.Since(o.SeenAt).Truncate(time.Second).String() + " ago"})
	}
	a.table([]string{"PEER", "MODEL", "FREE/COUNT", "PRICE/GPU-H", "VRAM(GiB)", "CC", "TFLOPS", "REGION", "REACH", "REP", "VERIFIED", "SIMULATED", "PROFILE"}, rows)
	return nil
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:8] + "…" + id[len(id)-6:]
	}
	return id
}

// allowSimulatedUsage is the help of rent's and run's --allow-simulated.
const allowSimulatedUsage = "also lease simulated GPUs (--gpus sim:..., as on a testnet) when the filter says nothing of them; without it only real GPUs are leased (simulated=true in the filter asks for simulated ones)"
