package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/doctor"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// Keyspaces of the node's store.
var (
	ksProfiles = store.MustKeyspace("profiles") // peer ID bytes -> signed profile envelope
	ksSelf     = store.MustKeyspace("self")     // this node's own state
)

var keyProfileSeq = []byte("profile_seq")

// Option adjusts how New builds a node; tests use them to inject parts.
type Option func(*options)

type options struct {
	logger   *slog.Logger
	clock    clock.Clock
	detector inventory.Detector
	store    store.Store
	cudaLib  string
	resolver Resolver
}

// WithResolver resolves the /dnsaddr bootstrap entries (default
// DefaultResolver, the system's DNS); tests give a fake.
func WithResolver(r Resolver) Option { return func(o *options) { o.resolver = r } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock sets the clock used for records and validation, and the one
// the job meter's and the supplier's timers run by (default clock.Real()).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithDetector replaces the GPU detector chosen by Config.GPUs.
func WithDetector(d inventory.Detector) Option { return func(o *options) { o.detector = d } }

// WithCUDALibrary sets the CUDA driver library the GPU prover of real
// GPUs loads (default libcuda.so.1, see verify/cuda).
func WithCUDALibrary(path string) Option { return func(o *options) { o.cudaLib = path } }

// WithStore makes the node use s (e.g. an in-memory store) instead of
// opening Badger in the data dir. The node closes it.
func WithStore(s store.Store) Option { return func(o *options) { o.store = s } }

// Node is a running gpumesh daemon.
type Node struct {
	cfg     Config
	key     crypto.PrivKey
	id      peer.ID
	log     *slog.Logger
	clock   clock.Clock
	now     func() time.Time // clock.Now
	store   store.Store
	net     *p2p.Network
	hbs     *p2p.Heartbeats
	gpus    []inventory.GPU
	usage   inventory.UsageReader // samples the GPUs jobs lease, for receipts
	cudaLib string                // the CUDA driver library (WithCUDALibrary)
	reg     *prometheus.Registry
	metrics *metrics.Metrics // the node's own, in reg
	api     *http.Server
	apiLn   net.Listener

	market   marketParts
	verify   verifyParts
	jobs     jobParts
	peers    *peerTable
	dir      *p2p.Directory  // the live profiles kept, served to light clients
	skew     doctor.SkewRing // peers' heartbeat clocks against ours, for Doctor
	fetchQ   chan peer.ID    // peers whose announced profile is newer than the one held
	fetching fetchSet        // the peers in fetchQ or being fetched
	advertOK chan struct{}   // closed after the first successful publish
	provided provided        // the provider records announced, and when

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// bootstrapList says which bootstrap list the node started with
	// (Config.BootstrapList), before its /dnsaddr entries were resolved.
	bootstrapList string

	closeOnce sync.Once
	closeErr  error
}

// New starts a node from cfg: it loads or creates the identity, opens the
// store, detects GPUs, starts the network, joins through the bootstrap
// peers, and starts the heartbeat, advertisement and API. It returns once
// the node is running; Close stops it.
func New(ctx context.Context, cfg Config, opts ...Option) (_ *Node, err error) {
	o := options{logger: slog.Default(), clock: clock.Real()}
	for _, opt := range opts {
		opt(&o)
	}
	n := &Node{cfg: cfg, log: o.logger, clock: o.clock, now: o.clock.Now, peers: newPeerTable(), fetchQ: make(chan peer.ID, 64), advertOK: make(chan struct{})}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.key, _, err = LoadOrCreateKey(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n.id = PeerID(n.key)
	n.log = n.log.With("peer", n.id.String())

	det := o.detector
	if det == nil {
		det = inventory.FromSpec(cfg.GPUs, n.id.String(), n.log.With("sub", "inventory"))
	}
	n.gpus, err = det.Detect(ctx)
	if err != nil {
		return nil, fmt.Errorf("node: detect gpus: %w", err)
	}
	n.usage = inventory.NewUsageReader(det)
	n.cudaLib = o.cudaLib

	n.store = o.store
	if n.store == nil {
		n.store, err = store.OpenBadger(storeDir(cfg.DataDir), store.WithLogger(n.log.With("sub", "store")), store.WithGCInterval(10*time.Minute))
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}

	n.reg = prometheus.NewRegistry()
	if n.metrics, err = metrics.New(n.reg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := n.watchStore(); err != nil {
		return nil, err
	}
	n.bootstrapList = cfg.BootstrapList()
	n.cfg.Bootstrap, err = cfg.resolveBootstrap(ctx, o.resolver, false, func(err error) {
		n.log.Warn("bootstrap list: some entries name no peer", "err", err)
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.log.Info("joining network", "network", cfg.networkID(), "bootstrap", n.bootstrapList, "bootstrap_peers", len(n.cfg.Bootstrap))
	n.net, err = p2p.New(p2p.Config{
		Key:          n.key,
		Network:      cfg.Network,
		ListenAddrs:  stringsOf(cfg.Listen),
		Bootstrap:    n.cfg.Bootstrap,
		Mode:         p2p.ModeServer,
		PubSub:       true,
		ConnLow:      cfg.ConnLow,
		ConnHigh:     cfg.ConnHigh,
		Banned:       cfg.Ban,
		MDNS:         cfg.MDNS,
		Reachability: cfg.Reachability,
		UserAgent:    Software(),
		Registerer:   n.reg,
		Now:          n.now,
		Logger:       n.log,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := n.net.Bootstrap(ctx, cfg.BootstrapTimeout); err != nil {
		return nil, fmt.Errorf("node: %w; check the --bootstrap addresses and that those nodes are running", err)
	}
	n.hbs, err = p2p.JoinHeartbeats(n.net.PubSub, n.key, n.now, n.log, n.topic(p2p.HeartbeatTopic))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := n.startAPI(); err != nil {
		return nil, err
	}
	if err := n.startDirectory(); err != nil {
		return nil, err
	}

	loopCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	// The market first: the heartbeat reads the supplier's ledger.
	if err := n.startMarket(loopCtx); err != nil {
		return nil, err
	}
	if err := n.startVerify(loopCtx); err != nil {
		return nil, err
	}
	if err := n.startJobs(loopCtx); err != nil {
		return nil, err
	}
	n.goLoop(func() { n.advertiseLoop(loopCtx) })
	n.goLoop(func() { n.heartbeatLoop(loopCtx) })
	n.goLoop(func() { n.readHeartbeats(loopCtx) })
	for range profileFetchers {
		n.goLoop(func() { n.fetchProfiles(loopCtx) })
	}
	n.log.Info("node started", "addrs", n.Addrs(), "gpus", len(n.gpus), "region", cfg.Region, "api", n.APIAddr())
	return n, nil
}

// startDirectory loads the profiles the store keeps into the directory
// and serves it to light clients (p2p.DirectoryProtocol).
func (n *Node) startDirectory() error {
	n.dir = p2p.NewDirectory()
	ps, err := n.KnownProfiles()
	if err != nil {
		return fmt.Errorf("node: load the profiles kept: %w", err)
	}
	for _, p := range ps {
		n.dir.Put(p)
	}
	p2p.ServeDirectory(n.net.Host, n.dir, n.now)
	return nil
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// storeDir is where the Badger store lives inside the data dir.
func storeDir(dataDir string) string { return filepath.Join(dataDir, "store") }

// bootstrapIDs are the peer IDs of the configured bootstrap peers.
func (n *Node) bootstrapIDs() []peer.ID {
	ids := make([]peer.ID, 0, len(n.cfg.Bootstrap))
	for _, ai := range n.cfg.Bootstrap {
		ids = append(ids, ai.ID)
	}
	return ids
}

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.id }

// Addrs are the node's full multiaddrs, each ending in /p2p/ID.
func (n *Node) Addrs() []ma.Multiaddr {
	addrs, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: n.id, Addrs: n.net.Host.Addrs()})
	if err != nil {
		return nil
	}
	return addrs
}

// GPUs is the node's inventory as detected at start.
func (n *Node) GPUs() []inventory.GPU { return n.gpus }

// Network exposes the node's libp2p network.
func (n *Node) Network() *p2p.Network { return n.net }

// Advertised is closed once the node's profile has been published at
// least once (never, for a node without GPUs).
func (n *Node) Advertised() <-chan struct{} { return n.advertOK }

// Close stops the loops, the API, the network and the store. It is safe
// to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.cancel != nil {
			n.cancel()
		}
		var errs []error
		if n.api != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			errs = append(errs, n.api.Shutdown(ctx))
			cancel()
		}
		// Jobs first: the executor's final receipts and the controller's
		// last writes go to the store, which closes last.
		errs = append(errs, n.closeJobs())
		// Give the supplier a moment to cancel its asks while the
		// network is still up.
		if n.market.asm != nil {
			n.market.asm.Stopped(market.ShutdownGrace + time.Second)
			errs = append(errs, n.market.asm.Close())
		}
		if n.verify.atts != nil {
			errs = append(errs, n.verify.atts.Close())
		}
		if n.hbs != nil {
			errs = append(errs, n.hbs.Close())
		}
		if n.net != nil {
			errs = append(errs, n.net.Close())
		}
		n.wg.Wait()
		if n.verify.cuda != nil {
			errs = append(errs, n.verify.cuda.Close())
		}
		if c, ok := n.usage.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// profileGPUs converts the inventory to its wire form.
func profileGPUs(gpus []inventory.GPU) ([]*pb.GPU, []string) {
	var (
		out    []*pb.GPU
		models []string
		seen   = map[string]bool{}
	)
	for _, g := range gpus {
		// An unparsable compute capability (never from NVML or the
		// profile table) is advertised as 0.0 rather than dropped.
		var major, minor uint32
		_, _ = fmt.Sscanf(g.ComputeCapability, "%d.%d", &major, &minor)
		w := &pb.GPU{
			Model: g.Model, Name: g.Name, Uuid: g.UUID, MemoryBytes: g.MemoryBytes,
			CcMajor: major, CcMinor: minor, Simulated: g.Simulated,
			PcieGen: uint32(max(g.PCIeGen, 0)), PcieWidth: uint32(max(g.PCIeWidth, 0)),
			DriverVersion: g.DriverVersion, CudaVersion: g.CUDAVersion,
		}
		if g.NVLinks != nil {
			n := uint32(*g.NVLinks)
			w.NvlinkLinks = &n
		}
		if p, ok := catalog.Lookup(g.Model); ok {
			w.MemBandwidthGbps = uint32(p.MemoryBandwidthGBps)
		}
		out = append(out, w)
		if !seen[g.Model] && g.Model != inventory.UnknownModel {
			seen[g.Model] = true
			models = append(models, g.Model)
		}
	}
	return out, models
}
