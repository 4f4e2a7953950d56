package node

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/audit"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/cuda"
	"github.com/gpumesh/gpumesh/verify/inventory"
	"github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// startAudit serves challenges of the node's GPUs and starts the audit
// loop that challenges other suppliers at random times.
func (n *Node) startAudit(ctx context.Context) error {
	cheat, err := challenge.ParseCheat(n.cfg.SimCheat)
	if err != nil {
		return fmt.Errorf("node: --sim-cheat: %w", err)
	}
	var gpus []audit.GPU
	allSim := true
	for _, g := range n.gpus {
		gpus = append(gpus, audit.GPU{UUID: g.UUID, Model: g.Model, Simulated: g.Simulated})
		allSim = allSim && g.Simulated
	}
	if !cheat.Honest() && (!allSim || len(gpus) == 0) {
		return errors.New("node: --sim-cheat is for testnets: every GPU must be simulated")
	}
	if !cheat.Honest() {
		n.log.Warn("this node is a simulated impostor", "cheat", cheat.String())
	}
	if len(gpus) > 0 {
		var devices func([]audit.GPU) (audit.DeviceProver, error)
		if !allSim {
			devices, n.verify.proverErr = n.gpuProver()
			if n.verify.proverErr != nil {
				n.log.Warn("renters will not lease these GPUs by default: no GPU prover; challenges of the real GPUs are refused with no-prover", "err", n.verify.proverErr)
			}
		}
		audit.Serve(audit.ProverConfig{Host: n.net.Host, GPUs: gpus, Devices: devices, Leased: n.leasedGPUs, Priority: n.challengePriority(),
			Cheat: cheat, Now: n.now, Log: n.log})
	}
	n.verify.chal = audit.NewChallenger(n.net.Host, 0, n.log)
	n.verify.last = map[peer.ID]time.Time{}
	if n.cfg.AuditInterval > 0 {
		n.goLoop(func() { n.auditLoop(ctx) })
	}
	return nil
}

// gpuProver opens the CUDA driver, checks that it shows every real GPU
// of the node (matched by UUID), and returns audit.ProverConfig.Devices:
// each challenge gets a prover (package verify/cuda) on exactly the
// devices of the GPUs it names, in its order, so that a challenge of one
// model never runs on another model's devices. The node closes the driver
// when it closes. Without one (no driver, a driver too old, a device the
// driver does not show) the error says why, and challenges of the real
// GPUs are refused with no-prover; simulated GPUs are proven by the CPU
// either way.
func (n *Node) gpuProver() (func([]audit.GPU) (audit.DeviceProver, error), error) {
	drv, err := cuda.Open(cuda.Options{Library: n.cudaLib, Logger: n.log.With("sub", "cuda")})
	if err != nil {
		return nil, fmt.Errorf("gpu prover: %w", err)
	}
	all := drv.Devices()
	devs, err := devicesOf(n.gpus, all)
	if err != nil {
		_ = drv.Close()
		return nil, fmt.Errorf("gpu prover: %w", err)
	}
	n.verify.cuda = drv
	n.log.Info("gpu prover ready: challenges of the real GPUs run on them", "devices", len(devs))
	return func(gpus []audit.GPU) (audit.DeviceProver, error) { return proverOn(gpus, all) }, nil
}

// proverOn is the CUDA prover of exactly gpus, on their devices among
// devs (devicesFor).
func proverOn(gpus []audit.GPU, devs []*cuda.Device) (audit.DeviceProver, error) {
	on, err := devicesFor(gpus, devs)
	if err != nil {
		return nil, err
	}
	return cudaProver{cuda.NewProverOn(on, cuda.ProverOptions{})}, nil
}

// cudaProver is the audit.DeviceProver of a cuda.Prover: a device without
// room for the memory proof (a renter's job holds it) is
// audit.ErrDeviceMemory, which refuses the challenge as busy.
type cudaProver struct{ *cuda.Prover }

