package p2p

import (
	"slices"
	"strings"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pspb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// dropOwnEchoes is an RPC inspector that strips, from what a peer sends,
// the messages this node authored and the IHAVE advertisements of them.
//
// A node restarted with the same key has a fresh seen-cache, while its
// peers still hold its previous run's messages (heartbeats, asks,
// cancels) for gossip: they advertise them, the node asks for them
// (IWANT), and pubsub rejects each as self-origin and counts it as an
// invalid delivery (P4, -100 in every topic) of the honest peer that
// relayed it. That drives the peer's score below zero for about an hour
// (InvalidMessageDeliveriesDecay): the node neither grafts it into its
// mesh nor accepts its GRAFTs, nor hears its gossip, and one more echo
// would put it below PublishThreshold, out of even the node's flood
// publishes. Such echoes carry nothing the node wants, so they are
// dropped here, before pubsub scores them; a forged message in our name
// fails its signature and is still rejected as before.
//
// IHAVE carries only message IDs: they are the author's peer ID followed
// by its sequence number (pubsub.DefaultMsgIdFn, which newGossipSub sets
// explicitly for this reason).
func dropOwnEchoes(self peer.ID) func(peer.ID, *pubsub.RPC) error {
	own := string(self)
	mine := func(m *pspb.Message) bool { return string(m.GetFrom()) == own }
	ownID := func(id string) bool { return strings.HasPrefix(id, own) }
	return func(_ peer.ID, rpc *pubsub.RPC) error {
		rpc.Publish = slices.DeleteFunc(rpc.Publish, mine)
		if c := rpc.Control; c != nil {
			for _, ih := range c.Ihave {
				ih.MessageIDs = slices.DeleteFunc(ih.MessageIDs, ownID)
			}
		}
		return nil
	}
}
