package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

func newDoctorCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this node needs to be found and rented (asks its API)",
		Long: `Doctor asks the running node to check itself, as its peers see it: reachability (AutoNAT),
the public addresses peers observed, relay reservations, connected peers, GPUs (NVML and driver),
clock skew against peers' heartbeats, free disk in the data dir, the API bind and the libp2p
listen addresses. Each check is OK, WARN or FAIL, with what to do under each WARN and FAIL.

With no node running, it checks what it can here (GPUs, disk, the clock's synchronisation,
the configured API bind) and fails the "node" check. Exits 1 when any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.quiet = true
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			rep, err := a.doctor(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if a.json {
				err = a.printJSON(rep)
			} else {
				a.printDoctor(rep)
			}
			if err != nil {
				return err
			}
			if rep.Failed() {
				return silentError{errors.New("a doctor check failed")}
			}
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api", "gpus"))
	return cmd
}

// doctor asks the node at cfg.API for its report, or, when none answers
// there, makes the report of what can be checked without one.
func (a *app) doctor(ctx context.Context, cfg node.Config) (api.DoctorReport, error) {
	seed := "local"
	if key, err := node.LoadKey(cfg.DataDir); err == nil {
		seed = node.PeerID(key).String()
	}
	if cfg.API == "off" {
		return node.OfflineDoctor(ctx, cfg, seed, time.Now()), nil
	}
	c, tokenErr := readClient(cfg)
	defer c.Close()
	rep, err := c.Doctor(ctx)
	if errors.Is(err, api.ErrUnreachable) {
		return node.OfflineDoctor(ctx, cfg, seed, time.Now()), nil
	}
	if err != nil {
		return rep, explainAPIError(err, cfg, tokenErr)
	}
	return rep, nil
}

// printDoctor prints the checks as a table, each fix on a line of its own
// under its check's detail.
func (a *app) printDoctor(rep api.DoctorReport) {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STATUS\tCHECK\tDETAIL")
	for _, c := range rep.Checks {
		fmt.Fprintf(w, "%s\t%s\t%s\n", strings.ToUpper(c.Status), c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "\t\tfix: %s\n", c.Fix)
		}
	}
	w.Flush()
}
