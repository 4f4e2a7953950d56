package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Networks by name (docs/PROTOCOL.md, "Networks"). A network ID keeps
// gpumesh networks apart: the mainnet, a testnet, a lab. Nodes of
// different networks speak different DHT and GossipSub protocols, so they
// never exchange records even when connected; each announces its network
// in identify's agent version, so that a node that meets one of another
// network says so and drops it.

// DefaultNetwork is the network of a node that names none. It keeps the
// protocol identifiers gpumesh had before networks had names.
const DefaultNetwork = "mainnet"

// MaxNetworkLen bounds a network ID.
const MaxNetworkLen = 32

// ErrWrongNetwork means a peer (a bootstrap peer, typically) is a gpumesh
// node of another network than this node's.
var ErrWrongNetwork = errors.New("peer is on another gpumesh network")

// ValidNetwork checks a network ID: 1 to 32 characters of a-z, 0-9 and
// '-'.
func ValidNetwork(id string) error {
	if id == "" || len(id) > MaxNetworkLen {
		return fmt.Errorf("network %q: want 1 to %d characters", id, MaxNetworkLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("network %q: want only a-z, 0-9 and '-'", id)
		}
	}
	return nil
}

// DHTPrefix is the Kademlia protocol prefix of network id: ProtocolPrefix
// on the mainnet, ProtocolPrefix + "/" + id elsewhere (so the testnet's
// DHT protocol is /gpumesh/testnet/kad/1.0.0).
func DHTPrefix(id string) protocol.ID {
	if id == DefaultNetwork || id == "" {
		return ProtocolPrefix
	}
	return ProtocolPrefix + "/" + protocol.ID(id)
}

// PubSubProtocols are the GossipSub protocol IDs of network id, most
// preferred first: go-libp2p-pubsub's own on the mainnet, each prefixed
// with DHTPrefix(id) elsewhere (e.g. /gpumesh/testnet/meshsub/1.3.0).
// FloodSub is never spoken off the mainnet.
func PubSubProtocols(id string) []protocol.ID {
	if id == DefaultNetwork || id == "" {
		return slices.Clone(pubsub.GossipSubDefaultProtocols)
	}
	var out []protocol.ID
	for _, p := range pubsub.GossipSubDefaultProtocols {
		if p == pubsub.FloodSubID {
			continue
		}
		out = append(out, DHTPrefix(id)+p)
	}
	return out
}

// pubsubOptions are the GossipSub options of network id: the protocols
// of PubSubProtocols, with the features go-libp2p-pubsub gives the
// protocols they prefix.
func pubsubOptions(id string) []pubsub.Option {
	if id == DefaultNetwork || id == "" {
		return nil
	}
	prefix := DHTPrefix(id)
	features := func(f pubsub.GossipSubFeature, p protocol.ID) bool {
		return pubsub.GossipSubDefaultFeatures(f, protocol.ID(strings.TrimPrefix(string(p), string(prefix))))
	}
	return []pubsub.Option{pubsub.WithGossipSubProtocols(PubSubProtocols(id), features)}
}

// MDNSService is the mDNS service name of network id: "gpumesh" on the
// mainnet, "gpumesh-<id>" elsewhere, so that nodes of different networks
// on one LAN do not find each other.
func MDNSService(id string) string {
	if id == DefaultNetwork || id == "" {
		return "gpumesh"
	}
	return "gpumesh-" + id
}

// AgentVersion is what a node of network id announces through identify:
// ua followed by " (network=<id>)".
func AgentVersion(ua, id string) string {
	return ua + " (network=" + id + ")"
}

// maxAgentLen bounds the agent versions ParseAgentNetwork reads; a longer
// one is not a gpumesh node's.
const maxAgentLen = 256

// ParseAgentNetwork reads the network a peer announces in its agent
// version: "gpumesh<anything> (network=<id>)" with a valid id. ok is
// false for anything else (another libp2p program, a gpumesh node from
// before networks had names, garbage): such a peer's network is unknown.
func ParseAgentNetwork(agent string) (id string, ok bool) {
	if len(agent) > maxAgentLen || !strings.HasPrefix(agent, "gpumesh") {
		return "", false
	}
	const open = " (network="
	i := strings.LastIndex(agent, open)
	if i < 0 || !strings.HasSuffix(agent, ")") {
		return "", false
	}
	id = agent[i+len(open) : len(agent)-1]
	if ValidNetwork(id) != nil {
		return "", false
	}
	return id, true
}

// WrongPeer is a peer found to be a gpumesh node of another network.
type WrongPeer struct {
	Peer      peer.ID
	Network   string    // the network it announced
	Bootstrap bool      // it is one of this node's bootstrap peers
	Seen      time.Time // when it was last found
}

// String says what is wrong, naming both networks.
func (w WrongPeer) String(self string) string {
	what := "peer"
	if w.Bootstrap {
		what = "bootstrap peer"
	}
	return fmt.Sprintf("%s %s is on network %s, this node is on %s", what, w.Peer, w.Network, self)
}

