package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/doctor"
	"github.com/gpumesh/gpumesh/verify/cuda"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// The node's side of `gpumesh doctor` (package node/doctor): the facts a
// running node, or the CLI without one, gathers for the checks.

// Doctor checks the running node: reachability as its peers see it,
// observed addresses, relay reservations, peers, GPUs, clock skew against
// peers' heartbeats, free disk in the data dir, the API bind and the
// listen addresses.
func (n *Node) Doctor(ctx context.Context) api.DoctorReport {
	_ = ctx // every fact is at hand; ctx is for checks that may ask peers
	reach := n.net.Reach()
	f := doctor.Facts{
		Reach: reach,
		Peers: len(n.net.Host.Network().Peers()),

		Network:       n.net.NetworkID(),
		BootstrapList: n.bootstrapList,
		WrongPeers:    n.net.WrongNetworkPeers(),

		APIAddr: n.APIAddr(),
		GPUMode: n.cfg.GPUs.Mode,
		GPUs:    n.gpus,
		Skew:    n.skew.Summary(n.now()),
		DataDir: n.cfg.DataDir,
		Disk:    doctor.MeasureDisk(n.cfg.DataDir),

		RunsJobs:  n.jobs.exec != nil,
		JobNetErr: n.jobs.netErr,
		ProverErr: n.verify.proverErr,
		UVM:       doctor.HasUVM(),
	}
	for _, a := range n.net.Host.Network().ListenAddresses() {
		// The relay transport "listens" on /p2p-circuit: no address
		// a peer can dial.
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
			continue
		}
		f.Listen = append(f.Listen, a.String())
	}
	return api.DoctorReport{PeerID: n.id.String(), Checks: doctor.Evaluate(f), Reach: &reach, Time: n.now().UTC()}
}

// OfflineDoctor is the report of `gpumesh doctor` when no node answers at
// cfg.API: what can be checked without one (GPUs, disk, the configured
// API bind, the clock's synchronisation), led by a failed "node" check.
// seed makes simulated GPUs' UUIDs those of the node (its peer ID).
func OfflineDoctor(ctx context.Context, cfg Config, seed string, now time.Time) api.DoctorReport {
	gpus, gerr := inventory.FromSpec(cfg.GPUs, seed, nil).Detect(ctx)
	checks := doctor.EvaluateOffline(doctor.OfflineFacts{
		APIAddr: cfg.API, GPUMode: cfg.GPUs.Mode, GPUs: gpus, GPUErr: gerr,
		Network: cfg.networkID(), BootstrapList: cfg.BootstrapList(),
		ClockSynced: doctor.KernelClockSynced(),
		DataDir:     cfg.DataDir, Disk: doctor.MeasureDisk(cfg.DataDir),
		ProverErr: offlineProver(gpus), UVM: doctor.HasUVM(),
	})
	return api.DoctorReport{Checks: checks, Time: now.UTC()}
}

// offlineProver is why the GPU prover could not serve gpus' real GPUs,
// tried here without a node: the CUDA driver opened (its kernels
// compiled) and closed again; nil when it opens or there are no real GPUs.
func offlineProver(gpus []inventory.GPU) error {
	if !slices.ContainsFunc(gpus, func(g inventory.GPU) bool { return !g.Simulated }) {
		return nil
	}
	drv, err := cuda.Open(cuda.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	_, err = devicesOf(gpus, drv.Devices())
	return errors.Join(err, drv.Close())
}
