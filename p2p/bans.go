package p2p

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/conngater"
)

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
