package p2p

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Reach is how other peers can reach a node, as its profile states it.
type Reach string

const (
	// ReachUnknown: not yet known (the node just started, or has too few
	// peers to tell).
	ReachUnknown Reach = "unknown"
	// ReachPublic: peers dial the node directly (AutoNAT confirmed a
	// public address).
	ReachPublic Reach = "public"
	// ReachPunchable: behind a NAT that maps a local port to one public
	// port whoever it talks to (endpoint-independent mapping): peers reach
	// it through a relay, and hole punching (DCUtR) upgrades that to a
	// direct connection.
	ReachPunchable Reach = "punchable"
	// ReachRelayOnly: behind a NAT that picks a new public port per
	// destination (symmetric), or with no public address at all: hole
	// punching cannot work, only a relay carries traffic.
	ReachRelayOnly Reach = "relay-only"
)

// Valid reports whether r is one of the reach values.
func (r Reach) Valid() bool {
	switch r {
	case ReachUnknown, ReachPublic, ReachPunchable, ReachRelayOnly:
		return true
	}
	return false
}

// Observation is one public address of this node as other peers saw it
// (identify's observed address), with how many distinct peers (by IP)
// reported it.
type Observation struct {
	Addr      string `json:"addr"`
	Observers int    `json:"observers"`
}

// ReachInfo is what a node knows of its own reachability: the verdict and
// the facts it rests on. The JSON form is what `gpumesh doctor --json`
// and the API show.
type ReachInfo struct {
	// Reach is the verdict, and Reason says why in words.
	Reach  Reach  `json:"reach"`
	Reason string `json:"reason"`
	// Configured is what the operator said (config reachability): auto,
	// public or private.
	Configured Reachability `json:"configured"`
	// Translated is set when a peer saw this node at a public address
	// that is none of its own interfaces' addresses: a NAT translates
	// them, whatever AutoNAT has concluded so far.
	Translated bool `json:"translated"`
	// AutoNAT is AutoNAT's verdict on the node as a whole: "public",
	// "private" or "unknown".
	AutoNAT string `json:"autonat"`
	// Reachable and Unreachable are the addresses AutoNAT v2 confirmed or
	// refuted by dial-backs from peers.
	Reachable   []string `json:"reachable"`
	Unreachable []string `json:"unreachable"`
	// NATTCP and NATUDP are libp2p's view of the NAT's mapping per
	// transport: "endpoint-independent", "endpoint-dependent" or
	// "unknown" (it needs many observers to tell).
	NATTCP string `json:"nat_tcp"`
	NATUDP string `json:"nat_udp"`
	// Observed are this node's addresses as its peers saw them.
	Observed []Observation `json:"observed"`
	// RelayAddrs are the relayed (/p2p-circuit) addresses this node holds
	// reservations for, and Advertised all the addresses it announces.
	RelayAddrs []string `json:"relay_addrs"`
	Advertised []string `json:"advertised"`
}

// reachTracker follows the host's event bus and keeps what ReachInfo
// reports.
type reachTracker struct {
	mu          sync.Mutex
	autonat     network.Reachability
	reachable   []ma.Multiaddr
	unreachable []ma.Multiaddr
	natTCP      network.NATDeviceType
	natUDP      network.NATDeviceType
	relayAddrs  []ma.Multiaddr
	// observed maps a public observed address to the IPs of the peers
	// that reported it.
	observed map[string]map[netip.Addr]struct{}
	// translated: an observed address is none of this host's own.
	translated bool
	// local reports whether an IP is one of this host's interfaces'.
	local func(netip.Addr) bool
	// behindNAT, when set, is called once, and must not block, when an
	// observation first shows this node behind NAT while
	// AutoNAT has no verdict yet.
	behindNAT func()
	changed   chan struct{} // 1-buffered: a reach-relevant event happened
}

func newReachTracker(local func(netip.Addr) bool, behindNAT func()) *reachTracker {
	return &reachTracker{observed: map[string]map[netip.Addr]struct{}{}, changed: make(chan struct{}, 1), local: local, behindNAT: behindNAT}
}

// maxObserved bounds the observed-address table: a peer can report any
// address it likes.
const maxObserved = 64

// run follows the event bus until ctx ends.
func (t *reachTracker) run(ctx context.Context, sub event.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Out():
			if !ok {
				return
			}
			if t.apply(ev) {
				select {
				case t.changed <- struct{}{}:
				default:
				}
			}
		}
	}
}

