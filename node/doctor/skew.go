package doctor

import (
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// skewRingSize bounds the clock-skew samples kept: the latest heartbeats
// of a few dozen peers are plenty for a median.
const skewRingSize = 64

// skewMaxAge is how old a sample may be and still count.
const skewMaxAge = 10 * time.Minute

// skewSample is one heartbeat's issued-at time minus the time this node
// received it.
type skewSample struct {
	peer peer.ID
	skew time.Duration
	at   time.Time // when received, by this node's clock
}

// SkewRing keeps the latest skewRingSize samples. It is safe for
// concurrent use: the heartbeat reader adds, the API reads.
type SkewRing struct {
	mu   sync.Mutex
	buf  [skewRingSize]skewSample
	next int
	n    int
}

// Add records that a heartbeat of p, issued at sent by p's clock, arrived
// at received by ours.
func (r *SkewRing) Add(p peer.ID, sent, received time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = skewSample{peer: p, skew: sent.Sub(received), at: received}
	r.next = (r.next + 1) % skewRingSize
	r.n = min(r.n+1, skewRingSize)
}

// SkewSummary is the clock skew of peers against this node: the median
// of their heartbeats' issued-at minus receive time (positive: their
// clocks ahead of ours), over Samples heartbeats from Peers peers.
type SkewSummary struct {
	Median  time.Duration `json:"median"`
	Samples int           `json:"samples"`
	Peers   int           `json:"peers"`
}

// Summary is the median skew of the samples received within skewMaxAge
// of now. Each peer counts with its latest sample only, so that a chatty
// peer does not outvote the others.
func (r *SkewRing) Summary(now time.Time) SkewSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	latest := map[peer.ID]skewSample{}
	samples := 0
	for i := range r.n {
		s := r.buf[i]
		if now.Sub(s.at) > skewMaxAge {
			continue
		}
		samples++
		if l, ok := latest[s.peer]; !ok || s.at.After(l.at) {
			latest[s.peer] = s
		}
	}
	if len(latest) == 0 {
		return SkewSummary{}
	}
	skews := make([]time.Duration, 0, len(latest))
	for _, s := range latest {
		skews = append(skews, s.skew)
	}
	slices.Sort(skews)
	mid := len(skews) / 2
	median := skews[mid]
	if len(skews)%2 == 0 {
		median = (skews[mid-1] + skews[mid]) / 2
	}
	return SkewSummary{Median: median, Samples: samples, Peers: len(latest)}
}
