package p2p

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
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

// Mode says which role a Network plays in the DHT.
type Mode int

const (
	// ModeServer answers DHT queries and stores records: every node.
	ModeServer Mode = iota
	// ModeClient only queries: the light client of search and rent.
	ModeClient
)

// Config configures a Network. The zero value of every optional field has a
// sensible default, filled in by New.
type Config struct {
	// Key is the node's identity. Required.
	Key crypto.PrivKey
	// ListenAddrs are multiaddrs to listen on; none for a light client.
	ListenAddrs []string
	// Bootstrap are the peers to join the network through.
	Bootstrap []peer.AddrInfo
	// Mode is the DHT role.
	Mode Mode
	// PubSub starts GossipSub; light clients leave it off.
	PubSub bool
	// ConnLow and ConnHigh are the connection manager's watermarks.
	ConnLow, ConnHigh int
	// Banned peers are refused by the connection gater and pubsub.
	Banned []peer.ID
	// UserAgent is announced through identify, e.g. "gpumesh/0.1.0".
	UserAgent string
	// Registerer receives libp2p's Prometheus metrics; none when nil.
	Registerer prometheus.Registerer
	// Now is the clock used by validators; time.Now when nil.
	Now func() time.Time
	// Logger receives structured logs; slog.Default when nil.
	Logger *slog.Logger
	// MDNS announces and discovers gpumesh nodes on the local network by
	// multicast DNS. Off by default: it sends multicast beyond loopback.
	MDNS bool
	// MaxRecordAge is how long DHT servers keep value records (profiles)
	// they were sent. The DHT default (48 h) when zero.
	MaxRecordAge time.Duration
	// Relay bounds the circuit relay v2 service a server runs for peers
	// behind NAT (once AutoNAT finds it public); zero fields take
	// DefaultRelayLimits' values.
	Relay RelayLimits
	// ForcePublic tells libp2p that this host is publicly reachable, so
	// that it serves as a relay at once instead of once AutoNAT says so:
	// for an operator who knows, and for tests on loopback, where AutoNAT
	// never finds a public address.
	ForcePublic bool
	// Host, when set, is the host to run on instead of one New starts:
	// a simulation's in-memory (mocknet) host, whose maker chose its
	// transports, limits and connection manager. Key must be its key.
	// New then ignores ListenAddrs, ConnLow, ConnHigh, Registerer, Relay
	// and ForcePublic, and the connection gater does not guard Host, so
	// Banned peers are refused by pubsub only. Close closes Host.
	Host host.Host
}

// RelayLimits bound the relay service of a server: how many peers behind
// NAT hold a reservation (a slot others reach them through), and what one
// relayed connection may carry before the relay cuts it.
type RelayLimits struct {
	// MaxReservations is the most reservations held at once; further
	// requests are refused (RESERVATION_REFUSED) until one expires.
	MaxReservations int
	// MaxReservationsPerIP bounds the reservations of one IP address, so
	// that one machine with many keys cannot take every slot.
	MaxReservationsPerIP int
	// MaxCircuits is the most relayed connections open at once to or from
	// one peer.
	MaxCircuits int
	// Data and Duration bound one relayed connection, each way: past them
	// the relay resets it. Protocols that need more wait for a direct
	// connection (docs/PROTOCOL.md, "Relayed connections").
	Data     int64
	Duration time.Duration
}

// DefaultRelayLimits are libp2p's defaults: 128 reservations, 8 per IP,
// 16 circuits per peer, and 128 KiB or 2 minutes per relayed connection.
func DefaultRelayLimits() RelayLimits {
	d := relayv2.DefaultResources()
	return RelayLimits{MaxReservations: d.MaxReservations, MaxReservationsPerIP: d.MaxReservationsPerIP,
		MaxCircuits: d.MaxCircuits, Data: d.Limit.Data, Duration: d.Limit.Duration}
}

// resources are l as the relay's resources, with defaults for zero fields.
func (l RelayLimits) resources() relayv2.Resources {
	d := DefaultRelayLimits()
	r := relayv2.DefaultResources()
	r.MaxReservations = cmp.Or(l.MaxReservations, d.MaxReservations)
	r.MaxReservationsPerIP = cmp.Or(l.MaxReservationsPerIP, d.MaxReservationsPerIP)
	r.MaxCircuits = cmp.Or(l.MaxCircuits, d.MaxCircuits)
	r.Limit = &relayv2.RelayLimit{Data: cmp.Or(l.Data, d.Data), Duration: cmp.Or(l.Duration, d.Duration)}
	return r
}

