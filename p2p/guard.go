package p2p

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Guards shared by the gossip validators of every record type.

// AuthorLimits is a token bucket per gossip author, for validators: an
// author over its rate gets ErrRateLimited. It keeps at most max buckets.
type AuthorLimits = Limits[peer.ID]

// Limits is a token bucket per key (an author; a link and an author). It
// keeps at most max buckets.
type Limits[K comparable] struct {
	limit rate.Limit
	burst int
	max   int

	mu sync.Mutex
	m  map[K]*rate.Limiter
}

// NewAuthorLimits allows each author limit messages a second on average,
// in bursts of up to burst, keeping at most max buckets.
func NewAuthorLimits(limit rate.Limit, burst, max int) *AuthorLimits {
	return NewLimits[peer.ID](limit, burst, max)
}

// NewLimits allows each key limit messages a second on average, in bursts
// of up to burst, keeping at most max buckets.
func NewLimits[K comparable](limit rate.Limit, burst, max int) *Limits[K] {
	return &Limits[K]{limit: limit, burst: burst, max: max, m: make(map[K]*rate.Limiter)}
}

// Allow takes one token from key's bucket at now, or reports
// ErrRateLimited.
func (l *Limits[K]) Allow(key K, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.m[key]
	if !ok {
		if len(l.m) >= l.max {
			l.prune(now)
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[key] = lim
	}
	if !lim.AllowN(now, 1) {
		return fmt.Errorf("%w: over %g messages/s, burst %d", ErrRateLimited, float64(l.limit), l.burst)
	}
	return nil
}

// prune forgets the keys whose buckets are full (a fresh limiter is the
// same) and, if that is not enough, arbitrary others, down to 90% of
// the maximum, so that the sweep is rare.
func (l *Limits[K]) prune(now time.Time) {
	for id, lim := range l.m {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.m, id)
		}
	}
	for id := range l.m {
		if len(l.m) <= l.max*9/10 {
			break
		}
		delete(l.m, id)
	}
}

// ReplayTable remembers keys (a signer and nonce, a record ID) until their
// records expire, so that a validator accepts each record once. At most
// capacity are kept; when full, the keys closest to expiry are forgotten
// first.
type ReplayTable[K comparable] struct {
	capacity int

	mu    sync.Mutex
	keys  map[K]struct{}
	order expiryHeap[K] // the same keys, soonest expiry first
}

// NewReplayTable keeps at most capacity keys.
func NewReplayTable[K comparable](capacity int) *ReplayTable[K] {
	return &ReplayTable[K]{capacity: capacity, keys: make(map[K]struct{})}
}

// Add records key until expires and reports true, or reports false if key
// is already recorded and not yet expired at now.
func (t *ReplayTable[K]) Add(key K, expires, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	nowMs := now.UnixMilli()
	for len(t.order) > 0 && t.order[0].expiresMs <= nowMs {
		delete(t.keys, heap.Pop(&t.order).(expiry[K]).key)
	}
	if _, ok := t.keys[key]; ok {
		return false
	}
	for len(t.order) >= t.capacity {
		delete(t.keys, heap.Pop(&t.order).(expiry[K]).key)
	}
	t.keys[key] = struct{}{}
	heap.Push(&t.order, expiry[K]{key: key, expiresMs: expires.UnixMilli()})
	return true
}

// Len is how many keys are recorded.
func (t *ReplayTable[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys)
}

type expiry[K comparable] struct {
	key       K
	expiresMs int64
}

// expiryHeap is a min-heap of keys by expiry (container/heap).
type expiryHeap[K comparable] []expiry[K]

func (h expiryHeap[K]) Len() int           { return len(h) }
func (h expiryHeap[K]) Less(i, j int) bool { return h[i].expiresMs < h[j].expiresMs }
func (h expiryHeap[K]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap[K]) Push(x any)        { *h = append(*h, x.(expiry[K])) }
func (h *expiryHeap[K]) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
