package market

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/p2p"
)

const (
	// maxSeen bounds a validator's replay table. When it is full of live
	// records, the ones closest to expiry are forgotten first.
	maxSeen = 100_000
	// maxLimiters bounds the per-author rate limiters a validator keeps.
	maxLimiters = 10_000
)

// OrderValidator is the GossipSub validator of OrdersTopic. Its Check
// accepts asks, bids and cancels, and rejects (so that pubsub penalises the
// forwarding peer) records that are oversized, forged, malformed, not
// signed by the pubsub author, future-dated or replayed (a signer and
// nonce already accepted from a record that has not yet expired). Merely
// expired records, and those of an author over its rate limit, are
// ignored (see p2p.Verdict). It is safe for concurrent use.
type OrderValidator struct {
	now    func() time.Time
	limits *authorLimits
	seen   *replayTable[nonceKey]
}

// nonceKey identifies an order for replay detection: nonces are unique
// per signer across asks, bids and cancels.
type nonceKey struct {
	signer peer.ID
	nonce  uint64
}

// NewOrderValidator returns a validator with now as its clock (time.Now
// if nil) that lets each author publish limit orders per second on
// average, in bursts of up to burst.
func NewOrderValidator(now func() time.Time, limit rate.Limit, burst int) *OrderValidator {
	if now == nil {
		now = time.Now
	}
	return &OrderValidator{now: now, limits: newAuthorLimits(limit, burst), seen: newReplayTable[nonceKey](maxSeen)}
}

// Check validates one message of OrdersTopic published by author and
// returns the *Ask, *Bid or *Cancel it holds; it is a p2p.CheckFunc. It
// remembers every record it accepts, so the same record is accepted once.
func (v *OrderValidator) Check(author peer.ID, data []byte) (any, error) {
	now := v.now()
	if len(data) > max(MaxAskSize, MaxBidSize, MaxCancelSize) {
		return nil, fmt.Errorf("order from %s: %d bytes: %w", author, len(data), p2p.ErrTooLarge)
	}
	if err := v.limits.allow(author, now); err != nil {
		return nil, fmt.Errorf("order from %s: %w", author, err)
	}
	// The payload type picks the record type; it is not trusted: the
	// record type's Open checks the signature over it.
	env, err := record.UnmarshalEnvelope(data)
	if err != nil {
		return nil, fmt.Errorf("order from %s: %w: %v", author, p2p.ErrBadEnvelope, err)
	}
	var (
		val     any
		kind    string
		id      ID
		signer  peer.ID
		key     nonceKey
		expires time.Time
	)
	switch string(env.PayloadType) {
	case AskPayloadType:
		a, err := OpenAsk(data, now)
		if err != nil {
			return nil, err
		}
		val, kind, id, signer, expires = a, "ask", a.ID, a.Supplier, a.Expires()
		key = nonceKey{a.Supplier, a.Nonce}
	case BidPayloadType:
		b, err := OpenBid(data, now)
		if err != nil {
			return nil, err
		}
		val, kind, id, signer, expires = b, "bid", b.ID, b.Renter, b.Expires()
		key = nonceKey{b.Renter, b.Nonce}
	case CancelPayloadType:
		c, err := OpenCancel(data, now)
		if err != nil {
			return nil, err
		}
		val, kind, id, signer = c, "cancel", c.ID, c.Signer
		expires = time.UnixMilli(c.CreatedMs).Add(MaxOrderLifetime)
		key = nonceKey{c.Signer, c.Nonce}
	default:
		return nil, fmt.Errorf("order from %s: %w: payload type %q is not an ask, bid or cancel", author, p2p.ErrBadEnvelope, env.PayloadType)
	}
	if signer != author {
		return nil, fmt.Errorf("%s %s: %w: signed by %s, published by %s", kind, id.Short(), p2p.ErrSignerMismatch, signer, author)
	}
	if !v.seen.add(key, expires, now) {
		return nil, fmt.Errorf("%s %s: %w: nonce %d of %s already seen", kind, id.Short(), ErrReplayed, key.nonce, signer)
	}
	return val, nil
}

// TradeValidator is the GossipSub validator of TradesTopic. Its Check
// accepts trade prints (both signatures of the lease inside checked) and
// rejects forged, malformed, replayed (a second print of one lease while
// the first is recent) and rate-limited ones, as OrderValidator does. It is
// safe for concurrent use.
type TradeValidator struct {
	now    func() time.Time
	limits *authorLimits
	seen   *replayTable[ID] // lease IDs
}

// NewTradeValidator returns a validator with now as its clock (time.Now if
// nil) that lets each author publish limit trade prints per second on
// average, in bursts of up to burst.
func NewTradeValidator(now func() time.Time, limit rate.Limit, burst int) *TradeValidator {
	if now == nil {
		now = time.Now
	}
	return &TradeValidator{now: now, limits: newAuthorLimits(limit, burst), seen: newReplayTable[ID](maxSeen)}
}

// Check validates one message of TradesTopic published by author and
// returns the *TradePrint it holds; it is a p2p.CheckFunc. A lease is
// printed once: a second print of the same lease, even with another
// nonce, is a replay.
func (v *TradeValidator) Check(author peer.ID, data []byte) (any, error) {
	now := v.now()
	if len(data) > MaxTradeSize {
		return nil, fmt.Errorf("trade print from %s: %d bytes: %w", author, len(data), p2p.ErrTooLarge)
	}
	if err := v.limits.allow(author, now); err != nil {
		return nil, fmt.Errorf("trade print from %s: %w", author, err)
	}
	t, err := OpenTradePrint(data, now)
	if err != nil {
		return nil, err
	}
	if t.Supplier != author {
		return nil, fmt.Errorf("trade print %s: %w: signed by %s, published by %s", t.ID.Short(), p2p.ErrSignerMismatch, t.Supplier, author)
	}
	if !v.seen.add(t.Lease.ID, time.UnixMilli(t.CreatedMs).Add(MaxOrderLifetime), now) {
		return nil, fmt.Errorf("trade print %s: %w: lease %s already printed", t.ID.Short(), ErrReplayed, t.Lease.ID.Short())
	}
	return t, nil
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
		return fmt.Errorf("%w: over %g messages/s, burst %d", p2p.ErrRateLimited, float64(l.limit), l.burst)
	}
	return nil
}

// prune forgets the authors whose buckets are full (a fresh limiter is the
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

// replayTable remembers keys until their records expire. At most capacity
// are kept; when full, the keys closest to expiry are forgotten first.
type replayTable[K comparable] struct {
	capacity int

	mu    sync.Mutex
	keys  map[K]struct{}
	order expiryHeap[K] // the same keys, soonest expiry first
}

func newReplayTable[K comparable](capacity int) *replayTable[K] {
	return &replayTable[K]{capacity: capacity, keys: make(map[K]struct{})}
}

// add records key until expires and reports true, or reports false if key
// is already recorded and not yet expired at now.
func (t *replayTable[K]) add(key K, expires, now time.Time) bool {
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

// len is how many keys are recorded.
func (t *replayTable[K]) len() int {
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
