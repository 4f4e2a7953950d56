package p2p

import (
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// MaxStreamMemory is the most memory one stream, and one peer on one
// protocol, may reserve with the resource manager: a job start's spec and
// checkpoint (36 MiB, node/job) at network.ReservationPriorityHigh.
const MaxStreamMemory = 48 << 20

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

// ClusterProtocol is node/cluster's stream protocol: one TCP connection
// between the jobs of two members of a renter's cluster.
const ClusterProtocol protocol.ID = "/gpumesh/cluster/1.0.0"

// ClusterService is the resource manager's service scope of cluster
// streams (node/cluster), with limits of its own as TunnelService has:
// gloo, NCCL and Ray open many connections between two members.
const ClusterService = "gpumesh.cluster"

// Limits of ClusterService: streams in all and per peer, and the memory
// their flow-control windows may reserve.
const (
	MaxClusterStreams     = 1024
	MaxClusterStreamsPeer = 256
	MaxClusterMemory      = 128 << 20
)

// newResourceManager sizes libp2p's limits for a small daemon: 256 MiB of
// memory and 512 file descriptors in all, scaled from libp2p's defaults,
// with room for MaxStreamMemory on one stream (libp2p's default is 16 MiB).
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
		Service: map[string]rcmgr.ResourceLimits{
			TunnelService:  streamLimits(MaxTunnelStreams, MaxTunnelMemory),
			ClusterService: streamLimits(MaxClusterStreams, MaxClusterMemory),
		},
		ServicePeer: map[string]rcmgr.ResourceLimits{
			TunnelService:  streamLimits(MaxTunnelStreamsPeer, MaxTunnelMemory/4),
			ClusterService: streamLimits(MaxClusterStreamsPeer, MaxClusterMemory/2),
		},
		Protocol: map[protocol.ID]rcmgr.ResourceLimits{
			TunnelProtocol:  streamLimits(MaxTunnelStreams, MaxTunnelMemory),
			ClusterProtocol: streamLimits(MaxClusterStreams, MaxClusterMemory),
		},
		ProtocolPeer: map[protocol.ID]rcmgr.ResourceLimits{
			TunnelProtocol:  streamLimits(MaxTunnelStreamsPeer, MaxTunnelMemory/4),
			ClusterProtocol: streamLimits(MaxClusterStreamsPeer, MaxClusterMemory/2),
		},
	}.Build(scaled)))
}

// streamLimits is a scope of n streams each way and in all, and mem bytes.
func streamLimits(n int, mem int64) rcmgr.ResourceLimits {
	l := rcmgr.LimitVal(n)
	return rcmgr.ResourceLimits{Streams: l, StreamsInbound: l, StreamsOutbound: l, Memory: rcmgr.LimitVal64(mem)}
}
