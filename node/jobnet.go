package node

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// jobDialer is the job controller's network (job.Dialer): the node's
// libp2p host, the DHT to find a supplier it has no address for, and its
// pings to tell a lost supplier from a lost network.
type jobDialer struct{ n *Node }

func (d jobDialer) Connect(ctx context.Context, p peer.ID) error { return d.n.connectPeer(ctx, p) }

// NewStream opens a job stream (session, logs, checkpoints) over a direct
// connection: a relay would cut it after 2 minutes or 128 KiB, so behind
// NAT it first waits for hole punching (p2p.Network.Direct).
func (d jobDialer) NewStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error) {
	if err := d.n.net.Direct(ctx, p); err != nil {
		return nil, fmt.Errorf("%s needs a direct connection: %w", proto, err)
	}
	return d.n.net.Host.NewStream(ctx, p, proto)
}

func (d jobDialer) Online(ctx context.Context, without peer.ID) bool { return d.n.online(ctx, without) }
