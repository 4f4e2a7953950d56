package p2p

import (
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Bounds of the application-specific gossip penalties (Network.Penalize).
const (
	// penaltyHalfLife is how fast a penalty fades: an honest relay that
	// once forwarded a few messages over a cap recovers in minutes.
	penaltyHalfLife = 10 * time.Minute
	// maxPenalty caps one peer's penalty: enough to push its score below
	// the gossip threshold (-100), so it gets and gives no gossip, while
	// only invalid messages (P4) can graylist it (-1000).
	maxPenalty = 200
	// maxPenalised bounds how many peers are tracked; the smallest
	// penalties are forgotten first.
	maxPenalised = 10_000
)

// penalties is a decaying penalty per peer, read by GossipSub as the
// application-specific score (P5): the node adds to it when a relay
// forwards what it must not (orders over their author's cap), which
// pubsub's own counters do not see because such messages are merely
// ignored. It is safe for concurrent use.
type penalties struct {
	now func() time.Time

	mu sync.Mutex
	m  map[peer.ID]penalty
}

type penalty struct {
	points float64
	at     time.Time
}

func newPenalties(now func() time.Time) *penalties {
	return &penalties{now: now, m: make(map[peer.ID]penalty)}
}

// decayed is the penalty's value at now.
func (p penalty) decayed(now time.Time) float64 {
	age := max(now.Sub(p.at), 0)
	return p.points * math.Exp2(-float64(age)/float64(penaltyHalfLife))
}

// add adds points to id's penalty, up to maxPenalty.
func (ps *penalties) add(id peer.ID, points float64) {
	if points <= 0 {
		return
	}
	now := ps.now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.m[id]; !ok && len(ps.m) >= maxPenalised {
		ps.forgetSmallest(now)
	}
	v := min(ps.m[id].decayed(now)+points, maxPenalty)
	ps.m[id] = penalty{points: v, at: now}
}

// forgetSmallest drops the peer with the smallest penalty; the caller
// holds ps.mu.
func (ps *penalties) forgetSmallest(now time.Time) {
	var victim peer.ID
	low := math.Inf(1)
	for id, p := range ps.m {
		if v := p.decayed(now); v < low {
			victim, low = id, v
		}
	}
	delete(ps.m, victim)
}

// score is id's application-specific score: minus its penalty.
func (ps *penalties) score(id peer.ID) float64 {
	now := ps.now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.m[id]
	if !ok {
		return 0
	}
	v := p.decayed(now)
	if v < 0.01 {
		delete(ps.m, id)
		return 0
	}
	return -v
}
