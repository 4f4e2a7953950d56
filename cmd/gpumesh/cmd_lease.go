package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/light"
)

// nodeAnswers returns a client of the node whose data dir cfg names when
// that node's API answers with its token: commands that keep leases
// then go through the node, which holds the data dir's store. nil when
// no --data was given or no node answers there.
func nodeAnswers(ctx context.Context, cfg node.Config) *api.Client {
	if cfg.Sources["data"] == "default" {
		return nil
	}
	c, tokenErr := readClient(cfg)
	if tokenErr != nil {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.Leases(hctx); err != nil {
		return nil
	}
	return c
}

func newReleaseCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "release LEASE",
		Short: "Release a lease you rented before its end (billed up to then)",
		Long: `Release sends the lease's supplier your signed release: the lease ends now, its GPUs are
free for others, and its time up to now is billed as any job's on it is (a lease on which no
job ever ran costs nothing). A release never counts against you as an unclaimed lease.

LEASE is a lease ID or its unique prefix, as "gpumesh leases" lists it. With --data, the
node running on that data dir releases it; with no node running there, a light client
reads the lease from the data dir's store. A lease that is not yours, has ended, or has a
job running on it (stop the job first) is refused and nothing changes.`,
		Example: `  gpumesh release 3f9c2a71 --data ~/.gpumesh-renter`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.quiet = true
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if c := nodeAnswers(ctx, cfg); c != nil {
				v, err := c.ReleaseLease(ctx, args[0])
				if err != nil {
					return err
				}
				return a.printReleased(v)
			}
			if cfg.Sources["data"] == "default" {
				return usageError{fmt.Errorf("release needs --data: the data dir the lease was rented with")}
			}
			key, _, err := node.LoadOrCreateKey(cfg.DataDir)
			if err != nil {
				return err
			}
			st, err := node.OpenStore(cfg.DataDir)
			if err != nil {
				return err
			}
			defer st.Close()
			// A lease not kept here needs no network to be refused.
			if _, err := market.FindLease(st, args[0], market.RoleRenter, time.Now()); err != nil {
				return err
			}
			sp := a.spin("joining the network")
			rc, err := a.joinLight(ctx, cfg, light.WithRenting(), light.WithKey(key), light.WithStore(st))
			sp.Stop()
			if err != nil {
				return err
			}
			defer rc.Close()
			l, at, err := rc.Release(ctx, args[0])
			if err != nil {
				return err
			}
			v := node.ViewLease(l, market.LeaseReleased, market.RoleRenter)
			v.Reason = market.ReleasedByRenter(at)
			return a.printReleased(v)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

func (a *app) printReleased(v api.LeaseView) error {
	if a.json {
		return a.printJSON(v)
	}
	fmt.Fprintf(a.stdout, "lease %s %s\n", v.LeaseID, v.Reason)
	return nil
}
