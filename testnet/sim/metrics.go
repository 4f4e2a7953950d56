package sim

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// gossipMeter measures the gossip of the orders and trades topics: each
// node's validator reports every message it is handed (pubsub drops
// duplicates before validation, so each message once per node, the
// author's own at publish time), and the meter counts them per node and
// times each delivery from the author's publish, by the real monotonic
// clock (which the simulated clock's jumps do not move).
type gossipMeter struct {
	received []atomic.Int64 // per node

	mu    sync.Mutex
	first map[market.ID]time.Time // publish time of each message
	reach map[market.ID]int       // nodes that got it, the author included
	hist  latencyHist
}

func newGossipMeter(nodes int) *gossipMeter {
	return &gossipMeter{received: make([]atomic.Int64, nodes), first: map[market.ID]time.Time{}, reach: map[market.ID]int{}}
}

// observe records that node was handed data.
func (g *gossipMeter) observe(node int, data []byte) {
	now := time.Now()
	g.received[node].Add(1)
	id := market.IDOf(data)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reach[id]++
	t0, ok := g.first[id]
	if !ok {
		g.first[id] = now
		return
	}
	g.hist.add(now.Sub(t0))
}

// messages is every message handed to any node, and how many distinct
// messages were published.
func (g *gossipMeter) messages() (deliveries, published int64) {
	for i := range g.received {
		deliveries += g.received[i].Load()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return deliveries, int64(len(g.first))
}

// meanReach is the mean share of nodes (of nodes) each message reached.
func (g *gossipMeter) meanReach(nodes int) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.reach) == 0 {
		return 0
	}
	sum := 0
	for _, n := range g.reach {
		sum += n
	}
	return float64(sum) / float64(len(g.reach)) / float64(nodes)
}

func (g *gossipMeter) quantile(q float64) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hist.quantile(q)
}

// latencyHist is a histogram of delays in whole milliseconds up to
// histMax, and one bucket beyond.
type latencyHist struct {
	buckets [histMax + 1]int64
	n       int64
}

const histMax = 30_000

func (h *latencyHist) add(d time.Duration) {
	ms := min(max(int(d/time.Millisecond), 0), histMax)
	h.buckets[ms]++
	h.n++
}

// quantile is the least delay (in whole milliseconds, rounded up) at or
// below which a share q of the deliveries came; zero without any.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := int64(q*float64(h.n) + 0.5)
	want = min(max(want, 1), h.n)
	var seen int64
	for ms, c := range h.buckets {
		if seen += c; seen >= want {
			return time.Duration(ms+1) * time.Millisecond
		}
	}
	return histMax * time.Millisecond
}