func (c *Config) fill() error {
	if c.Key == nil {
		return errors.New("p2p: config: Key is required")
	}
	if c.ConnLow == 0 {
		c.ConnLow = 32
	}
	if c.ConnHigh == 0 {
		c.ConnHigh = 96
	}
	if c.UserAgent == "" {
		c.UserAgent = "gpumesh"
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

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
	punch     *punchClock         // how long hole punching took, per peer

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
	log.Info("host started", "peer", h.ID(), "addrs", h.Addrs(), "dht_mode", dhtMode(cfg.Mode))
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

// newGater is a connection gater that refuses the banned peers.
func newGater(banned []peer.ID) (*conngater.BasicConnectionGater, error) {
	gater, err := conngater.NewBasicConnectionGater(nil)
	if err != nil {
		return nil, fmt.Errorf("p2p: connection gater: %w", err)
	}
	for _, p := range banned {
		if err := gater.BlockPeer(p); err != nil {
			return nil, fmt.Errorf("p2p: ban %s: %w", p, err)
		}
	}
	return gater, nil
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
// they give peers behind NAT.
func natOptions(cfg Config, relayPeers func(context.Context, int) <-chan peer.AddrInfo) []libp2p.Option {
	opts := []libp2p.Option{libp2p.EnableHolePunching()}
	if cfg.Mode == ModeServer {
		// Servers help peers behind NAT: AutoNAT v1 and v2 dial-backs and
		// a limited circuit relay v2 service. If AutoNAT finds a server
		// itself unreachable, it reserves a slot on relays picked from
		// its DHT routing table, and DCUtR upgrades relayed connections.
		opts = append(opts, libp2p.EnableNATService(), libp2p.EnableAutoNATv2(),
			libp2p.EnableRelayService(relayv2.WithResources(cfg.Relay.resources())),
			libp2p.EnableAutoRelayWithPeerSource(relayPeers))
	}
	if cfg.ForcePublic {
		opts = append(opts, libp2p.ForceReachabilityPublic())
	}
	return opts
}

// dhtMode is the DHT's mode for mode. A server serves the DHT unless
// AutoNAT finds it private (behind NAT): peers could not dial it to store
// or fetch records, and would wait on it for their timeouts; it then
// queries as a client until it is found public again. While reachability
// is unknown (loopback, a fresh node) it serves.
func dhtMode(mode Mode) dht.ModeOpt {
	if mode == ModeClient {
		return dht.ModeClient
	}
	return dht.ModeAutoServer
}

// dhtOptions are the DHT's options: gpumesh's protocol prefix, the
// profile record validator, the bootstrap peers and the record age.
func dhtOptions(cfg Config) []dht.Option {
	dopts := []dht.Option{
		dht.Mode(dhtMode(cfg.Mode)),
		dht.ProtocolPrefix(ProtocolPrefix),
		dht.NamespacedValidator(ProfileNamespace, ProfileValidator{Now: cfg.Now}),
		dht.BootstrapPeers(cfg.Bootstrap...),
	}
	if cfg.MaxRecordAge > 0 {
		dopts = append(dopts, dht.MaxRecordAge(cfg.MaxRecordAge))
	}
	return dopts
}

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
		n.mdns = mdns.NewMdnsService(n.Host, "gpumesh", mdnsNotifee{n})
		if err := n.mdns.Start(); err != nil {
			return fmt.Errorf("p2p: start mdns: %w", err)
		}
	}
	return nil
}

// MaxStreamMemory is the most memory one stream, and one peer on one
// protocol, may reserve with the resource manager: a job start's spec and
// checkpoint (36 MiB, node/job) at network.ReservationPriorityHigh.
const MaxStreamMemory = 48 << 20

// newResourceManager sizes libp2p's limits for a small daemon: 256 MiB of
// memory and 512 file descriptors in all, scaled from libp2p's defaults,
// with room for MaxStreamMemory on one stream (libp2p's default is 16 MiB).
// MaxInboundConns bounds the inbound connections of a node (the resource
// manager's system scope); the connection manager trims far below it
// (ConnHigh), after each connection's grace period.
const MaxInboundConns = 1024

// TunnelProtocol is node/tunnel's stream protocol; the resource manager
// gives it limits of its own (libp2p's default per-protocol, per-peer
// limit of 64 inbound streams would cap a renter's connections to one
// supplier there).
const TunnelProtocol protocol.ID = "/gpumesh/tunnel/1.0.0"

// TunnelService is the resource manager's service scope of tunnel streams
// (node/tunnel): a renter's connections to its job's ports. It has limits
// of its own, so that a flood of tunnels is refused there and never takes
// the streams, memory or descriptors the node's own protocols need.
const TunnelService = "gpumesh.tunnel"

// Limits of TunnelService: streams in all and per peer, and the memory
// their flow-control windows may reserve.
const (
	MaxTunnelStreams     = 512
	MaxTunnelStreamsPeer = 128
	MaxTunnelMemory      = 128 << 20
)

func newResourceManager() (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	limits.StreamBaseLimit.Memory = MaxStreamMemory
	limits.ProtocolPeerBaseLimit.Memory = MaxStreamMemory
	scaled := limits.Scale(256<<20, 512)
	// Scaled for 256 MiB, the system scope would take only 80 inbound
	// connections: a bootstrap node of a network of a hundred refused the
	// rest in their handshakes. Connections are few bytes until they
	// carry streams, which stay bounded as scaled.
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(rcmgr.PartialLimitConfig{
		System: rcmgr.ResourceLimits{ConnsInbound: MaxInboundConns, Conns: MaxInboundConns + 256, FD: MaxInboundConns + 256},
		Service: map[string]rcmgr.ResourceLimits{TunnelService: {
			Streams: MaxTunnelStreams, StreamsInbound: MaxTunnelStreams, StreamsOutbound: MaxTunnelStreams,
			Memory: MaxTunnelMemory,
		}},
		ServicePeer: map[string]rcmgr.ResourceLimits{TunnelService: {
			Streams: MaxTunnelStreamsPeer, StreamsInbound: MaxTunnelStreamsPeer, StreamsOutbound: MaxTunnelStreamsPeer,
			Memory: MaxTunnelMemory / 4,
		}},
		Protocol: map[protocol.ID]rcmgr.ResourceLimits{TunnelProtocol: {
			Streams: MaxTunnelStreams, StreamsInbound: MaxTunnelStreams, StreamsOutbound: MaxTunnelStreams,
			Memory: MaxTunnelMemory,
		}},
		ProtocolPeer: map[protocol.ID]rcmgr.ResourceLimits{TunnelProtocol: {
			Streams: MaxTunnelStreamsPeer, StreamsInbound: MaxTunnelStreamsPeer, StreamsOutbound: MaxTunnelStreamsPeer,
			Memory: MaxTunnelMemory / 4,
		}},
	}.Build(scaled)))
}

