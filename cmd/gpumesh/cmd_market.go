package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/light"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

func newRentCmd(a *app) *cobra.Command {
	var (
		count    int
		hours    float64
		maxPrice string
		wait     time.Duration
		askID    string
		timeout  time.Duration
		minRep   float64
		unproven bool
		simOK    bool
	)
	cmd := &cobra.Command{
		Use:   "rent [FILTER...] --count N --hours H --max-price P",
		Short: "Rent GPUs: bid, collect quotes, and lease from the best (runs as a light client)",
		Long: `Rent publishes a signed bid for COUNT GPUs matching FILTER for HOURS hours at no more than
MAX-PRICE per GPU-hour, collects the suppliers' quotes for up to --wait, ranks them by price,
then reputation, then round-trip time, and proposes a lease to the best, falling back to
the next on refusal. With --ask it takes a posted ask at its price instead.

When no lease is made it says why, from the order book and the suppliers' answers, and exits 1.
With --data the lease is kept in that data dir, where "gpumesh leases" lists it.

A lease is paid for through the job that runs on it: a supplier releases a lease on which no
job starts within its claim window (30 s to 1 min by default). With --data and your node
running there, the node rents and keeps the lease: start a job on it with
"gpumesh run --lease ID", or end it with "gpumesh release ID". "gpumesh run" rents and
starts a job at once.`,
		Example: `  gpumesh rent model=h100-sxm --count 2 --hours 4 --max-price 2.50 --bootstrap /ip4/.../p2p/12D3Koo...
  gpumesh rent --ask 3f9c2a71 --count 1 --hours 1 --bootstrap /ip4/.../p2p/12D3Koo... --json`,
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
			terms, err := market.ParseRentTerms(count, hours, maxPrice)
			if err != nil && (askID == "" || !errors.Is(err, market.ErrNoMaxPrice)) {
				return termsError(err, ", unless you take an ask with --ask")
			}
			if c := nodeAnswers(cmd.Context(), cfg); c != nil && askID == "" {
				// The node holds the data dir's store and key: it rents.
				return a.rentThroughNode(cmd.Context(), c, api.RentRequest{Filter: f.String(), Count: terms.Count, Hours: hours, MaxPrice: maxPrice,
					MinRep: &minRep, AllowUnproven: unproven, AllowSimulated: simOK, Wait: wait.String()}, timeout)
			}
			opts := []light.Option{light.WithRenting()}
			if !defaultDataDir(cfg) {
				key, _, err := node.LoadOrCreateKey(cfg.DataDir)
				if err != nil {
					return err
				}
				st, err := node.OpenStore(cfg.DataDir)
				if err != nil {
					return err
				}
				defer st.Close()
				opts = append(opts, light.WithKey(key), light.WithStore(st))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			sp := a.spin("joining the network")
			rc, err := a.joinLight(ctx, cfg, opts...)
			sp.Stop()
			if err != nil {
				return err
			}
			defer rc.Close()
			sp = a.spin("collecting quotes")
			var l *market.Lease
			if askID != "" {
				l, err = rc.TakeAsk(ctx, askID, terms.Count, terms.Duration, simOK)
			} else {
				l, err = rc.Rent(ctx, market.RentRequest{Filter: f, Count: terms.Count, Duration: terms.Duration, MaxPrice: terms.MaxPrice, Wait: wait, MinReputation: minRep, AllowUnproven: unproven, AllowSimulated: simOK})
			}
			sp.Stop()
			var nm *market.NoMatch
			if errors.As(err, &nm) {
				return a.printNoMatch(nm)
			}
			if err != nil {
				return err
			}
			return a.printRented(node.ViewLease(l, market.LeaseConfirmed, market.RoleRenter))
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&count, "count", 1, "GPUs to rent, all from one supplier")
	fl.Float64Var(&hours, "hours", 1, "lease length in hours")
	fl.StringVar(&maxPrice, "max-price", "", "highest price per GPU-hour you accept, e.g. 2.50")
	fl.DurationVar(&wait, "wait", 2*time.Second, "the longest to collect quotes: collecting stops as soon as every supplier with a matching live ask in the order book has quoted or declined, or 3 acceptable quotes are in, and once one acceptable quote is in the rest get at most 3 times as long as it took (at least 500ms); the full wait only when no quote comes")
	fl.StringVar(&askID, "ask", "", "take the posted ask with this ID (or a unique prefix of 8+ hex digits) at its price")
	fl.DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long")
	fl.Float64Var(&minRep, "min-rep", reputation.DefaultFloor, "never lease from a supplier whose reputation (0-1, from the attestations your bootstrap peers keep, 0.5 when unknown) is below this")
	fl.BoolVar(&unproven, "allow-unproven", false, "also lease from suppliers no trusted challenger has passed (any fresh key), after every proven one")
	fl.BoolVar(&simOK, "allow-simulated", false, allowSimulatedUsage)
	return cmd
}

// rentThroughNode has the node running on the data dir rent (POST
// /api/v1/leases) and prints the lease or why none was made.
func (a *app) rentThroughNode(ctx context.Context, c *api.Client, rr api.RentRequest, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sp := a.spin("renting through the node")
	v, err := c.Rent(ctx, rr)
	sp.Stop()
	var nm *market.NoMatch
	if errors.As(err, &nm) {
		return a.printNoMatch(nm)
	}
	if err != nil {
		return err
	}
	return a.printRented(v)
}

// printRented prints a lease just rented and, as text, what to do with
// it: the lease is billed only through a job, and one that never runs a
// job is not held for long.
func (a *app) printRented(v api.LeaseView) error {
	if err := a.printLease(v); err != nil || a.json {
		return err
	}
	fmt.Fprintf(a.stderr, "note: the supplier releases a lease on which no job starts within its claim window (30 s to 1 min by default): start one with `gpumesh run --lease %s`, or release it with `gpumesh release %s`\n", short(v.LeaseID), short(v.LeaseID))
	return nil
}

// termsError is a usage error for bad rent terms, in the words of the
// flags (--count, --hours, --max-price); hint follows the message of a
// missing max price.
func termsError(err error, hint string) error {
	var te *market.TermError
	switch {
	case errors.As(err, &te):
		return usageError{fmt.Errorf("--%s %s: %s", strings.ReplaceAll(te.Term, "_", "-"), te.Value, te.Want)}
	case errors.Is(err, market.ErrNoMaxPrice):
		return usageError{errors.New("--max-price is required (per GPU-hour, e.g. 2.50)" + hint)}
	}
	return usageError{err}
}

func (a *app) printNoMatch(nm *market.NoMatch) error {
	if a.json {
		_ = a.printJSON(struct {
			Error   string   `json:"error"`
			Reasons []string `json:"reasons"`
		}{"no lease made", nm.Reasons})
		return silentError{nm}
	}
	fmt.Fprintln(a.stderr, "no lease made:")
	for _, r := range nm.Reasons {
		fmt.Fprintln(a.stderr, "  -", r)
	}
	return silentError{nm}
}

// silentError exits 1 without printing again.
type silentError struct{ err error }

func (e silentError) Error() string { return e.err.Error() }

func (a *app) printLease(l api.LeaseView) error {
	if a.json {
		return a.printJSON(l)
	}
	fmt.Fprintf(a.stdout, "lease %s\n  supplier  %s\n  renter    %s\n  gpus      %d × %s (%s)\n  price     %s per GPU-hour\n  from      %s\n  until     %s\n  verified  %v (both signatures checked)\n",
		l.LeaseID, l.Supplier, l.Renter, l.Count, l.Model, strings.Join(l.GPUs, ", "), l.Price,
		l.Start.Local().Format(time.RFC3339), l.End.Local().Format(time.RFC3339), l.Verified)
	return nil
}

func newOrdersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "orders [FILTER...]",
		Short: "Show the order book of the running local node (asks and bids)",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			filter := strings.Join(args, " ")
			if _, err := market.ParseFilter(filter); err != nil {
				return usageError{err}
			}
			c, tokenErr := readClient(cfg)
			o, err := c.Orders(cmd.Context(), filter)
			if err != nil {
				return explainAPIError(err, cfg, tokenErr)
			}
			if a.json {
				return a.printJSON(o)
			}
			var rows [][]string
			for _, x := range o.Asks {
				rows = append(rows, []string{"ask", x.ID[:12], shortID(x.Peer), x.Model, strconv.Itoa(x.Count), x.Price, x.Region, x.Pricing, time.Until(x.Expires).Truncate(time.Second).String()})
			}
			for _, x := range o.Bids {
				rows = append(rows, []string{"bid", x.ID[:12], shortID(x.Peer), orDash(x.Filter), strconv.Itoa(x.Count), "≤" + x.Price, "-", "-", time.Until(x.Expires).Truncate(time.Second).String()})
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.stdout, "the order book is empty")
				return nil
			}
			a.table([]string{"KIND", "ID", "PEER", "MODEL/FILTER", "COUNT", "PRICE/GPU-H", "REGION", "PRICING", "EXPIRES IN"}, rows)
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

func newLeasesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "List the leases a node holds (asks its API; with --data and no node running, reads the store)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			c, tokenErr := readClient(cfg)
			ls, err := c.Leases(cmd.Context())
			if err != nil {
				err = explainAPIError(err, cfg, tokenErr)
				if defaultDataDir(cfg) {
					return err // without --data there is no store to fall back on
				}
				// No node answers: read the data dir's store directly.
				if ls, err = node.StoredLeases(cfg.DataDir, time.Now()); err != nil {
					return fmt.Errorf("no node API at %s, and the store of %s: %w", cfg.API, cfg.DataDir, err)
				}
			}
			if a.json {
				return a.printJSON(orEmpty(ls))
			}
			if len(ls) == 0 {
				fmt.Fprintln(a.stdout, "no leases")
				return nil
			}
			var rows [][]string
			for _, l := range ls {
				rows = append(rows, []string{l.LeaseID[:12], l.Role, l.State, shortID(l.Supplier), shortID(l.Renter), fmt.Sprintf("%d × %s", l.Count, l.Model), l.Price, l.Start.Local().Format("01-02 15:04:05"), l.End.Local().Format("01-02 15:04:05")})
			}
			a.table([]string{"LEASE", "ROLE", "STATE", "SUPPLIER", "RENTER", "GPUS", "PRICE/GPU-H", "START", "END"}, rows)
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

func newPricesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prices",
		Short: "Show the price index per model, from the trade prints the local node has seen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			c, tokenErr := readClient(cfg)
			ps, err := c.Prices(cmd.Context())
			if err != nil {
				return explainAPIError(err, cfg, tokenErr)
			}
			if a.json {
				return a.printJSON(orEmpty(ps))
			}
			if len(ps) == 0 {
				fmt.Fprintln(a.stdout, "no trades seen yet")
				return nil
			}
			var rows [][]string
			for _, p := range ps {
				rows = append(rows, []string{p.Model, strconv.Itoa(p.Trades), money.Micros(p.LastMicros).String(), money.Micros(p.MedianMicros).String(), money.Micros(p.VWAPMicros).String(), money.Micros(p.MinMicros).String(), money.Micros(p.MaxMicros).String()})
			}
			a.table([]string{"MODEL", "TRADES", "LAST", "MEDIAN", "VWAP", "MIN", "MAX"}, rows)
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}
