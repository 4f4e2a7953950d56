package p2p

import (
	"slices"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pspb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The share of one link (LinkAuthorRate, guardRPCs), and what becomes of a
// link that keeps going past it.
const (
	LinkAuthorRate  = 40 // messages a second of one author over one connection, all topics together
	LinkAuthorBurst = 80
	maxLinkBuckets  = 20_000

	FloodDrops  = 400              // messages dropped from one link within FloodWindow that make it a flood
	FloodWindow = time.Minute      // the window FloodDrops counts in
	FloodBan    = 10 * time.Minute // how long a flooding peer is refused
)

// dropCounter counts, per link, the messages guardRPCs dropped in the
// current FloodWindow.
type dropCounter struct {
	mu sync.Mutex
	m  map[peer.ID]*drops
}

type drops struct {
	n     int
	since time.Time
}

func newDropCounter() *dropCounter { return &dropCounter{m: map[peer.ID]*drops{}} }

// add counts n more drops from p at now and reports whether p just went
// past FloodDrops in its window (then its count starts again).
func (c *dropCounter) add(p peer.ID, n int, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.m[p]
	if d == nil || now.Sub(d.since) > FloodWindow {
		if len(c.m) >= maxLinkBuckets {
			for id, old := range c.m {
				if now.Sub(old.since) > FloodWindow {
					delete(c.m, id)
				}
			}
		}
		d = &drops{since: now}
		c.m[p] = d
	}
	d.n += n
	if d.n > FloodDrops {
		delete(c.m, p)
		return true
	}
	return false
}

// guardRPCs is an RPC inspector that strips, from what a peer sends,
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
//
// It also keeps each link to its share (LinkAuthorRate): beyond
// LinkAuthorRate messages a second of one author over one connection, in
// bursts of LinkAuthorBurst, the author's messages from that peer are
// dropped here, unread, before pubsub checks their signatures and queues
// them for validation. An honest relay forwards an author's messages only
// after its own validators passed them, at most at the author's rate
// limits (orders 20/s, trade prints 10/s, heartbeats and attestations
// far fewer): a link past the sum of them is the author flooding, or a
// relay that does not check. Keyed by link, so that forged messages in an
// honest author's name drain only the forger's own bucket.
//
// A link whose messages keep being dropped — more than FloodDrops within
// FloodWindow — is handed to onFlood (when set), once per window: the
// network then disconnects the peer and refuses it for FloodBan, since
// even dropped messages cost their reading.
func guardRPCs(self peer.ID, onFlood func(peer.ID)) func(peer.ID, *pubsub.RPC) error {
	own := string(self)
	links := NewLimits[[2]peer.ID](LinkAuthorRate, LinkAuthorBurst, maxLinkBuckets)
	floods := newDropCounter()
	ownID := func(id string) bool { return strings.HasPrefix(id, own) }
	return func(from peer.ID, rpc *pubsub.RPC) error {
		now := time.Now()
		dropped := 0
		rpc.Publish = slices.DeleteFunc(rpc.Publish, func(m *pspb.Message) bool {
			author := string(m.GetFrom())
			if author == own {
				return true
			}
			if links.Allow([2]peer.ID{from, peer.ID(author)}, now) != nil {
				dropped++
				return true
			}
			return false
		})
		if dropped > 0 && floods.add(from, dropped, now) && onFlood != nil {
			onFlood(from)
		}
		if c := rpc.Control; c != nil {
			for _, ih := range c.Ihave {
				ih.MessageIDs = slices.DeleteFunc(ih.MessageIDs, ownID)
			}
		}
		return nil
	}
}