func newGossipSub(ctx context.Context, h host.Host, cfg Config, inspect pubsub.PeerScoreInspectFn, appScore func(peer.ID) float64, onFlood func(peer.ID)) (*pubsub.PubSub, error) {
	params, thresholds := scoreParams()
	params.AppSpecificScore = appScore
	return pubsub.NewGossipSub(ctx, h,
		pubsub.WithGossipSubParams(gossipParams()),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithPeerScore(params, thresholds),
		pubsub.WithPeerScoreInspect(inspect, 5*time.Second),
		pubsub.WithMaxMessageSize(64<<10),
		pubsub.WithPeerExchange(cfg.Mode == ModeServer),
		// A node sends the messages it publishes itself (a heartbeat, an
		// ask, a bid: a few a minute) to every topic peer in good standing,
		// not just its mesh: they arrive at once even while the mesh is
		// still forming (a node that just started, a light client that
		// publishes one bid and leaves). Forwarded messages use the mesh.
		pubsub.WithFloodPublish(true),
		// A restarted node must not score its peers down for relaying
		// its previous run's messages (guardRPCs, which reads the
		// author out of message IDs).
		pubsub.WithMessageIdFn(pubsub.DefaultMsgIdFn),
		pubsub.WithAppSpecificRpcInspector(guardRPCs(h.ID(), onFlood)),
		pubsub.WithLogger(cfg.Logger.With("sub", "pubsub")),
	)
}

// gossipParams are GossipSub's defaults but for GossipFactor.
//
// At every heartbeat (1 s) a node sends IHAVE, listing the message IDs of
// the last three heartbeats, to Dlazy (6) of its topic peers outside the
// mesh, or to GossipFactor of them when that is more. With the default
// factor (0.25) a node of a 100-node network, connected to most of it,
// sent IHAVE to about 23 peers a second on each busy topic, and received
// as many: more RPCs than the messages themselves (each received about
// six times over), for IDs it already had. The factor is there so that
// gossip reaches a sybil-heavy neighbourhood; gpumesh's flood publish
// (every author sends its own records to every topic peer in good
// standing) and peer scoring already cover that, so the factor here is
// 0.1: 9 peers of 93, and Dlazy alone below 60 peers.
func gossipParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.GossipFactor = 0.1
	return p
}

