package job

import (
	"context"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Dialer is what the Controller needs of the network: it reaches
// suppliers, opens its session, checkpoint and fence streams to them, and
// tells a lost supplier from a lost network. A node wires in its libp2p
// host (finding addresses in the DHT) and its pings; tests wire in
// in-memory hosts.
type Dialer interface {
	// Connect reaches p, finding its addresses when this node does not
	// know them (after a restart).
	Connect(ctx context.Context, p peer.ID) error
	// NewStream opens a stream speaking proto to p.
	NewStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error)
	// Online reports whether this node still reaches the network without
	// the given peer, so that a renter that lost its own connection does
	// not blame its supplier.
	Online(ctx context.Context, without peer.ID) bool
}

// Listener is what the Executor needs of the network: somewhere to serve
// SessionProtocol and CheckpointProtocol. A libp2p host is one.
type Listener interface {
	SetStreamHandler(proto protocol.ID, handler network.StreamHandler)
	RemoveStreamHandler(proto protocol.ID)
}
