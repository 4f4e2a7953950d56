package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/cluster"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/shell"
	"github.com/gpumesh/gpumesh/node/tunnel"
	"github.com/gpumesh/gpumesh/p2p"
)

// jobParts are the job pieces every node runs: the settlement ledger, the
// renter-side controller, the evidence topic and, on a node that sells,
// the executor.
type jobParts struct {
	ledger   *settle.Ledger
	renter   *market.Renter
	ctrl     *job.Controller
	exec     *job.Executor
	tunnels  *tunnel.Server   // renters' connections to their jobs' ports
	shells   *shell.Server    // renters' shells on their leases
	cluster  *cluster.Service // cluster members' connections to each other's jobs
	evidence *p2p.Topic[[]byte]
	netErr   error                      // why jobs share the node's network (nil: they do not)
	runtimes map[string]runtime.Runtime // closed after the executor
}

// startJobs opens the settlement ledger, joins the evidence topic, starts
// the executor when the node sells and the controller always, and resumes
// the jobs this node was following when it stopped.
func (n *Node) startJobs(ctx context.Context) error {
	j := &n.jobs
	var err error
	if j.ledger, err = settle.OpenLedger(n.store, settle.WithMetrics(n.metrics.Settle)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	ev := settle.NewEvidenceValidator(n.now)
	if j.evidence, err = p2p.JoinTopic(n.net.PubSub, n.id, settle.EvidenceTopic, ev.Check, n.log, n.topic(settle.EvidenceTopic)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	j.ledger.OnEvidence(func(raw []byte) {
		// Gossip only what this node found; others' evidence came by
		// gossip already.
		if e, err := settle.OpenEvidence(raw); err != nil || e.Reporter != n.id {
			return
		}
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := j.evidence.Publish(pctx, raw); err != nil {
			n.log.Warn("gossip evidence", "err", err)
		}
	})
	n.goLoop(func() { n.readEvidence(ctx) })
	supChain, renChain, err := n.chainSettlement(ctx)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}

	if n.market.supplier != nil {
		rts := map[string]runtime.Runtime{}
		for _, name := range n.cfg.Runtimes {
			rt, err := n.newRuntime(name)
			if err != nil {
				n.log.Warn("job runtime not offered", "runtime", name, "err", err)
				continue
			}
			rts[name] = rt
		}
		if rts["process"] == nil {
			rt, err := n.newRuntime("process")
			if err != nil {
				return fmt.Errorf("node: %w", err)
			}
			rts["process"] = rt
		}
		j.runtimes = rts
		sup := n.market.supplier
		limits, err := n.jobLimits()
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		// A member's job may not listen yet when another's first
		// connection comes (torchrun's store, a rank still importing):
		// the connect to it is retried for a while (job.RetryRefused).
		if j.cluster, err = cluster.New(cluster.Config{Host: n.net.Host, Log: n.log, DialTimeout: clusterDialTimeout}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		j.exec, err = job.NewExecutor(job.ExecutorConfig{
			Host: n.net.Host, Key: n.key, Store: n.store, Ledger: j.ledger, Runtimes: rts,
			DataDir: n.cfg.DataDir, RunAs: n.jobUser(), HaltGrace: n.cfg.HaltGrace, Limits: limits,
			GPUDevices: job.DeviceNodes(n.gpus, "/dev"), Usage: n.usage,
			Hide:   n.hiddenFromJobs(),
			Leases: sup.Leases(), Cluster: j.cluster, Chain: supChain,
			Clock: n.clock, Now: n.now, Log: n.log,
		})
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if j.netErr = n.jobNetworkErrs(rts); j.netErr != nil {
			n.log.Warn("jobs share this machine's network; jobs that serve ports are refused", "why", j.netErr)
		}
		if j.tunnels, err = tunnel.NewServer(tunnel.ServerConfig{Host: n.net.Host, Resolve: j.exec.Tunnel, Log: n.log}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if j.shells, err = shell.NewServer(shell.ServerConfig{Host: n.net.Host, Resolve: j.exec.Shell, Log: n.log}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}

	j.renter = n.market.asm.Renter
	j.ctrl, err = job.NewController(job.ControllerConfig{
		Net: jobDialer{n}, Key: n.key, Store: n.store, Ledger: j.ledger, DataDir: n.cfg.DataDir,
		Rent: n.rent, RentGang: n.rentGang, ReleaseLeases: n.releaseLeases, PeerAddrs: n.net.Host.Peerstore().Addrs,
		Chain: renChain, Now: n.now, Log: n.log,
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.watchJobs(); err != nil {
		return err
	}
	j.ctrl.Start()
	return nil
}

// hiddenFromJobs are the paths jobs must not read: the node's key, API
// token and store, the renter's jobs and outputs, and the payment key
// file and its passphrase file.
func (n *Node) hiddenFromJobs() []string {
	d := n.cfg.DataDir
	hide := []string{filepath.Join(d, KeyFile), filepath.Join(d, api.TokenFile), storeDir(d), filepath.Join(d, "renter-jobs"), filepath.Join(d, "outputs")}
	if ch, err := n.cfg.ActiveChain(); err == nil && ch != nil {
		hide = append(hide, ch.KeyFile)
		if ch.PassphraseFile != "" {
			hide = append(hide, ch.PassphraseFile)
		}
	}
	return hide
}

// newRuntime makes the job runtime called name. On a node running as
// root with job_network on, every job of the process runtime gets a
// network namespace of its own; where the machine cannot (no nft, no
// network namespaces) the node says why and runs jobs on its network,
// refusing those that serve ports (S18a).
func (n *Node) newRuntime(name string) (runtime.Runtime, error) {
	o := runtime.Options{Log: n.log.With("sub", "runtime"), AllowUnsandboxed: n.cfg.UnsandboxedJobs}
	if n.cfg.JobNetwork && os.Geteuid() == 0 {
		o.Net = &runtime.NetConfig{AllowLAN: n.cfg.JobLAN, DNS: n.cfg.JobDNS, Warm: n.cfg.JobNetworkWarm}
		if o.Net.Warm == 0 {
			o.Net.Warm = -1 // none (0 is the runtime's default)
		}
	}
	rt, err := runtime.New(name, o)
	if err != nil && o.Net != nil && (name == "" || name == "process") {
		n.log.Warn("jobs get no network of their own", "err", err)
		o.Net = nil
		rt, err = runtime.New(name, o)
	}
	return rt, err
}

// jobNetworkErrs says why the jobs of some runtimes in rts share the
// node's network (or the container engine's), each runtime's error
// naming it; nil when every job gets a network of its own.
func (n *Node) jobNetworkErrs(rts map[string]runtime.Runtime) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(rts)) {
		err := n.jobNetworkErr(rts[name])
		if err == nil {
			continue
		}
		errs = append(errs, err)
		if !errors.Is(err, runtime.ErrNotIsolated) {
			break // the node's own reason, the same for every runtime
		}
	}
	return errors.Join(errs...)
}

// jobNetworkErr says why the jobs of rt share the node's network, nil
// when each gets one of its own.
func (n *Node) jobNetworkErr(rt runtime.Runtime) error {
	switch {
	case !n.cfg.JobNetwork:
		return errors.New("job_network is off")
	case os.Geteuid() != 0:
		return errors.New("the node does not run as root, so it cannot give jobs networks of their own")
	}
	return runtime.NetworkIsolation(rt)
}

// jobLimits are the per-job limits of this supplier, from its config, the
// host's RAM and its GPUs.
func (n *Node) jobLimits() (job.Limits, error) {
	return n.cfg.JobLimits(hostMemory(os.ReadFile), len(n.gpus))
}

// jobUser is who jobs run as: job_user when set; else, on a node running
// as root, the unprivileged "nobody" (a root job, even without
// capabilities, could read every file the sandbox does not hide); else the
// node's own user.
func (n *Node) jobUser() string {
	if n.cfg.JobUser != "" || os.Geteuid() != 0 {
		return n.cfg.JobUser
	}
	if _, err := user.Lookup("nobody"); err != nil {
		n.log.Warn("the node runs as root and there is no user nobody: jobs run as root; set job_user", "err", err)
		return ""
	}
	return "nobody"
}

// closeJobs stops the controller (jobs keep running on their suppliers)
// and the executor (attempts here are stopped; their renters fail over).
func (n *Node) closeJobs() error {
	var errs []error
	if n.jobs.ctrl != nil {
		errs = append(errs, n.jobs.ctrl.Close())
	}
	if n.jobs.renter != nil {
		n.jobs.renter.Close() // its bids' gossip, before the network goes
	}
	if n.jobs.tunnels != nil {
		errs = append(errs, n.jobs.tunnels.Close())
	}
	if n.jobs.shells != nil {
		errs = append(errs, n.jobs.shells.Close())
	}
	if n.jobs.exec != nil {
		errs = append(errs, n.jobs.exec.Close())
	}
	// After the executor: the job networks kept ready for jobs to come.
	for _, rt := range n.jobs.runtimes {
		errs = append(errs, rt.Close())
	}
	if n.jobs.cluster != nil {
		errs = append(errs, n.jobs.cluster.Close())
	}
	if n.jobs.evidence != nil {
		errs = append(errs, n.jobs.evidence.Close())
	}
	return errors.Join(errs...)
}

// Jobs is the node's renter-side job controller.
func (n *Node) Jobs() *job.Controller { return n.jobs.ctrl }

// Ledger is the node's settlement ledger.
func (n *Node) Ledger() *settle.Ledger { return n.jobs.ledger }

// rent leases GPUs for a job the way `gpumesh rent` does: screened by this
// node's reputation book, explained from its bootstrap peers' books.
func (n *Node) rent(ctx context.Context, req market.RentRequest) (*market.Lease, error) {
	req.Books = n.bootstrapIDs()
	// A node never rents from itself: its renter and supplier share one
	// fate, which failover exists to avoid.
	req.Exclude = append(req.Exclude, n.id)
	req.ScreenBy(n.verify.rep)
	if req.Unreachable == nil {
		req.Unreachable = n.jobUnreachable()
	}
	return n.jobs.renter.Rent(ctx, req)
}

// rentGang leases a cluster's members as rent leases one job's GPUs.
func (n *Node) rentGang(ctx context.Context, req market.GangRequest) ([]*market.Lease, error) {
	req.Books = n.bootstrapIDs()
	req.Exclude = append(req.Exclude, n.id)
	req.ScreenBy(n.verify.rep)
	if req.Unreachable == nil {
		req.Unreachable = n.jobUnreachable()
	}
	if req.ReachOf == nil {
		req.ReachOf = n.memberReach
	}
	return n.jobs.renter.RentGang(ctx, req)
}

// clusterDialTimeout bounds how long a supplier tries to connect an
// admitted cluster stream to its own job's port.
const clusterDialTimeout = 20 * time.Second

// memberReach is how the members of a cluster reach supplier s, as its
// kept profile says: its reach, except that a supplier whose reach is
// not known yet and whose every address is private or loopback (a LAN,
// a testnet on one machine) is taken as punchable: peers that share its
// network dial it directly.
func (n *Node) memberReach(s peer.ID) p2p.Reach {
	p, ok := n.keptProfile(s)
	if !ok {
		return p2p.ReachUnknown
	}
	r := p.ReachOf()
	if r != p2p.ReachUnknown || len(p.Addrs) == 0 {
		return r
	}
	for _, a := range p.Addrs {
		ip, err := manet.ToIP(a)
		if err != nil || !(ip.IsLoopback() || ip.IsPrivate()) {
			return r
		}
	}
	return p2p.ReachPunchable
}

// releaseLeases gives back leases no job will run on, unpenalised.
func (n *Node) releaseLeases(ctx context.Context, leases []*market.Lease) error {
	return n.jobs.renter.ReleaseLeases(ctx, leases)
}

// jobUnreachable says why a job session from this node cannot reach a
// supplier: a session, its log stream and checkpoint pulls need a direct
// connection (a relay cuts a connection after 2 minutes or 128 KiB), and
// a supplier whose profile says relay-only (behind a symmetric NAT) gets
// one only by dialling a public renter itself. So a renter that is not
// public leaves relay-only suppliers out, saying why. nil when this node
// is public: every supplier reaches it.
func (n *Node) jobUnreachable() func(peer.ID) string {
	self := n.net.Reach()
	if self.Reach == p2p.ReachPublic {
		return nil
	}
	return func(s peer.ID) string {
		if p, ok := n.keptProfile(s); !ok || p.ReachOf() != p2p.ReachRelayOnly {
			return ""
		}
		return fmt.Sprintf("its profile says relay-only (behind a symmetric NAT: hole punching cannot make a direct connection to it) and this node is %s, not public; "+
			"a job session needs a direct connection, since a relay carries at most 2 minutes or 128 KiB. Rent from a supplier with reach=public or reach=punchable, or run from a public node", self.Reach)
	}
}

// connectPeer connects to p at the addresses its kept profile states
// (behind NAT, its relay addresses, which nothing else tells), and those
// the peerstore or else the DHT knows (e.g. after this node restarted).
func (n *Node) connectPeer(ctx context.Context, p peer.ID) error {
	h := n.net.Host
	if h.Network().Connectedness(p) == network.Connected {
		return nil
	}
	if prof, ok := n.keptProfile(p); ok {
		h.Peerstore().AddAddrs(p, dialAddrs(prof), peerstore.TempAddrTTL)
	}
	if len(h.Peerstore().Addrs(p)) == 0 {
		ai, err := n.net.DHT.FindPeer(ctx, p)
		if err != nil {
			return fmt.Errorf("find %s: %w", p, err)
		}
		h.Peerstore().AddAddrs(p, ai.Addrs, peerstore.TempAddrTTL)
	}
	return h.Connect(ctx, peer.AddrInfo{ID: p})
}

// online reports whether this node still reaches some peer other than
// without: a bootstrap peer first, else any connected peer.
func (n *Node) online(ctx context.Context, without peer.ID) bool {
	var cands []peer.ID
	for _, id := range n.bootstrapIDs() {
		if id != without && id != n.id {
			cands = append(cands, id)
		}
	}
	for _, id := range n.net.Host.Network().Peers() {
		if id != without && len(cands) < 8 {
			cands = append(cands, id)
		}
	}
	for _, id := range cands {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res := <-ping.Ping(pctx, n.net.Host, id)
		cancel()
		if res.Error == nil {
			return true
		}
	}
	return false
}

func (n *Node) readEvidence(ctx context.Context) {
	for {
		msg, err := n.jobs.evidence.Next(ctx)
		if err != nil {
			return
		}
		if err := n.jobs.ledger.AddEvidence(msg.Value, n.now()); err != nil {
			n.log.Debug("evidence not kept", "err", err)
		}
	}
}
