package reputation

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/p2p"
)

// Default rate limit of AttestationValidator: an auditor publishes a
// verdict per challenge and per uptime ping, a few a minute; the burst
// covers a round of pings over many suppliers.
const (
	DefaultAttestationRate  rate.Limit = 2
	DefaultAttestationBurst            = 64
)

const (
	// maxSeen bounds the validator's replay table; when it is full of live
	// entries the ones closest to expiry are forgotten first.
	maxSeen = 100_000
	// maxLimiters bounds the per-author token buckets kept.
	maxLimiters = 10_000
)

// AttestationValidator is the GossipSub validator of AttestationTopic.
// Its Check accepts attestations and rejects (so that pubsub penalises the
// forwarding peer) those that are oversized, forged, malformed, not
// published by their attester, future-dated or replayed (an attester and
// nonce already accepted, within MaxAttestationAge). Expired attestations
// and those of an author over its rate limit are ignored (see
// p2p.Verdict). It is safe for concurrent use.
type AttestationValidator struct {
	now    func() time.Time
	limits *authorLimits
	seen   *replayTable
}

// NewAttestationValidator returns a validator with now as its clock
// (time.Now if nil) that lets each author publish limit attestations per
// second on average, in bursts of up to burst.
func NewAttestationValidator(now func() time.Time, limit rate.Limit, burst int) *AttestationValidator {
	if now == nil {
		now = time.Now
	}
	return &AttestationValidator{now: now, limits: newAuthorLimits(limit, burst), seen: newReplayTable(maxSeen)}
}

// Check validates one message of AttestationTopic published by author and
// returns the *Attestation it holds; it is a p2p.CheckFunc. Cheap checks
// run first: size, the author's rate limit, then OpenAttestation, that
// author is the attester, and replay. It remembers every attestation it
// accepts, so each is accepted once.
func (v *AttestationValidator) Check(author peer.ID, data []byte) (any, error) {
	now := v.now()
	if len(data) > MaxAttestationSize {
		return nil, fmt.Errorf("attestation from %s: %d bytes: %w (limit %d)", author, len(data), p2p.ErrTooLarge, MaxAttestationSize)
	}
	if err := v.limits.allow(author, now); err != nil {
		return nil, fmt.Errorf("attestation from %s: %w", author, err)
	}
	a, err := OpenAttestation(data, now)
	if err != nil {
		return nil, err
	}
	if a.Attester != author {
		return nil, fmt.Errorf("attestation %s: %w: signed by %s, published by %s", a.ID.Short(), p2p.ErrSignerMismatch, a.Attester, author)
	}
	// An attestation is accepted until MaxAttestationAge after its
	// creation (plus skew), so its nonce is remembered that long.
	expires := a.Created().Add(MaxAttestationAge + p2p.ClockSkew)
	if !v.seen.add(nonceKey{a.Attester, a.Nonce}, expires, now) {
		return nil, fmt.Errorf("attestation %s: %w: nonce %d of %s already seen", a.ID.Short(), ErrReplayed, a.Nonce, a.Attester)
	}
	return a, nil
}

// nonceKey identifies an attestation for replay detection.
type nonceKey struct {
	attester peer.ID
	nonce    uint64
}

// authorLimits is a token bucket per author.
type authorLimits struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[peer.ID]*rate.Limiter
}

func newAuthorLimits(limit rate.Limit, burst int) *authorLimits {
	return &authorLimits{limit: limit, burst: burst, m: make(map[peer.ID]*rate.Limiter)}
}

// allow takes one token from author's bucket at now, or reports
// p2p.ErrRateLimited.
func (l *authorLimits) allow(author peer.ID, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.m[author]
	if !ok {
		if len(l.m) >= maxLimiters {
			l.prune(now)
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[author] = lim
	}
	if !lim.AllowN(now, 1) {
		return fmt.Errorf("%w: over %g attestations/s, burst %d", p2p.ErrRateLimited, float64(l.limit), l.burst)
	}
	return nil
}

// prune forgets authors whose buckets are full (a fresh bucket is the
// same) and, if that is not enough, arbitrary others, down to 90% of
// maxLimiters so that the sweep is rare.
func (l *authorLimits) prune(now time.Time) {
	for id, lim := range l.m {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.m, id)
		}
	}
	for id := range l.m {
		if len(l.m) <= maxLimiters*9/10 {
			break
		}
		delete(l.m, id)
	}
}

// replayTable remembers keys until they expire; at most capacity are
// kept, and when full the keys closest to expiry are forgotten first.
type replayTable struct {
	capacity int

	mu    sync.Mutex
	keys  map[nonceKey]struct{}
	order expiryHeap // the same keys, soonest expiry first
}

func newReplayTable(capacity int) *replayTable {
	return &replayTable{capacity: capacity, keys: make(map[nonceKey]struct{})}
}

// add records key until expires and reports true, or reports false if key
// is recorded and not yet expired at now.
func (t *replayTable) add(key nonceKey, expires, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	nowMs := now.UnixMilli()
	for len(t.order) > 0 && t.order[0].expiresMs <= nowMs {
		delete(t.keys, heap.Pop(&t.order).(expiry).key)
	}
	if _, ok := t.keys[key]; ok {
		return false
	}
	for len(t.order) >= t.capacity {
		delete(t.keys, heap.Pop(&t.order).(expiry).key)
	}
	t.keys[key] = struct{}{}
	heap.Push(&t.order, expiry{key: key, expiresMs: expires.UnixMilli()})
	return true
}

type expiry struct {
	key       nonceKey
	expiresMs int64
}

// expiryHeap is a min-heap of keys by expiry (container/heap).
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expiresMs < h[j].expiresMs }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