// apply records ev and reports whether it may change the verdict.
func (t *reachTracker) apply(ev any) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e := ev.(type) {
	case event.EvtLocalReachabilityChanged:
		t.autonat = e.Reachability
	case event.EvtHostReachableAddrsChanged:
		t.reachable, t.unreachable = slices.Clone(e.Reachable), slices.Clone(e.Unreachable)
	case event.EvtNATDeviceTypeChanged:
		if e.TransportProtocol == network.NATTransportTCP {
			t.natTCP = e.NatDeviceType
		} else {
			t.natUDP = e.NatDeviceType
		}
	case event.EvtAutoRelayAddrsUpdated:
		t.relayAddrs = slices.Clone(e.RelayAddrs)
	case event.EvtPeerIdentificationCompleted:
		if !t.observe(e) {
			return false
		}
		if !t.translated && t.local != nil && !t.local(observedIP(e.ObservedAddr)) {
			t.translated = true
			if t.behindNAT != nil && t.autonat == network.ReachabilityUnknown {
				t.behindNAT()
			}
		}
		return true
	default:
		return false
	}
	return true
}

// observe records the address a peer saw this node connect from, when
// both the peer's address and the observed one are public and the
// connection is direct.
func (t *reachTracker) observe(e event.EvtPeerIdentificationCompleted) bool {
	if e.Conn == nil || e.ObservedAddr == nil || relayed(e.Conn) {
		return false
	}
	if !manet.IsPublicAddr(e.ObservedAddr) || !manet.IsPublicAddr(e.Conn.RemoteMultiaddr()) {
		return false
	}
	ip, err := manet.ToIP(e.Conn.RemoteMultiaddr())
	if err != nil {
		return false
	}
	observer, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	key := e.ObservedAddr.String()
	set, ok := t.observed[key]
	if !ok {
		if len(t.observed) >= maxObserved {
			return false
		}
		set = map[netip.Addr]struct{}{}
		t.observed[key] = set
	}
	if _, seen := set[observer.Unmap()]; seen || len(set) >= maxObserved {
		return false
	}
	set[observer.Unmap()] = struct{}{}
	return true
}

