package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/conngater"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"
)

// Network is a running libp2p host with gpumesh's DHT and, optionally,
// GossipSub. Close releases everything New started.
type Network struct {
	Host   host.Host
	DHT    *dht.IpfsDHT
	PubSub *pubsub.PubSub // nil unless Config.PubSub

	cfg    Config
	gater  *conngater.BasicConnectionGater
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup // keepBootstrap; Close waits for it

	mdns mdns.Service

	scoresMu  sync.Mutex
	scores    map[peer.ID]float64 // refreshed by pubsub every second
	penalties *penalties          // the application-specific score (Penalize)
	reach     *reachTracker       // what Reach reports
	// reachEmitter tells the host it is behind NAT (see tellBehindNAT);
	// nil unless reachability is auto on a server.
	reachEmitter event.Emitter
	punch        *punchClock // how long hole punching took, per peer
	wrong        wrongPeers  // peers found on other networks

	closeOnce sync.Once
	closeErr  error
}

// New starts a host listening on cfg.ListenAddrs with the DHT in cfg.Mode.
// It does not contact the bootstrap peers: call Bootstrap for that.
func New(cfg Config) (*Network, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("sub", "p2p")
	gater, err := newGater(cfg.Banned)
	if err != nil {
		return nil, err
	}
	n := &Network{cfg: cfg, gater: gater, log: log}
	h := cfg.Host
	if h != nil {
		if id, err := peer.IDFromPrivateKey(cfg.Key); err != nil || id != h.ID() {
			return nil, fmt.Errorf("p2p: config: Key is not the key of Host %s", h.ID())
		}
	} else {
		if h, err = n.startHost(); err != nil {
			return nil, err
		}
	}
	n.Host = h
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if err := n.startServices(ctx); err != nil {
		n.Close()
		return nil, err
	}
	log.Info("host started", "peer", h.ID(), "network", cfg.Network, "addrs", h.Addrs(), "dht_mode", dhtMode(cfg.Mode))
	return n, nil
}

