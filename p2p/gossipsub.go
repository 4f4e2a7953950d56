package p2p

import (
	"context"
	"net"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newGossipSub(ctx context.Context, h host.Host, cfg Config, inspect pubsub.PeerScoreInspectFn, appScore func(peer.ID) float64, onFlood func(peer.ID)) (*pubsub.PubSub, error) {
	params, thresholds := scoreParams()
	params.AppSpecificScore = appScore
	opts := append(pubsubOptions(cfg.Network),
		pubsub.WithGossipSubParams(gossipParams()),
		// One signature per record (legacy.go): the node does not sign
		// what it publishes, and checks a pubsub signature only on a
		// message that carries one, which only the version 1 topics read
		// during the transition require (and version 2 topics refuse).
		pubsub.WithMessageSigning(false),
		pubsub.WithStrictSignatureVerification(false),
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
		// author out of message IDs): on version 1 topics the ID is the
		// author and seqno; version 2 topics set theirs (ContentMsgID),
		// which also starts with the author.
		pubsub.WithMessageIdFn(pubsub.DefaultMsgIdFn),
		pubsub.WithAppSpecificRpcInspector(guardRPCs(h.ID(), onFlood)),
		pubsub.WithLogger(cfg.Logger.With("sub", "pubsub")),
	)
	return pubsub.NewGossipSub(ctx, h, opts...)
}

// gossipParams are GossipSub's defaults but for the mesh degree, the
// heartbeat and the gossip factor, which set what an idle node spends.
//
// An idle node's CPU goes to the copies of the records it relays, not to
// checking them: each node receives about two heartbeats a second (the
// heartbeat interval grows with the network, PROTOCOL §7), each arriving
// once from its author (flood publish) and once more from about each of
// its mesh peers, and every copy costs a read, a decode, a wake-up of
// pubsub's loop and, forwarded, a write to each mesh peer. The defaults
// (D 6, Dhi 12: a mesh that peers' grafts grow to twelve) made about
// eight copies of every record; D 4 (Dlo 3, Dhi 6) makes about five. A
// mesh of degree 4 is still connected with high probability, and flood
// publish sends every author's records straight to each of its
// connected topic peers anyway. Ask reach at 20, 50 and 100 nodes is
// measured beside idle CPU in bench/RESULTS.md.
//
// At every heartbeat a node sends IHAVE, listing the message IDs of the
// last three heartbeats, to Dlazy of its topic peers outside the mesh, or
// to GossipFactor of them when that is more: as many RPCs as the messages
// themselves at the default 1 s, 6 and 0.25, for IDs the peers already
// had. Here the heartbeat is 2 s (mesh upkeep and gossip half as often;
// lazy repair within a few seconds still), Dlazy 3 and the factor 0.1:
// the factor is there so that gossip reaches a sybil-heavy neighbourhood,
// which flood publish and peer scoring already cover.
func gossipParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo, p.Dhi = 4, 3, 6
	p.Dout = 1   // < Dlo and ≤ D/2
	p.Dscore = 2 // of the mesh kept by score when pruning
	p.Dlazy = 3
	p.GossipFactor = 0.1
	p.HeartbeatInterval = 2 * time.Second
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