// observedIP is a's IP, or the zero Addr.
func observedIP(a ma.Multiaddr) netip.Addr {
	ip, err := manet.ToIP(a)
	if err != nil {
		return netip.Addr{}
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// interfaceIPs reports whether ip is an address of one of this host's
// network interfaces (in its network namespace).
func interfaceIPs(ip netip.Addr) bool {
	addrs, err := manet.InterfaceMultiaddrs()
	if err != nil {
		return true // cannot tell: claim nothing
	}
	return slices.ContainsFunc(addrs, func(a ma.Multiaddr) bool { return observedIP(a) == ip })
}

// relayed reports whether c goes through a relay: a limited connection,
// or one to a /p2p-circuit address.
func relayed(c network.Conn) bool { return c.Stat().Limited || isRelayAddr(c.RemoteMultiaddr()) }

// isRelayAddr reports whether a is a relayed (/p2p-circuit) address.
func isRelayAddr(a ma.Multiaddr) bool {
	if a == nil {
		return false
	}
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// snapshot is the tracker's state and the host's addresses as a
// ReachInfo, with the verdict.
func (t *reachTracker) snapshot(configured Reachability, advertised, all []ma.Multiaddr) ReachInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	info := ReachInfo{
		Configured:  configured,
		Translated:  t.translated,
		AutoNAT:     reachabilityName(t.autonat),
		Reachable:   addrStrings(t.reachable),
		Unreachable: addrStrings(t.unreachable),
		NATTCP:      natName(t.natTCP),
		NATUDP:      natName(t.natUDP),
		RelayAddrs:  addrStrings(t.relayAddrs),
		Advertised:  addrStrings(advertised),
		Observed:    []Observation{},
	}
	for a, set := range t.observed {
		info.Observed = append(info.Observed, Observation{Addr: a, Observers: len(set)})
	}
	slices.SortFunc(info.Observed, func(a, b Observation) int {
		if a.Observers != b.Observers {
			return b.Observers - a.Observers
		}
		return compareStrings(a.Addr, b.Addr)
	})
	info.Reach, info.Reason = classify(info, all)
	return info
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// classify decides the verdict from what the operator, AutoNAT, identify
// and the host's own addresses say:
//   - public when the operator says so, AutoNAT says so, or AutoNAT v2
//     confirmed an address;
//   - relay-only when libp2p found the NAT endpoint-dependent for every
//     transport, or peers saw this node at different ports of one public
//     address (a symmetric NAT picks a new port per destination);
//   - behind NAT (AutoNAT private, relay addresses held, the operator
//     says private, or a peer saw a public address that is none of this
//     node's own), punchable when peers saw one public address and port
//     and it holds a relay slot (unknown until then: hole punching starts
//     from a relayed connection): one observer cannot tell a cone NAT
//     from a symmetric one, so hole punching is tried, and only a spread
//     of ports makes it relay-only; relay-only when no peer saw a public
//     address at all;
//   - unknown until AutoNAT or the observations tell.
func classify(info ReachInfo, all []ma.Multiaddr) (Reach, string) {
	switch {
	case info.Configured == ReachabilityPublic:
		return ReachPublic, "the operator says so (reachability = public): peers dial it directly and it serves as a relay"
	case info.AutoNAT == "public" || len(info.Reachable) > 0:
		return ReachPublic, "AutoNAT: peers dialled this node back on a public address"
	}
	if info.NATTCP == "endpoint-dependent" && info.NATUDP != "endpoint-independent" ||
		info.NATUDP == "endpoint-dependent" && info.NATTCP != "endpoint-independent" {
		return ReachRelayOnly, "the NAT maps each destination to a new port (endpoint-dependent, symmetric): hole punching cannot work, peers reach this node only through relays"
	}
	if spread := portSpread(info.Observed); spread > 1 {
		return ReachRelayOnly, fmt.Sprintf("behind NAT: peers saw this node at %d different ports of one address (symmetric NAT), so hole punching cannot work; only relays reach it", spread)
	}
	private := info.AutoNAT == "private" || len(info.RelayAddrs) > 0 || info.Configured == ReachabilityPrivate || info.Translated
	if !private {
		return ReachUnknown, "AutoNAT has no verdict yet (too few peers have dialled back)"
	}
	publicDirect := slices.ContainsFunc(all, func(a ma.Multiaddr) bool {
		return !isRelayAddr(a) && manet.IsPublicAddr(a)
	})
	// libp2p advertises an observed address only once four peers agree
	// on it, and forgets it once fewer of them stay connected; the
	// observations this node collected still tell a stable mapping.
	switch {
	case publicDirect:
		return ReachPunchable, "behind NAT with a stable public mapping: peers reach it through relays and upgrade to a direct connection by hole punching"
	case len(info.Observed) > 0 && len(info.RelayAddrs) == 0:
		// Hole punching starts from a relayed connection: until the node
		// holds a relay slot, no peer can reach it at all.
		return ReachUnknown, "behind NAT and reserving a relay slot: no peer can reach it until it holds one"
	case agreedObservation(info.Observed):
		return ReachPunchable, "behind NAT with a stable public mapping (several peers saw the same public address and port): peers reach it through relays and upgrade to a direct connection by hole punching"
	case len(info.Observed) > 0:
		return ReachPunchable, fmt.Sprintf("behind NAT; one peer saw this node at %s: one observer cannot tell a cone NAT from a symmetric one, so peers reach it through relays and try hole punching (peers seeing different ports would show a symmetric NAT)", info.Observed[0].Addr)
	}
	return ReachRelayOnly, "behind NAT and no peer has seen a public address of this node: only relays reach it"
}

// portSpread is the largest number of different observed ports seen for
// one public IP and transport: more than one means a symmetric NAT.
func portSpread(obs []Observation) int {
	ports := map[string]map[string]struct{}{}
	for _, o := range obs {
		m, err := ma.NewMultiaddr(o.Addr)
		if err != nil {
			continue
		}
		ip, err := manet.ToIP(m)
		if err != nil {
			continue
		}
		transport, port := "tcp", ""
		if v, err := m.ValueForProtocol(ma.P_TCP); err == nil {
			port = v
		} else if v, err := m.ValueForProtocol(ma.P_UDP); err == nil {
			transport, port = "udp", v
		}
		key := transport + " " + ip.String()
		if ports[key] == nil {
			ports[key] = map[string]struct{}{}
		}
		ports[key][port] = struct{}{}
	}
	most := 0
	for _, set := range ports {
		most = max(most, len(set))
	}
	return most
}

// agreedObservation reports whether at least two peers saw this node at
// the same public address and port.
func agreedObservation(obs []Observation) bool {
	return slices.ContainsFunc(obs, func(o Observation) bool { return o.Observers >= 2 })
}

func reachabilityName(r network.Reachability) string {
	switch r {
	case network.ReachabilityPublic:
		return "public"
	case network.ReachabilityPrivate:
		return "private"
	}
	return "unknown"
}

func natName(t network.NATDeviceType) string {
	switch t {
	case network.NATDeviceTypeEndpointIndependent:
		return "endpoint-independent"
	case network.NATDeviceTypeEndpointDependent:
		return "endpoint-dependent"
	}
	return "unknown"
}

func addrStrings(addrs []ma.Multiaddr) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out
}

// startReach subscribes to the events ReachInfo is made of.
func (n *Network) startReach(ctx context.Context) error {
	var behindNAT func()
	if n.cfg.Reachability == ReachabilityAuto && n.cfg.Mode == ModeServer {
		em, err := n.Host.EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
		if err != nil {
			return fmt.Errorf("p2p: reachability emitter: %w", err)
		}
		n.reachEmitter = em
		behindNAT = func() { n.wg.Go(func() { n.tellBehindNAT(em) }) }
	}
	n.reach = newReachTracker(interfaceIPs, behindNAT)
	sub, err := n.Host.EventBus().Subscribe([]any{
		new(event.EvtLocalReachabilityChanged),
		new(event.EvtHostReachableAddrsChanged),
		new(event.EvtNATDeviceTypeChanged),
		new(event.EvtAutoRelayAddrsUpdated),
		new(event.EvtPeerIdentificationCompleted),
	})
	if err != nil {
		return fmt.Errorf("p2p: subscribe to reachability events: %w", err)
	}
	n.wg.Go(func() { n.reach.run(ctx, sub) })
	n.punch = newPunchClock(time.Now)
	n.Host.Network().Notify(n.punch.notifiee(n))
	return nil
}

// Reach reports this node's reachability and what it rests on.
func (n *Network) Reach() ReachInfo {
	all := n.Host.Addrs()
	// A private host advertises its relay addresses, not the observed
	// public ones; hole punching uses those (AllAddrs), and so does the
	// verdict.
	if h, ok := n.Host.(interface{ AllAddrs() []ma.Multiaddr }); ok {
		all = h.AllAddrs()
	}
	return n.reach.snapshot(n.cfg.Reachability, n.Host.Addrs(), all)
}

// tellBehindNAT tells the host that it is behind NAT, as AutoNAT would,
// once a peer saw it at a public address that is none of its own.
// AutoNAT v1 probes only the public addresses the host advertises, which
// libp2p takes from observations only once four peers agree: in a network
// with one to three public nodes it never concludes, and AutoRelay, which
// starts on AutoNAT's verdict, would reserve no relay slot. AutoNAT's own
// later verdicts still follow.
func (n *Network) tellBehindNAT(em event.Emitter) {
	if err := em.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPrivate}); err != nil {
		n.log.Debug("tell the host it is behind NAT", "err", err)
		return
	}
	n.log.Info("a peer saw this node at a public address none of its own: behind NAT; reserving relay slots")
}