// startHost starts the libp2p host of n.cfg, with its resource and
// connection managers.
func (n *Network) startHost() (host.Host, error) {
	cm, err := connmgr.NewConnManager(n.cfg.ConnLow, n.cfg.ConnHigh, connmgr.WithGracePeriod(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("p2p: connection manager: %w", err)
	}
	rm, err := newResourceManager()
	if err != nil {
		cm.Close()
		return nil, fmt.Errorf("p2p: resource manager: %w", err)
	}
	opts := hostOptions(n.cfg, rm, cm, n.gater, n.relayCandidates)
	if err := checkPortsFree(n.cfg.ListenAddrs); err != nil {
		rm.Close()
		cm.Close()
		return nil, err
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		cm.Close()
		return nil, fmt.Errorf("p2p: start host: %w", err)
	}
	return h, nil
}

// hostOptions are the libp2p options of the host, by concern: identity,
// transports and security, resource limits and connection management,
// metrics, listen addresses, and NAT traversal.
func hostOptions(cfg Config, rm network.ResourceManager, cm *connmgr.BasicConnMgr, gater *conngater.BasicConnectionGater, relayPeers func(context.Context, int) <-chan peer.AddrInfo) []libp2p.Option {
	opts := []libp2p.Option{libp2p.Identity(cfg.Key), libp2p.UserAgent(cfg.UserAgent)}
	opts = append(opts, transportOptions()...)
	opts = append(opts,
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.ConnectionGater(gater),
		metricsOption(cfg.Registerer),
		listenOption(cfg.ListenAddrs),
	)
	return append(opts, natOptions(cfg, relayPeers)...)
}

// transportOptions are TCP and QUIC, with TLS 1.3 or Noise and yamux over
// TCP. TLS goes first: its AES-GCM moves bulk data (a job's files, a
// service's tunnels) about 40% faster than Noise's ChaCha20-Poly1305 on
// CPUs with AES instructions; Noise stays for peers that offer only it.
func transportOptions() []libp2p.Option {
	return []libp2p.Option{
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(quic.NewTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
	}
}

// metricsOption sends libp2p's metrics to reg, or turns them off when reg
// is nil.
func metricsOption(reg prometheus.Registerer) libp2p.Option {
	if reg != nil {
		return libp2p.PrometheusRegisterer(reg)
	}
	return libp2p.DisableMetrics()
}

// listenOption listens on addrs, or nowhere when there are none (a light
// client).
func listenOption(addrs []string) libp2p.Option {
	if len(addrs) == 0 {
		return libp2p.NoListenAddrs
	}
	return libp2p.ListenAddrStrings(addrs...)
}

// natOptions are hole punching for every host and, on servers, the help
// they give peers behind NAT and the relays they hold themselves.
func natOptions(cfg Config, relayPeers func(context.Context, int) <-chan peer.AddrInfo) []libp2p.Option {
	opts := []libp2p.Option{libp2p.EnableHolePunching()}
	if cfg.Mode == ModeServer {
		// Servers help peers behind NAT: AutoNAT v1 and v2 dial-backs and
		// a limited circuit relay v2 service. If AutoNAT finds a server
		// itself unreachable, it reserves a slot on relays picked from
		// its DHT routing table, and DCUtR upgrades relayed connections.
		opts = append(opts, libp2p.EnableNATService(), libp2p.EnableAutoNATv2(),
			libp2p.EnableRelayService(relayv2.WithResources(cfg.Relay.resources())),
			libp2p.EnableAutoRelayWithPeerSource(relayPeers, autoRelayOptions()...))
	}
	switch cfg.Reachability {
	case ReachabilityPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachabilityPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	return opts
}

// autoRelayOptions make a node behind NAT reserve a relay slot as soon as
// it knows one relay. libp2p's defaults suit the IPFS network: wait for 4
// candidates or 3 minutes, ask the peer source every 30 s, and back off
// from a refusing relay for an hour. A small network (one public node
// and a few behind NAT) would leave its NATed suppliers unreachable for
// minutes with them.
func autoRelayOptions() []autorelay.Option {
	return []autorelay.Option{
		autorelay.WithMinCandidates(1),
		autorelay.WithBootDelay(0),
		autorelay.WithMinInterval(relayPollInterval),
		autorelay.WithBackoff(relayBackoff),
	}
}

const (
	// relayPollInterval is how often AutoRelay asks for relay candidates
	// while it holds fewer reservations than it wants.
	relayPollInterval = 5 * time.Second
	// relayBackoff is how long AutoRelay leaves a candidate alone after a
	// failed reservation: a relay that restarts is tried again soon.
	relayBackoff = time.Minute
)

// startServices starts what runs on the host: the DHT, GossipSub when
// configured, the upkeep of the bootstrap peers, and mDNS when
// configured. The caller closes n when it fails.
func (n *Network) startServices(ctx context.Context) error {
	var err error
	n.DHT, err = dht.New(n.Host, dhtOptions(n.cfg)...)
	if err != nil {
		return fmt.Errorf("p2p: start dht: %w", err)
	}
	n.penalties = newPenalties(n.cfg.Now)
	if err := n.watchNetworks(ctx); err != nil {
		return err
	}
	if err := n.startReach(ctx); err != nil {
		return err
	}
	if n.cfg.PubSub {
		n.PubSub, err = newGossipSub(ctx, n.Host, n.cfg, n.setScores, n.penalties.score, func(p peer.ID) { go n.floodBan(ctx, p) })
		if err != nil {
			return fmt.Errorf("p2p: start gossipsub: %w", err)
		}
	}
	for _, b := range n.cfg.Bootstrap {
		n.Host.ConnManager().Protect(b.ID, "bootstrap")
	}
	if n.cfg.Mode == ModeServer && len(n.cfg.Bootstrap) > 0 {
		n.wg.Go(func() { n.keepBootstrap(ctx) })
	}
	if n.cfg.MDNS {
		n.mdns = mdns.NewMdnsService(n.Host, MDNSService(n.cfg.Network), mdnsNotifee{n})
		if err := n.mdns.Start(); err != nil {
			return fmt.Errorf("p2p: start mdns: %w", err)
		}
	}
	return nil
}

// relayCandidates feeds AutoRelay with the peers that may serve as
// relays: the bootstrap peers first (they are the ones a small network
// has), then the DHT servers we know of. AutoRelay keeps only those that
// speak the relay protocol.
func (n *Network) relayCandidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	out := make(chan peer.AddrInfo, num)
	defer close(out)
	seen := map[peer.ID]bool{n.Host.ID(): true}
	add := func(ai peer.AddrInfo) {
		if len(out) < num && !seen[ai.ID] && len(ai.Addrs) > 0 {
			seen[ai.ID] = true
			out <- ai
		}
	}
	for _, b := range n.cfg.Bootstrap {
		add(n.Host.Peerstore().PeerInfo(b.ID))
	}
	if n.DHT != nil {
		for _, id := range n.DHT.RoutingTable().ListPeers() {
			add(n.Host.Peerstore().PeerInfo(id))
		}
	}
	return out
}

// mdnsNotifee connects to gpumesh nodes found on the local network.
type mdnsNotifee struct{ n *Network }

func (m mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	if ai.ID == m.n.Host.ID() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.n.Host.Connect(ctx, ai); err != nil {
		m.n.log.Debug("mdns peer unreachable", "peer", ai.ID, "err", err)
	}
}

// Close stops the DHT, pubsub and host, and waits for the loops the
// Network started. It is safe to call more than once.
func (n *Network) Close() error {
	n.closeOnce.Do(func() {
		if n.cancel != nil {
			n.cancel()
		}
		n.wg.Wait()
		var errs []error
		if n.mdns != nil {
			errs = append(errs, n.mdns.Close())
		}
		if n.DHT != nil {
			errs = append(errs, n.DHT.Close())
		}
		if n.reachEmitter != nil {
			errs = append(errs, n.reachEmitter.Close())
		}
		errs = append(errs, n.Host.Close())
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// checkPortsFree refuses listen addresses whose fixed port another socket
// holds. libp2p listens with SO_REUSEPORT (so that hole punching can dial
// from the listening port), which lets a second node bind a port the first
// already listens on and silently share its connections; a plain bind,
// without SO_REUSEPORT, fails on a port in use, so it is tried first.
func checkPortsFree(addrs []string) error {
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return fmt.Errorf("p2p: listen address %q: %w", s, err)
		}
		network, hostport, err := manet.DialArgs(m)
		if err != nil {
			continue // not IP: nothing to probe
		}
		if _, port, _ := net.SplitHostPort(hostport); port == "0" || port == "" {
			continue
		}
		var c io.Closer
		switch network {
		case "tcp", "tcp4", "tcp6":
			c, err = net.Listen(network, hostport)
		case "udp", "udp4", "udp6":
			c, err = net.ListenPacket(network, hostport)
		default:
			continue
		}
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return fmt.Errorf("p2p: listen on %s: %w (is another node using this port? pick another --listen port)", s, err)
		case err != nil:
			// Not ours to judge (no IPv6, an address not up yet):
			// libp2p starts while at least one address listens.
			continue
		}
		c.Close()
	}
	return nil
}