// scoreParams are gpumesh's GossipSub peer-scoring parameters. Invalid
// messages (P4) weigh heavily so that a peer sending forged or malformed
// records is graylisted after a handful; loopback is exempt from the IP
// colocation penalty so that a local testnet scores like a real one.
func scoreParams() (*pubsub.PeerScoreParams, *pubsub.PeerScoreThresholds) {
	_, v4loop, _ := net.ParseCIDR("127.0.0.0/8")
	_, v6loop, _ := net.ParseCIDR("::1/128")
	params := &pubsub.PeerScoreParams{
		Topics:                      map[string]*pubsub.TopicScoreParams{},
		AppSpecificScore:            func(peer.ID) float64 { return 0 },
		AppSpecificWeight:           1,
		IPColocationFactorWeight:    -10,
		IPColocationFactorThreshold: 8,
		IPColocationFactorWhitelist: []*net.IPNet{v4loop, v6loop},
		BehaviourPenaltyWeight:      -10,
		BehaviourPenaltyThreshold:   6,
		BehaviourPenaltyDecay:       pubsub.ScoreParameterDecay(10 * time.Minute),
		DecayInterval:               time.Second,
		DecayToZero:                 0.01,
		RetainScore:                 30 * time.Minute,
	}
	thresholds := &pubsub.PeerScoreThresholds{
		GossipThreshold:             -100,
		PublishThreshold:            -500,
		GraylistThreshold:           -1000,
		AcceptPXThreshold:           10,
		OpportunisticGraftThreshold: 3,
	}
	return params, thresholds
}

// TopicScoreParams are the per-topic scoring parameters for a record topic:
// a small reward for time in mesh and first deliveries, and a steep,
// slowly decaying penalty per invalid message.
func TopicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		SkipAtomicValidation:           true,
		TopicWeight:                    1,
		TimeInMeshWeight:               0.01,
		TimeInMeshQuantum:              time.Second,
		TimeInMeshCap:                  100,
		FirstMessageDeliveriesWeight:   1,
		FirstMessageDeliveriesDecay:    pubsub.ScoreParameterDecay(10 * time.Minute),
		FirstMessageDeliveriesCap:      20,
		InvalidMessageDeliveriesWeight: -100,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(time.Hour),
	}
}

// relayCandidates feeds AutoRelay with DHT servers we know of.
func (n *Network) relayCandidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	out := make(chan peer.AddrInfo, num)
	defer close(out)
	if n.DHT == nil {
		return out
	}
	for _, id := range n.DHT.RoutingTable().ListPeers() {
		if len(out) == num {
			break
		}
		out <- n.Host.Peerstore().PeerInfo(id)
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

func (n *Network) setScores(s map[peer.ID]float64) {
	n.scoresMu.Lock()
	n.scores = s
	n.scoresMu.Unlock()
}

// Penalize lowers p's GossipSub score by points (its application-specific
// score, weight 1), for misbehaviour pubsub cannot see: a relay that
// forwards messages a validator ignores rather than rejects, such as
// orders over their author's cap. The penalty halves every 10 minutes and
// is capped at 200, enough to cut the peer off from gossip (below -100)
// but not to graylist it.
func (n *Network) Penalize(p peer.ID, points float64) {
	if n.penalties != nil {
		n.penalties.add(p, points)
	}
}

// PeerScores returns the GossipSub score of each connected peer, as of
// the last five seconds. Peers that sent invalid records have negative scores;
// below -1000 they are graylisted. Empty without pubsub.
func (n *Network) PeerScores() map[peer.ID]float64 {
	n.scoresMu.Lock()
	defer n.scoresMu.Unlock()
	out := make(map[peer.ID]float64, len(n.scores))
	for p, s := range n.scores {
		out[p] = s
	}
	return out
}

// Bootstrap connects to the configured bootstrap peers in parallel, each
// within timeout, and refreshes the routing table. It fails with
// ErrNoBootstrapPeers when peers were configured and none could be reached.
func (n *Network) Bootstrap(ctx context.Context, timeout time.Duration) error {
	if len(n.cfg.Bootstrap) == 0 {
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   int
		errs []error
	)
	for _, ai := range n.cfg.Bootstrap {
		if ai.ID == n.Host.ID() {
			continue
		}
		wg.Add(1)
		go func(ai peer.AddrInfo) {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := n.Host.Connect(cctx, ai)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ai.ID, err))
				return
			}
			ok++
		}(ai)
	}
	wg.Wait()
	if ok == 0 && len(errs) > 0 {
		return fmt.Errorf("%w (tried %d within %s): %w", ErrNoBootstrapPeers, len(errs), timeout, errors.Join(errs...))
	}
	for _, err := range errs {
		n.log.Warn("bootstrap peer unreachable", "err", err)
	}
	if err := n.waitRoutingTable(ctx, timeout); err != nil {
		return err
	}
	if n.cfg.Mode == ModeClient {
		// A light client lives for one command: a routing-table refresh
		// would only compete with its lookups, which find peers anyway.
		return nil
	}
	if err := n.DHT.Bootstrap(ctx); err != nil {
		return fmt.Errorf("p2p: dht bootstrap: %w", err)
	}
	return nil
}

