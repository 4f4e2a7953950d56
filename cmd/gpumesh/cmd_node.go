package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

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
				return err
			}
			ctx := cmd.Context()
			n, err := node.New(ctx, cfg, node.WithLogger(a.logger(cfg)))
			if err != nil {
				return err
			}
			defer n.Close()
			if err := a.printStarted(n); err != nil {
				return err
			}
			<-ctx.Done()
			fmt.Fprintln(a.stderr, "gpumesh: shutting down")
			return n.Close()
		},
	}
	f := cmd.Flags()
	f.StringArray("listen", nil, "multiaddr to listen on (repeatable; default /ip4/0.0.0.0/tcp/4001 and /ip4/0.0.0.0/udp/4001/quic-v1)")
	f.String("gpus", "", "GPUs to offer: auto (NVML), none, or sim:MODEL:COUNT[,MODEL:COUNT...] (default auto)")
	f.String("region", "", "region label advertised to renters, e.g. eu-west (default unknown)")
	f.String("api", "", "address of the local HTTP API, or off (default 127.0.0.1:7450)")
	f.Duration("heartbeat-interval", 0, "how often to gossip a heartbeat (default 10s)")
	f.Duration("profile-ttl", 0, "lifetime of the advertised profile; republished at half (default 1h)")
	f.StringArray("ban", nil, "peer ID to refuse (repeatable)")
	f.Bool("mdns", false, "discover gpumesh nodes on the local network by multicast DNS")
	f.String("pricing", "", "pricing mode: fixed, auction or dynamic (default fixed)")
	f.StringArray("price", nil, "list price per GPU-hour, MODEL=AMOUNT, e.g. h100-sxm=2.10 (repeatable; a model without a price is not sold)")
	f.StringArray("price-floor", nil, "lowest price per GPU-hour, MODEL=AMOUNT (repeatable; default half the list price)")
	f.Duration("ask-ttl", 0, "lifetime of a posted ask; renewed at half (default 10m)")
	f.String("audit-interval", "", "mean time between this node's challenges of other suppliers, or off (default 10m)")
	f.StringSlice("runtime", nil, "job runtimes this supplier offers: process, docker, podman (default process)")
	f.String("job-user", "", "user that renters' jobs run as (default: the node's own user)")
	f.Bool("unsandboxed-jobs", false, "on a node that is not root and cannot create user namespaces, run jobs anyway, without hiding the node's key and store from them")
	f.String("job-memory", "", "memory of a job whose spec sets none, e.g. 8GiB, or auto: job-memory-max shared between the GPUs (default auto)")
	f.String("job-memory-max", "", "most memory a job may ask, or auto: 3/4 of the host's RAM (default auto)")
	f.String("job-procs", "", "processes (and threads) of a job whose spec sets none (default 4096)")
	f.String("job-procs-max", "", "most processes a job may ask (default 16384)")
	f.String("job-disk", "", "disk a job's working and checkpoint dirs may use when its spec sets none (default 20GiB)")
	f.String("job-disk-max", "", "most disk a job may ask (default 50GiB)")
	f.String("job-open-files", "", "open files per process of a job whose spec sets none (default 4096)")
	f.String("job-open-files-max", "", "most open files a job may ask (default 65536)")
	f.String("halt-grace", "", "how long a job stays paused for an unpaid renter before it is stopped (default 2m)")
	f.String("max-lease", "", "longest lease this supplier grants, 1m to 720h (default 24h)")
	f.String("claim-window", "", "most a lease on which no job has started is held before its GPUs are released, 1s to 1h (default 60s)")
	f.String("sim-cheat", "", "testnets only, all GPUs simulated: answer challenges as an impostor: slow=F, skip=F, wrong=F, mem=F or replay")
	f.StringArray("trusted", nil, "peer ID whose attestations are pre-trusted (repeatable; itself and its bootstrap peers always are)")
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