// ReachChanged is signalled (coalesced) whenever something the verdict
// rests on changed; read Reach for the new value.
func (n *Network) ReachChanged() <-chan struct{} { return n.reach.changed }

// PeerConn describes this node's connections to one peer: whether any is
// direct, and the remote addresses.
type PeerConn struct {
	Direct  bool     `json:"direct"`
	Relayed bool     `json:"relayed"`
	Addrs   []string `json:"addrs"`
}

// ConnTo reports how this node is connected to p now.
func (n *Network) ConnTo(p peer.ID) PeerConn {
	pc := PeerConn{Addrs: []string{}}
	for _, c := range n.Host.Network().ConnsToPeer(p) {
		if relayed(c) {
			pc.Relayed = true
		} else {
			pc.Direct = true
		}
		pc.Addrs = append(pc.Addrs, c.RemoteMultiaddr().String())
	}
	return pc
}

// RankAddrs orders addrs (stably, in a new slice) by how likely a peer
// elsewhere reaches this node at them: public direct addresses first,
// then relayed (/p2p-circuit) ones, then private and finally loopback
// ones. Records carry a bounded number of addresses and dialers try only
// the first few, so what a node behind NAT can be reached at comes before
// the LAN addresses nobody outside can dial.
func RankAddrs(addrs []ma.Multiaddr) []ma.Multiaddr {
	rank := func(a ma.Multiaddr) int {
		switch {
		case isRelayAddr(a):
			return 1
		case manet.IsPublicAddr(a):
			return 0
		case manet.IsIPLoopback(a):
			return 3
		}
		return 2
	}
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(x, y ma.Multiaddr) int { return rank(x) - rank(y) })
	return out
}

// Waiting for hole punching (see Direct).
const (
	// directWait is how long one round waits for DCUtR to turn a relayed
	// connection into a direct one: identify over the relay, the CONNECT
	// exchange and the simultaneous dials take a few round trips.
	directWait = 4 * time.Second
	// directRounds is how many relayed connections Direct opens in turn.
	directRounds = 3
)

