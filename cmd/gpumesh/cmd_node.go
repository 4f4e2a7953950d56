package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/internal/sdnotify"
	"github.com/gpumesh/gpumesh/node"
)

func newNodeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a gpumesh node: DHT server, gossip, and a supplier of this machine's GPUs",
		Example: `  gpumesh node --gpus auto --region eu-west
  gpumesh node --gpus sim:h100-sxm:8 --listen /ip4/127.0.0.1/tcp/4001 --api 127.0.0.1:7450`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig(cmd)
			if err != nil {
				// EX_CONFIG: the unit does not restart on it
				// (RestartPreventExitStatus=78).
				return configError{err}
			}
			ctx := cmd.Context()
			offset, err := cmd.Flags().GetDuration("clock-offset")
			if err != nil {
				return err
			}
			log := a.logger(cfg)
			sd, err := sdnotify.New(os.Getenv, os.Getpid())
			if err != nil {
				log.Warn("not notifying systemd", "err", err)
			}
			opts := []node.Option{node.WithLogger(log)}
			if offset != 0 {
				opts = append(opts, node.WithClock(clock.Offset(clock.Real(), offset)))
			}
			n, err := node.New(ctx, cfg, opts...)
			if err != nil {
				return err
			}
			defer n.Close()
			if err := a.printStarted(n); err != nil {
				return err
			}
			notified := make(chan struct{})
			go func() {
				defer close(notified)
				serviceNotify(ctx, sd, n, log)
			}()
			<-ctx.Done()
			<-notified
			if err := sd.Notify(sdnotify.Stopping); err != nil {
				log.Warn("systemd notify", "err", err)
			}
			fmt.Fprintln(a.stderr, "gpumesh: shutting down")
			return n.Close()
		},
	}
	addKeyFlags(cmd.Flags(), nodeKeys())
	// For tests of clock skew (the chaos run): one machine cannot give
	// one process a wrong system clock, so the node reads its own as if
	// it were off by this much. Hidden: no operator wants it.
	cmd.Flags().Duration("clock-offset", 0, "run as if the system clock were off by this much (testing clock skew)")
	_ = cmd.Flags().MarkHidden("clock-offset")
	return cmd
}

type started struct {
	PeerID  string   `json:"peer_id"`
	Addrs   []string `json:"addrs"`
	API     string   `json:"api,omitempty"`
	GPUs    int      `json:"gpus"`
	Version string   `json:"version"`
	Started string   `json:"started"`
}

func (a *app) printStarted(n *node.Node) error {
	s := started{PeerID: n.ID().String(), API: n.APIAddr(), GPUs: len(n.GPUs()), Version: node.Version, Started: time.Now().UTC().Format(time.RFC3339)}
	for _, addr := range n.Addrs() {
		s.Addrs = append(s.Addrs, addr.String())
	}
	if a.json {
		return a.printJSON(s)
	}
	fmt.Fprintf(a.stdout, "gpumesh node %s\npeer ID: %s\ngpus:    %d\nlistening on:\n", s.Version, s.PeerID, s.GPUs)
	for _, addr := range s.Addrs {
		fmt.Fprintf(a.stdout, "  %s\n", addr)
	}
	if s.API != "" {
		fmt.Fprintf(a.stdout, "api:     http://%s\n", s.API)
	}
	return nil
}
