package market

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/p2p"
)

// Per-author gossip rate limits of OrdersTopic for NewOrderValidator:
// generous for honest nodes (a supplier posts one ask per model every few
// minutes), tight enough to stop floods.
const (
	OrderRate  = rate.Limit(20)
	OrderBurst = 40
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
	limits *p2p.AuthorLimits
	seen   *p2p.ReplayTable[nonceKey]
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
	return &OrderValidator{now: now, limits: p2p.NewAuthorLimits(limit, burst, maxLimiters), seen: p2p.NewReplayTable[nonceKey](maxSeen)}
}

// Check validates one message of OrdersTopic published by author and
// returns the *Ask, *Bid or *Cancel it holds; it is a p2p.CheckFunc. It
// remembers every record it accepts, so the same record is accepted once.
func (v *OrderValidator) Check(author peer.ID, data []byte) (Order, error) {
	now := v.now()
	if len(data) > max(MaxAskSize, MaxBidSize, MaxCancelSize) {
		return nil, fmt.Errorf("order from %s: %d bytes: %w", author, len(data), p2p.ErrTooLarge)
	}
	if err := v.limits.Allow(author, now); err != nil {
		return nil, fmt.Errorf("order from %s: %w", author, err)
	}
	// The payload type picks the record type; it is not trusted: the
	// record type's Open checks the signature over it.
	env, err := record.UnmarshalEnvelope(data)
	if err != nil {
		return nil, fmt.Errorf("order from %s: %w: %v", author, p2p.ErrBadEnvelope, err)
	}
	var (
		val     Order
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
	if !v.seen.Add(key, expires, now) {
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
	limits *p2p.AuthorLimits
	seen   *p2p.ReplayTable[ID] // lease IDs
}

// NewTradeValidator returns a validator with now as its clock (time.Now if
// nil) that lets each author publish limit trade prints per second on
// average, in bursts of up to burst.
func NewTradeValidator(now func() time.Time, limit rate.Limit, burst int) *TradeValidator {
	if now == nil {
		now = time.Now
	}
	return &TradeValidator{now: now, limits: p2p.NewAuthorLimits(limit, burst, maxLimiters), seen: p2p.NewReplayTable[ID](maxSeen)}
}

// Check validates one message of TradesTopic published by author and
// returns the *TradePrint it holds; it is a p2p.CheckFunc. A lease is
// printed once: a second print of the same lease, even with another
// nonce, is a replay.
func (v *TradeValidator) Check(author peer.ID, data []byte) (*TradePrint, error) {
	now := v.now()
	if len(data) > MaxTradeSize {
		return nil, fmt.Errorf("trade print from %s: %d bytes: %w", author, len(data), p2p.ErrTooLarge)
	}
	if err := v.limits.Allow(author, now); err != nil {
		return nil, fmt.Errorf("trade print from %s: %w", author, err)
	}
	t, err := OpenTradePrint(data, now)
	if err != nil {
		return nil, err
	}
	if t.Supplier != author {
		return nil, fmt.Errorf("trade print %s: %w: signed by %s, published by %s", t.ID.Short(), p2p.ErrSignerMismatch, t.Supplier, author)
	}
	if !v.seen.Add(t.Lease.ID, time.UnixMilli(t.CreatedMs).Add(MaxOrderLifetime), now) {
		return nil, fmt.Errorf("trade print %s: %w: lease %s already printed", t.ID.Short(), ErrReplayed, t.Lease.ID.Short())
	}
	return t, nil
}