// Direct makes sure this node has a direct (not relayed) connection to p,
// for what a relay's limits would cut: a job session, its logs and
// checkpoints, a challenge. It connects to p if need be (at the addresses
// the peerstore holds, relayed ones included) and waits while hole
// punching (DCUtR) upgrades a relayed connection. DCUtR runs when a
// relayed connection opens and gives up after three tries, so when a
// round brings no direct connection within directWait, Direct closes the
// relayed connections and connects again, which starts a new round, up to
// directRounds times. A peer behind a symmetric NAT never gets one unless
// one side is public.
func (n *Network) Direct(ctx context.Context, p peer.ID) error {
	for round := 1; ; round++ {
		if n.hasDirect(p) {
			return nil
		}
		if err := n.Host.Connect(network.WithAllowLimitedConn(ctx, "hole punching"), peer.AddrInfo{ID: p}); err != nil {
			return fmt.Errorf("p2p: connect to %s: %w", p, err)
		}
		if err := n.waitDirect(ctx, p, directWait); err != nil {
			return err
		}
		if n.hasDirect(p) {
			return nil
		}
		if round == directRounds {
			return fmt.Errorf("p2p: no direct connection to %s after %d rounds of hole punching (%s each): its NAT, or ours, may not allow one", p, directRounds, directWait)
		}
		n.log.Debug("hole punching made no direct connection; reconnecting through the relay", "peer", p, "round", round)
		for _, c := range n.Host.Network().ConnsToPeer(p) {
			if relayed(c) {
				_ = c.Close()
			}
		}
	}
}

// waitDirect waits, at most d, for a direct connection to p; it fails
// only when ctx ends.
func (n *Network) waitDirect(ctx context.Context, p peer.ID, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !n.hasDirect(p) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("p2p: no direct connection to %s yet: %w", p, ctx.Err())
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// hasDirect reports whether this node has a direct connection to p.
func (n *Network) hasDirect(p peer.ID) bool {
	for _, c := range n.Host.Network().ConnsToPeer(p) {
		if !relayed(c) {
			return true
		}
	}
	return false
}

// punchClock times hole punching per peer: from the first relayed
// connection to the first direct one after it, so that a node can tell
// how long DCUtR took (the API's punch_ms, the NAT benchmark).
type punchClock struct {
	mu      sync.Mutex
	now     func() time.Time
	relayed map[peer.ID]time.Time     // a relayed connection is open, no direct one yet
	took    map[peer.ID]time.Duration // the last relayed-to-direct upgrade
}

// maxPunchPeers bounds each of the clock's tables: every peer that
// connects adds an entry.
const maxPunchPeers = 1024

func newPunchClock(now func() time.Time) *punchClock {
	return &punchClock{now: now, relayed: map[peer.ID]time.Time{}, took: map[peer.ID]time.Duration{}}
}

// connected records a new connection to p; direct says whether p now has
// a direct one.
func (pc *punchClock) connected(p peer.ID, limited, direct bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	start, waiting := pc.relayed[p]
	switch {
	case direct && waiting:
		delete(pc.relayed, p)
		if len(pc.took) >= maxPunchPeers {
			clear(pc.took)
		}
		pc.took[p] = pc.now().Sub(start)
	case limited && !direct && !waiting:
		if len(pc.relayed) >= maxPunchPeers {
			clear(pc.relayed)
		}
		pc.relayed[p] = pc.now()
	}
}

// disconnected forgets a wait for a direct connection to p once no
// connection to it is left.
func (pc *punchClock) disconnected(p peer.ID) {
	pc.mu.Lock()
	delete(pc.relayed, p)
	pc.mu.Unlock()
}

// last is how long the last upgrade of a relayed connection to p to a
// direct one took.
func (pc *punchClock) last(p peer.ID) (time.Duration, bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	d, ok := pc.took[p]
	return d, ok
}

// notifiee feeds the clock from the host's connection events.
func (pc *punchClock) notifiee(n *Network) network.Notifiee {
	return &network.NotifyBundle{
		ConnectedF: func(_ network.Network, c network.Conn) {
			p := c.RemotePeer()
			pc.connected(p, relayed(c), n.hasDirect(p))
		},
		DisconnectedF: func(nw network.Network, c network.Conn) {
			if len(nw.ConnsToPeer(c.RemotePeer())) == 0 {
				pc.disconnected(c.RemotePeer())
			}
		},
	}
}

// PunchTime is how long hole punching took, the last time a relayed
// connection to p became direct (false when that never happened).
func (n *Network) PunchTime(p peer.ID) (time.Duration, bool) { return n.punch.last(p) }
