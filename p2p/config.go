package p2p

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
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
	// Network is the ID of the gpumesh network to join (ValidNetwork);
	// DefaultNetwork when empty. It scopes the DHT and GossipSub
	// protocols and is announced in identify's agent version.
	Network string
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
	// UserAgent is announced through identify, e.g. "gpumesh/0.1.0",
	// followed by the network (AgentVersion).
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
	// Reachability is what the operator says of this host's
	// reachability: ReachabilityAuto (the default) leaves it to AutoNAT;
	// ReachabilityPublic tells libp2p the host is publicly reachable, so
	// that it serves as a relay at once instead of once enough peers have
	// dialled it back (a network's first bootstrap node has nobody to do
	// that); ReachabilityPrivate says it is behind NAT, so that it
	// reserves relay slots at once.
	Reachability Reachability
	// Host, when set, is the host to run on instead of one New starts:
	// a simulation's in-memory (mocknet) host, whose maker chose its
	// transports, limits and connection manager. Key must be its key.
	// New then ignores ListenAddrs, ConnLow, ConnHigh, Registerer, Relay
	// and Reachability, and the connection gater does not guard Host, so
	// Banned peers are refused by pubsub only. Close closes Host.
	Host host.Host
}

// Reachability is an operator's statement of how peers reach a host.
type Reachability string

const (
	// ReachabilityAuto leaves the verdict to AutoNAT's dial-backs.
	ReachabilityAuto Reachability = "auto"
	// ReachabilityPublic: peers dial the host directly (a bootstrap or
	// relay node with a public address and open port).
	ReachabilityPublic Reachability = "public"
	// ReachabilityPrivate: the host is behind NAT or a firewall; peers
	// reach it through relays and hole punching.
	ReachabilityPrivate Reachability = "private"
)

// ParseReachability parses "auto", "public" or "private"; "" is auto.
func ParseReachability(s string) (Reachability, error) {
	switch r := Reachability(s); r {
	case "":
		return ReachabilityAuto, nil
	case ReachabilityAuto, ReachabilityPublic, ReachabilityPrivate:
		return r, nil
	}
	return "", fmt.Errorf("reachability %q: want auto, public or private", s)
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
	if c.Network == "" {
		c.Network = DefaultNetwork
	}
	if err := ValidNetwork(c.Network); err != nil {
		return fmt.Errorf("p2p: config: %w", err)
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
	r, err := ParseReachability(string(c.Reachability))
	if err != nil {
		return fmt.Errorf("p2p: config: %w", err)
	}
	c.Reachability = r
	c.UserAgent = AgentVersion(c.UserAgent, c.Network)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