// maxWrongPeers bounds the peers of other networks a Network remembers.
const maxWrongPeers = 64

// wrongPeers remembers the peers of other networks met.
type wrongPeers struct {
	mu    sync.Mutex
	peers map[peer.ID]WrongPeer
}

// add records w, and reports whether it was new (so that it is logged
// once).
func (s *wrongPeers) add(w WrongPeer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peers == nil {
		s.peers = map[peer.ID]WrongPeer{}
	}
	old, seen := s.peers[w.Peer]
	if !seen && len(s.peers) >= maxWrongPeers {
		// Forget the oldest: many peers of other networks say no more
		// than the latest.
		var oldest peer.ID
		for id, p := range s.peers {
			if oldest == "" || p.Seen.Before(s.peers[oldest].Seen) {
				oldest = id
			}
		}
		delete(s.peers, oldest)
	}
	s.peers[w.Peer] = w
	return !seen || old.Network != w.Network
}

// forget drops id: it identified as a peer of this network since.
func (s *wrongPeers) forget(id peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.peers, id)
}

func (s *wrongPeers) get(id peer.ID) (WrongPeer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.peers[id]
	return w, ok
}

func (s *wrongPeers) list() []WrongPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WrongPeer, 0, len(s.peers))
	for _, w := range s.peers {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WrongPeer) int {
		if a.Bootstrap != b.Bootstrap {
			if a.Bootstrap {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Peer), string(b.Peer))
	})
	return out
}

// NetworkID is the network this node is on.
func (n *Network) NetworkID() string { return n.cfg.Network }

// WrongNetworkPeers lists the peers found to be gpumesh nodes of another
// network (at most 64, the latest), bootstrap peers first.
func (n *Network) WrongNetworkPeers() []WrongPeer { return n.wrong.list() }

// isBootstrap reports whether id is one of the configured bootstrap peers.
func (n *Network) isBootstrap(id peer.ID) bool {
	return slices.ContainsFunc(n.cfg.Bootstrap, func(ai peer.AddrInfo) bool { return ai.ID == id })
}

// checkPeerNetwork compares the network agent announces with this node's:
// a peer of another network is logged (once), remembered, no longer
// protected as a bootstrap peer, dropped from the routing table and
// disconnected. It reports whether the peer is on another network. A
// peer found on this network (restarted with the right --network) is
// forgotten.
func (n *Network) checkPeerNetwork(id peer.ID, agent string) bool {
	other, ok := ParseAgentNetwork(agent)
	if !ok {
		return false
	}
	if other == n.cfg.Network {
		n.wrong.forget(id)
		return false
	}
	w := WrongPeer{Peer: id, Network: other, Bootstrap: n.isBootstrap(id), Seen: n.cfg.Now()}
	if n.wrong.add(w) {
		n.log.Warn("peer is on another gpumesh network: dropping it; check --bootstrap and --network",
			"peer", id, "peer_network", other, "network", n.cfg.Network, "bootstrap", w.Bootstrap)
	}
	n.Host.ConnManager().Unprotect(id, "bootstrap")
	if n.DHT != nil {
		n.DHT.RoutingTable().RemovePeer(id)
	}
	// Not at once: the peer's identify of this node may still be under
	// way, and it should learn (and say) that this node is on another
	// network too. Meanwhile the two speak no protocol in common that
	// carries records.
	time.AfterFunc(wrongPeerGrace, func() { _ = n.Host.Network().ClosePeer(id) })
	return true
}

// wrongPeerGrace is how long a peer of another network stays connected
// once found, so that it can identify this node in turn; a bootstrap
// peer found on another network is not redialled for wrongPeerRetry (it
// may restart on the right one).
const (
	wrongPeerGrace = 2 * time.Second
	wrongPeerRetry = 10 * time.Minute
)

// watchNetworks checks the network of every peer identify completes with,
// until ctx ends.
func (n *Network) watchNetworks(ctx context.Context) error {
	sub, err := n.Host.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		return fmt.Errorf("p2p: subscribe to identify: %w", err)
	}
	n.wg.Go(func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-sub.Out():
				if !ok {
					return
				}
				ev := e.(event.EvtPeerIdentificationCompleted)
				n.checkPeerNetwork(ev.Peer, ev.AgentVersion)
			}
		}
	})
	return nil
}

// peerNetworkErr checks a peer's agent version (identify has completed
// once Connect returns) and fails with ErrWrongNetwork when it names
// another network, or, when the peerstore has none, when the peer was
// found on another network before.
func (n *Network) peerNetworkErr(id peer.ID) error {
	wrong := false
	if v, err := n.Host.Peerstore().Get(id, "AgentVersion"); err == nil {
		agent, _ := v.(string)
		wrong = n.checkPeerNetwork(id, agent)
	} else {
		_, wrong = n.wrong.get(id)
	}
	if !wrong {
		return nil
	}
	w, _ := n.wrong.get(id)
	return fmt.Errorf("%w: %s", ErrWrongNetwork, w.String(n.cfg.Network))
}