// KeepBootstrapEvery is how often a node checks that it is connected to
// its bootstrap peers, and dials those it lost (a bootstrap node that
// restarted does not dial anyone back by itself) when it is connected to
// none of them (a partition). While it still has one, it redials the
// others only every KeepBootstrapSpare: on a large network a bootstrap
// node's connection manager trims the connections it cannot keep, and
// every node dialling it back within seconds would only be trimmed again.
const (
	KeepBootstrapEvery = 10 * time.Second
	KeepBootstrapSpare = time.Minute
)

// keepBootstrap redials lost bootstrap peers until ctx ends.
func (n *Network) keepBootstrap(ctx context.Context) {
	t := time.NewTicker(KeepBootstrapEvery)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		spare := slices.ContainsFunc(n.cfg.Bootstrap, func(ai peer.AddrInfo) bool {
			return ai.ID != n.Host.ID() && n.Host.Network().Connectedness(ai.ID) == network.Connected
		})
		if spare && tick%int(KeepBootstrapSpare/KeepBootstrapEvery) != 0 {
			continue
		}
		for _, ai := range n.cfg.Bootstrap {
			if ai.ID == n.Host.ID() || n.Host.Network().Connectedness(ai.ID) == network.Connected {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			// Past the swarm's dial backoff, which after a long outage
			// (a partition between regions) grows to minutes: this dial
			// is already spaced KeepBootstrapEvery apart.
			cctx = network.WithForceDirectDial(cctx, "keep bootstrap peers")
			if err := n.Host.Connect(cctx, ai); err == nil {
				n.log.Info("reconnected to bootstrap peer", "peer", ai.ID)
			}
			cancel()
		}
	}
}

// waitRoutingTable waits until identify has told the DHT that at least one
// connected peer is a DHT server, so that the first lookup has somewhere to
// start. A lookup started earlier would find nothing.
func (n *Network) waitRoutingTable(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n.DHT.RoutingTable().Size() == 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: connected, but no peer answered as a gpumesh DHT server within %s", ErrNoBootstrapPeers, timeout)
		case <-tick.C:
		}
	}
	return nil
}

// Ban refuses all connections to and from p from now on and closes any open.
func (n *Network) Ban(p peer.ID) error {
	if err := n.gater.BlockPeer(p); err != nil {
		return fmt.Errorf("p2p: ban %s: %w", p, err)
	}
	if n.PubSub != nil {
		n.PubSub.BlacklistPeer(p)
	}
	return n.Host.Network().ClosePeer(p)
}

// floodBan disconnects p, which floods (guardRPCs), and refuses it for
// FloodBan. A peer banned for good (Ban) stays banned.
func (n *Network) floodBan(ctx context.Context, p peer.ID) {
	if ctx.Err() != nil || slices.Contains(n.gater.ListBlockedPeers(), p) {
		return
	}
	n.log.Warn("peer floods gossip: disconnected and refused", "peer", p, "for", FloodBan)
	if err := n.gater.BlockPeer(p); err != nil {
		return
	}
	_ = n.Host.Network().ClosePeer(p)
	t := time.NewTimer(FloodBan)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		_ = n.gater.UnblockPeer(p)
	}
}

// Refuses reports whether the connection gater refuses p: banned (Ban,
// Config.Banned) or, for a while, cut off for flooding gossip.
func (n *Network) Refuses(p peer.ID) bool { return !n.gater.InterceptPeerDial(p) }

// Banned lists the banned peers.
func (n *Network) Banned() []peer.ID { return n.gater.ListBlockedPeers() }

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
