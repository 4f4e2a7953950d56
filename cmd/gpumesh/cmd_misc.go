package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

func newIDCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "id",
		Short: "Print this node's peer ID, creating the identity key on first use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			key, created, err := node.LoadOrCreateKey(cfg.DataDir)
			if err != nil {
				return err
			}
			out := struct {
				PeerID  string `json:"peer_id"`
				KeyFile string `json:"key_file"`
				Created bool   `json:"created"`
			}{node.PeerID(key).String(), filepath.Join(cfg.DataDir, node.KeyFile), created}
			if a.json {
				return a.printJSON(out)
			}
			fmt.Fprintln(a.stdout, out.PeerID)
			if created {
				fmt.Fprintf(a.stderr, "created a new identity in %s\n", out.KeyFile)
			}
			return nil
		},
	}
}

func newGPUsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "List the GPUs this machine would offer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			seed := "local"
			if key, err := node.LoadKey(cfg.DataDir); err == nil {
				seed = node.PeerID(key).String()
			}
			gpus, err := inventory.FromSpec(cfg.GPUs, seed, a.logger(cfg)).Detect(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(orEmpty(gpus))
			}
			if len(gpus) == 0 {
				fmt.Fprintln(a.stdout, "no GPUs found (no NVIDIA driver, or --gpus none); try --gpus sim:rtx4090:1 to simulate one")
				return nil
			}
			var rows [][]string
			for _, g := range gpus {
				rows = append(rows, []string{strconv.Itoa(g.Index), g.Model, g.Name, strconv.Itoa(g.VRAMGiB), g.ComputeCapability, strconv.FormatBool(g.Simulated), g.UUID})
			}
			a.table([]string{"INDEX", "MODEL", "NAME", "VRAM(GiB)", "CC", "SIMULATED", "UUID"}, rows)
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("gpus"))
	return cmd
}

func newPeersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "List the peers of the running local node (asks its API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				return err
			}
			if cfg.API == "off" {
				return usageError{fmt.Errorf("the node's API is off; pass --api HOST:PORT of a running node")}
			}
			c, tokenErr := readClient(cfg)
			peers, err := c.Peers(cmd.Context())
			if err != nil {
				return explainAPIError(err, cfg, tokenErr)
			}
			if a.json {
				return a.printJSON(orEmpty(peers))
			}
			var rows [][]string
			for _, p := range peers {
				seen := "-"
				if !p.LastSeen.IsZero() {
					seen = time.Since(p.LastSeen).Truncate(time.Second).String() + " ago"
				}
				rows = append(rows, []string{p.ID.String(), strconv.FormatBool(p.Connected), orDash(p.Conn), fmt.Sprintf("%d/%d", p.GPUsFree, p.GPUsTotal), orDash(p.Region), seen, fmt.Sprintf("%.1f", p.LatencyMs), fmt.Sprintf("%.1f", p.Score), fmt.Sprintf("%.2f", p.Reputation), strconv.FormatBool(p.Verified), uptime(p.UptimePct), orDash(p.Software)})
			}
			a.table([]string{"PEER", "CONNECTED", "CONN", "GPUS(FREE/TOTAL)", "REGION", "LAST HEARTBEAT", "RTT(ms)", "SCORE", "REPUTATION", "VERIFIED", "UPTIME", "SOFTWARE"}, rows)
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

// readClient is the client of the read commands (peers, orders, leases,
// prices): a short timeout, and the token of the node whose data dir is
// cfg.DataDir, with the error of reading it. Without a token the
// requests still go out: that the node is not running is the likelier
// problem, and the better error.
func readClient(cfg node.Config) (*api.Client, error) {
	token, tokenErr := api.ReadToken(cfg.DataDir)
	return api.NewClient(cfg.API, token, api.WithTimeout(5*time.Second)), tokenErr
}

// explainAPIError says what to do about a 401 from a read command's
// client: pass the data dir of the node asked.
func explainAPIError(err error, cfg node.Config, tokenErr error) error {
	if !errors.Is(err, api.ErrUnauthorized) {
		return err
	}
	if tokenErr != nil {
		return fmt.Errorf("%w: it needs the node's token, and %s has none (%v); pass --data of the node you ask", err, cfg.DataDir, tokenErr)
	}
	return fmt.Errorf("%w: the token in %s is not that node's; pass --data of the node you ask", err, cfg.DataDir)
}

func uptime(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *p)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b := node.Build()
			if a.json {
				return a.printJSON(b)
			}
			fmt.Fprintf(a.stdout, "gpumesh %s", b.Version)
			if b.Commit != "" {
				fmt.Fprintf(a.stdout, " (%s)", b.Commit)
			}
			fmt.Fprintf(a.stdout, " %s\n", b.GoVersion)
			return nil
		},
	}
}