func (p cudaProver) Memory(ctx context.Context, g int, seed [32]byte, mp challenge.MemParams) (challenge.MemBackend, error) {
	b, err := p.Prover.Memory(ctx, g, seed, mp)
	if errors.Is(err, cuda.ErrOutOfMemory) {
		return nil, fmt.Errorf("%w: %w", audit.ErrDeviceMemory, err)
	}
	return b, err
}

// leasedGPUs is audit.ProverConfig.Leased: how long until none of uuids
// is held by a lease in the supplier's capacity ledger (a reservation,
// pending or confirmed, lapses at its Until); 0 when none is.
func (n *Node) leasedGPUs(uuids []string) time.Duration {
	sup := n.market.supplier
	if sup == nil {
		return 0
	}
	var until time.Time
	for _, r := range sup.Ledger().Reservations() {
		if slices.ContainsFunc(r.GPUs, func(u string) bool { return slices.Contains(uuids, u) }) && r.Until.After(until) {
			until = r.Until
		}
	}
	if until.IsZero() {
		return 0
	}
	return max(time.Second, until.Sub(n.now()))
}

// devicesFor is the CUDA device of each of gpus, the real GPUs a
// challenge names, matched by UUID, in gpus' order: seed g of the
// challenge runs on gpus[g]'s device and on no other.
func devicesFor(gpus []audit.GPU, devs []*cuda.Device) ([]*cuda.Device, error) {
	inv := make([]inventory.GPU, len(gpus))
	for i, g := range gpus {
		inv[i] = inventory.GPU{UUID: g.UUID, Model: g.Model, Index: i}
	}
	return devicesOf(inv, devs)
}

// devicesOf is the CUDA device of each real GPU of gpus, in gpus' order,
// matched by UUID; a real GPU the driver does not show is an error.
func devicesOf(gpus []inventory.GPU, devs []*cuda.Device) ([]*cuda.Device, error) {
	byUUID := make(map[string]*cuda.Device, len(devs))
	for _, d := range devs {
		byUUID[d.Info.UUID] = d
	}
	var out []*cuda.Device
	for _, g := range gpus {
		if g.Simulated {
			continue
		}
		d, ok := byUUID[g.UUID]
		if !ok {
			return nil, fmt.Errorf("the CUDA driver shows no device %s (NVML's GPU %d); is CUDA_VISIBLE_DEVICES set for the node?", g.UUID, g.Index)
		}
		out = append(out, d)
	}
	return out, nil
}

// challengePriority reports whether a challenger goes before strangers,
// who share a tenth of the prover's time: the node's pre-trusted peers
// (itself, its bootstrap peers, those the configuration names), and the
// renters that hold a live lease of this node's GPUs (pending or
// confirmed, not yet ended): they signed for it and pay for it from its
// start, so a challenge before the job starts is theirs to ask. A bid
// alone, which costs nothing, earns no priority.
func (n *Node) challengePriority() func(peer.ID) bool {
	trusted := map[peer.ID]bool{}
	for _, p := range n.trustedPeers() {
		trusted[p] = true
	}
	renters := &renterSet{read: n.liveRenters}
	return func(p peer.ID) bool { return trusted[p] || renters.has(p, n.now()) }
}

// renterSetTTL is how long the renters of live leases read from the
// lease store stand for them: a challenger's priority costs a scan of the
// store at most this often, whatever the rate of challenges.
const renterSetTTL = 2 * time.Second

// renterSet is the renters of this supplier's live leases, read (read)
// at most every renterSetTTL. It is safe for concurrent use.
type renterSet struct {
	read func(now time.Time) map[peer.ID]bool

	mu  sync.Mutex
	at  time.Time // when set was read; zero: never
	set map[peer.ID]bool
}

// has reports whether p is a renter of a live lease, as read at most
// renterSetTTL before now.
func (r *renterSet) has(p peer.ID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || now.Sub(r.at) >= renterSetTTL || now.Before(r.at) {
		r.set, r.at = r.read(now), now
	}
	return r.set[p]
}

