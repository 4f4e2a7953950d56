package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/verify/audit"
)

func newChallengeCmd(a *app) *cobra.Command {
	var (
		model   string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "challenge PEER",
		Short: "Make a supplier prove its GPUs with a benchmark challenge",
		Long: `Challenge makes a supplier prove every GPU its profile claims (or those of --model): a
timed chain of exact integer matrix products on every GPU at once, committed by a Merkle root,
checked by a random sweep and by recomputing random rows, then a timed memory proof.

With a node running on this data dir, the node runs the challenge and signs and gossips the
verdict as an attestation, which feeds everyone's reputation of the supplier. Without one, the
challenge runs here as a light client and the verdict is only printed. Exits 1 when the
supplier fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.quiet = true
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			id, err := peer.Decode(args[0])
			if err != nil {
				return usageError{fmt.Errorf("%q is not a peer ID: %w", args[0], err)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			sp := a.spin("challenging " + id.ShortString())
			rep, err := a.challengeViaNode(ctx, cfg, id, model)
			if errors.Is(err, errNoNode) {
				rep, err = a.challengeHere(ctx, cfg, id, model)
			}
			sp.Stop()
			if err != nil {
				return err
			}
			if err := a.printChallenge(rep); err != nil {
				return err
			}
			if !rep.Passed {
				return silentError{fmt.Errorf("%s failed the challenge", id)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "challenge only the GPUs of this model")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

var errNoNode = errors.New("no local node")

// challengeViaNode asks the local node to challenge (and attest);
// errNoNode when no node of this data dir answers.
func (a *app) challengeViaNode(ctx context.Context, cfg node.Config, id peer.ID, model string) (api.ChallengeReport, error) {
	if cfg.API == "off" {
		return api.ChallengeReport{}, errNoNode
	}
	c, err := api.ClientForDataDir(cfg.API, cfg.DataDir)
	if err != nil {
		return api.ChallengeReport{}, errNoNode
	}
	rep, err := c.Challenge(ctx, id, model)
	if errors.Is(err, api.ErrUnreachable) {
		return rep, errNoNode
	}
	return rep, err
}

// challengeHere runs the challenge as a light client; nothing is attested.
func (a *app) challengeHere(ctx context.Context, cfg node.Config, id peer.ID, model string) (api.ChallengeReport, error) {
	log := a.logger(cfg)
	lc, err := node.NewLightClient(ctx, node.LightOptions{Bootstrap: cfg.Bootstrap, BootstrapTimeout: cfg.BootstrapTimeout, Logger: log})
	if err != nil {
		return api.ChallengeReport{}, err
	}
	defer lc.Close()
	p, err := lc.Network().FetchProfile(ctx, id, 0)
	if err != nil {
		return api.ChallengeReport{}, fmt.Errorf("challenge: %w", err)
	}
	return node.RunChallenges(ctx, audit.NewChallenger(lc.Network().Host, 0, log), p, model)
}

func (a *app) printChallenge(r api.ChallengeReport) error {
	if a.json {
		return a.printJSON(r)
	}
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(a.stdout, "%s %s: %d of %d GPUs proven", verdict, r.PeerID, r.GPUs, r.Claimed)
	if !r.Attested {
		fmt.Fprint(a.stdout, " (not attested)")
	}
	fmt.Fprintln(a.stdout)
	var rows [][]string
	for _, m := range r.Models {
		ok := "pass"
		if !m.Passed {
			ok = "FAIL"
		}
		rows = append(rows, []string{m.Model, ok, fmt.Sprintf("%d/%d", m.GPUs, m.Claimed), fmt.Sprintf("%.1f", m.Measured), fmt.Sprintf("%.1f", m.Expected), strconv.Itoa(m.RowsChecked), fmt.Sprintf("%.2f%%", 100*m.VerifierCostRatio), strconv.FormatInt(m.CommitMs, 10), m.Reason})
	}
	a.table([]string{"MODEL", "VERDICT", "GPUS", "MEASURED(GOPS)", "NEEDED(GOPS)", "ROWS", "VERIFIER/PROVER", "COMMIT(ms)", "REASON"}, rows)
	return nil
}