// liveRenters are the renters of the leases this node, as supplier,
// holds live at now (pending or confirmed, not ended).
func (n *Node) liveRenters(now time.Time) map[peer.ID]bool {
	ls, err := market.Leases(n.store, now)
	if err != nil {
		n.log.Debug("leases not read for a challenger's priority", "err", err)
	}
	out := map[peer.ID]bool{}
	for _, l := range ls {
		if l.Role == market.RoleSupplier && now.Before(l.End()) &&
			(l.State == market.LeasePending || l.State == market.LeaseConfirmed) {
			out[l.Renter] = true
		}
	}
	return out
}

// auditLoop challenges one supplier at a random time in every interval,
// the one it challenged longest ago first.
func (n *Node) auditLoop(ctx context.Context) {
	for {
		wait := n.cfg.AuditInterval/2 + mrand.N(n.cfg.AuditInterval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		target := n.nextAuditTarget()
		if target == "" {
			continue
		}
		if _, err := n.ChallengePeer(ctx, target, ""); err != nil && ctx.Err() == nil {
			n.log.Debug("audit", "peer", target, "err", err)
		}
	}
}

func (n *Node) nextAuditTarget() peer.ID {
	ps, _ := n.KnownProfiles()
	n.verify.mu.Lock()
	defer n.verify.mu.Unlock()
	var best peer.ID
	var bestAt time.Time
	for _, p := range ps {
		if p.ID == n.id || len(p.Gpus) == 0 {
			continue
		}
		at := n.verify.last[p.ID]
		if best == "" || at.Before(bestAt) {
			best, bestAt = p.ID, at
		}
	}
	return best
}

// ChallengePeer challenges every GPU model of the supplier (or only
// model), as its profile claims them, and signs and gossips one
// attestation per model. An unreachable supplier gets an uptime
// attestation that says so.
func (n *Node) ChallengePeer(ctx context.Context, id peer.ID, model string) (api.ChallengeReport, error) {
	n.verify.mu.Lock()
	n.verify.last[id] = n.now()
	n.verify.mu.Unlock()
	p, err := n.profileOf(ctx, id)
	if err != nil {
		n.metrics.Audit.Challenge(metrics.Error)
		return api.ChallengeReport{PeerID: id.String()}, err
	}
	// The profile's addresses are where the supplier says it is reached:
	// behind NAT, its relay addresses, which nothing else tells.
	n.net.Host.Peerstore().AddAddrs(id, dialAddrs(p), peerstore.TempAddrTTL)
	// A challenge is timed and moves more than a relay carries: behind
	// NAT it waits for hole punching; without a direct connection the
	// challenge below fails as unreachable.
	if err := n.net.Direct(ctx, id); err != nil {
		n.log.Debug("no direct connection for a challenge", "peer", id, "err", err)
	}
	rep, err := RunChallenges(ctx, n.verify.chal, p, model)
	countChallenges(n.metrics.Audit, rep, err)
	if errors.Is(err, audit.ErrBusy) {
		return rep, err // neither up nor down: try later
	}
	// The supplier answered (whatever its answers were worth) unless the
	// challenge could not reach it.
	up := &pb.Attestation{Subject: []byte(id), Kind: reputation.KindUptime, CreatedMs: n.now().UnixMilli(),
		Passed: !errors.Is(err, audit.ErrUnreachable), Reason: "answered a challenge"}
	if err != nil {
		up.Reason = err.Error()
	}
	if _, aerr := n.Attest(ctx, trimReason(up)); aerr != nil {
		n.log.Debug("attest uptime", "peer", id, "err", aerr)
	}
	// Attest every model judged, even if a later one could not be; an
	// outcome that judges nothing (a prover of a retired protocol version)
	// is reported, not attested.
	for _, r := range rep.Models {
		if !r.Judged() {
			continue
		}
		if _, err := n.Attest(ctx, trimReason(r.Attestation(n.now()))); err != nil {
			n.log.Warn("attest challenge", "peer", id, "err", err)
			continue
		}
		rep.Attested = true
	}
	if err != nil {
		return rep, err
	}
	n.log.Info("challenged", "peer", id, "passed", rep.Passed, "gpus", rep.GPUs, "reason", rep.Reason)
	return rep, nil
}

// countChallenges counts the verdict on each model challenged and, when
// err ended the challenges, why.
func countChallenges(m *metrics.Audit, rep api.ChallengeReport, err error) {
	for _, r := range rep.Models {
		switch {
		case r.Outcome == audit.OutcomeNoProver:
			m.Challenge(metrics.NoProver)
		case r.Outcome == audit.OutcomeVersion:
			m.Challenge(metrics.Version)
		case !r.Judged():
		case r.Passed:
			m.Challenge(metrics.Passed)
		default:
			m.Challenge(metrics.Failed)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, audit.ErrBusy):
		m.Challenge(metrics.Busy)
	case errors.Is(err, audit.ErrUnreachable):
		m.Challenge(metrics.Unreachable)
	default:
		m.Challenge(metrics.Error)
	}
}

// maxProfileDialAddrs bounds the addresses of a profile this node dials,
// as renters bound an ask's: a supplier chooses them, so they are not a
// list of targets to send connection attempts to. Profiles list the most
// reachable first (p2p.RankAddrs).
const maxProfileDialAddrs = 4

// dialAddrs are the addresses of p this node dials.
func dialAddrs(p *p2p.Profile) []ma.Multiaddr {
	return p.Addrs[:min(len(p.Addrs), maxProfileDialAddrs)]
}

func trimReason(a *pb.Attestation) *pb.Attestation {
	if len(a.Reason) > reputation.MaxReasonBytes {
		a.Reason = a.Reason[:reputation.MaxReasonBytes]
	}
	return a
}

// profileOf returns the supplier's profile: the one the node keeps, else
// the DHT's.
func (n *Node) profileOf(ctx context.Context, id peer.ID) (*p2p.Profile, error) {
	if p, ok := n.keptProfile(id); ok {
		return p, nil
	}
	return n.net.FetchProfile(ctx, id, 0)
}

// RunChallenges challenges, with c, every model of profile p (or only
// model) and sums the results up.
func RunChallenges(ctx context.Context, c *audit.Challenger, p *p2p.Profile, model string) (api.ChallengeReport, error) {
	rep := api.ChallengeReport{PeerID: p.ID.String(), Passed: true}
	byModel := map[string][]string{}
	sim := map[string]bool{}
	for _, g := range p.Gpus {
		if model != "" && g.Model != model {
			continue
		}
		if _, seen := sim[g.Model]; !seen {
			sim[g.Model] = true
		}
		byModel[g.Model] = append(byModel[g.Model], g.Uuid)
		sim[g.Model] = sim[g.Model] && g.Simulated
	}
	if len(byModel) == 0 {
		return rep, fmt.Errorf("challenge %s: its profile claims no %s GPUs", p.ID, orAll(model))
	}
	models := make([]string, 0, len(byModel))
	for m := range byModel {
		models = append(models, m)
	}
	sort.Strings(models)
	var reasons []string
	for i, m := range models {
		if i > 0 {
			// A prover takes one challenge per challenger at a time.
			time.Sleep(audit.MinPeerGap)
		}
		r, err := c.Challenge(ctx, p.ID, m, byModel[m], sim[m])
		if err != nil {
			return rep, err
		}
		rep.Models = append(rep.Models, r)
		rep.Claimed += r.Claimed
		rep.GPUs += r.GPUs
		rep.RowsChecked += r.RowsChecked
		rep.VerifierCostRatio = max(rep.VerifierCostRatio, r.VerifierCostRatio)
		if rep.Measured == 0 || r.Measured < rep.Measured {
			rep.Measured, rep.Expected = r.Measured, r.Expected
		}
		rep.Passed = rep.Passed && r.Passed
		reasons = append(reasons, m+": "+r.Reason)
	}
	rep.Reason = strings.Join(reasons, "; ")
	return rep, nil
}

func orAll(m string) string {
	if m == "" {
		return "any"
	}
	return m
}
