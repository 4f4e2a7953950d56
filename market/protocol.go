package market

import (
	"math/bits"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
)

// Topics, stream protocols and record parameters of the market. These are
// the source of truth for docs/PROTOCOL.md; changing any of them is a wire
// change: bump the version in the identifier and document it there.
const (
	// OrdersTopic is the GossipSub topic of signed asks, bids and cancels.
	OrdersTopic = "/gpumesh/orders/2.0.0"
	// TradesTopic is the GossipSub topic of signed trade prints.
	TradesTopic = "/gpumesh/trades/2.0.0"

	// QuoteProtocol carries a supplier's Quote straight to the bidder.
	QuoteProtocol protocol.ID = "/gpumesh/quote/1.0.0"
	// BidProtocol carries a renter's signed Bid straight to a supplier it
	// has connected to, beside the bid's gossip on OrdersTopic, so that
	// the supplier's quote does not wait on the gossip's hops and queues.
	BidProtocol protocol.ID = "/gpumesh/bid/1.0.0"
	// LeaseProtocol carries LeaseProposal, LeaseResponse and LeaseConfirm.
	LeaseProtocol protocol.ID = "/gpumesh/lease/1.0.0"
	// BookProtocol serves a node's order book (BookRequest, BookResponse).
	BookProtocol protocol.ID = "/gpumesh/orderbook/1.0.0"

	// Signed-envelope domains, one per record type.
	AskDomain      = "gpumesh-ask-v1"
	BidDomain      = "gpumesh-bid-v1"
	CancelDomain   = "gpumesh-cancel-v1"
	QuoteDomain    = "gpumesh-quote-v1"
	ProposalDomain = "gpumesh-lease-proposal-v1"
	LeaseDomain    = "gpumesh-lease-v1"
	TradeDomain    = "gpumesh-trade-v1"

	// Payload types written into each envelope.
	AskPayloadType      = "/gpumesh/ask/1"
	BidPayloadType      = "/gpumesh/bid/1"
	CancelPayloadType   = "/gpumesh/cancel/1"
	QuotePayloadType    = "/gpumesh/quote/1"
	ProposalPayloadType = "/gpumesh/lease-proposal/1"
	LeasePayloadType    = "/gpumesh/lease/1"
	TradePayloadType    = "/gpumesh/trade/1"

	// Largest signed envelope of each record type, in bytes. A record that
	// embeds another leaves room for it: a proposal holds a quote or an
	// ask, a lease a proposal, a trade print a lease.
	MaxAskSize      = 4 << 10
	MaxBidSize      = 4 << 10
	MaxCancelSize   = 1 << 10
	MaxQuoteSize    = 4 << 10
	MaxProposalSize = 16 << 10
	MaxLeaseSize    = 32 << 10
	MaxTradeSize    = 48 << 10

	// MaxOrderLifetime bounds expires - created of asks, bids, quotes and
	// proposals, and how old a cancel or trade print may be.
	MaxOrderLifetime = time.Hour
	// MinDuration and MaxDuration bound a lease's duration.
	MinDuration = time.Minute
	MaxDuration = 30 * 24 * time.Hour
	// MaxCount bounds the GPUs of one order, quote or lease.
	MaxCount = 256
	// MaxPriceMicros bounds a price per GPU-hour (one million currency
	// units).
	MaxPriceMicros = 1_000_000_000_000
	// MaxAddrs bounds the multiaddrs an ask or bid lists.
	MaxAddrs = 16
	// MaxRegionBytes bounds a region name.
	MaxRegionBytes = 32
	// MaxBidFilterBytes bounds a bid's filter (tighter than what
	// ParseFilter accepts from a local user).
	MaxBidFilterBytes = 512
	// MaxUUIDBytes bounds one GPU UUID in a lease.
	MaxUUIDBytes = 128

	// QuotesPerBidder and QuoteRefill cap the answers (quotes and
	// declines) a supplier sends one bidder: a token bucket per renter of
	// QuotesPerBidder, refilled by one every QuoteRefill (60 a minute,
	// well below the 20 orders a second gossip lets an author publish,
	// and above what one renter bidding back to back, as the benchmark
	// harness does, needs).
	QuotesPerBidder = 60
	QuoteRefill     = time.Second

	// QuoteLife, ProposalLife and BidLife (beyond the renter's quote
	// wait) are how long those records hold. Each is used within seconds
	// of being signed, but its receiver's clock may run up to
	// p2p.ClockSkew ahead of its signer's: each lives 30 s of use plus
	// that skew, so that two peers whose clocks differ by as much as the
	// network tolerates still trade.
	QuoteLife    = 30*time.Second + p2p.ClockSkew
	ProposalLife = 30*time.Second + p2p.ClockSkew
	BidLife      = 30*time.Second + p2p.ClockSkew

	// ConfirmWindow is how long a supplier's reservation waits for the
	// renter's LeaseConfirm before the GPUs are released.
	ConfirmWindow = 5 * time.Second

	// DefaultClaimWindow is a supplier's claim_window when it sets none:
	// the longest a confirmed lease on which no job has started is held.
	DefaultClaimWindow = time.Minute
	// MinClaimWindow is the least claim window a lease gets (unless the
	// supplier's claim_window is lower): time for a renter to start its
	// job over a slow link.
	MinClaimWindow = 30 * time.Second
	// MaxRenterHolds bounds the leases one renter may hold at a supplier
	// with no job started on them: pending (unconfirmed) or confirmed
	// and unclaimed.
	MaxRenterHolds = 2
	// MaxWithdrawals bounds the reservations one renter may give up
	// unconfirmed (LeaseConfirm.release_id) at a supplier within a claim
	// window without penalty: one more bars it as a lapse does.
	MaxWithdrawals = 4

	// ReleasedUnconfirmed is a supplier's LeaseConfirmed.refused for a
	// reservation its renter released (LeaseConfirm.release_id): freed,
	// not confirmed, and no penalty.
	ReleasedUnconfirmed = "released before confirmation"

	// MinReceiptInterval and MaxReceiptInterval bound a proposal's
	// receipt_interval_ms; DefaultReceiptInterval applies when it is 0.
	MinReceiptInterval     = 500
	MaxReceiptInterval     = 300_000
	DefaultReceiptInterval = 10 * time.Second
)

// Terms are the metering terms a lease carries in its proposal, with the
// defaults filled in.
type Terms struct {
	JobSpecHash     []byte        // sha-256 of the job spec; nil: not bound
	ReceiptInterval time.Duration // how often the supplier issues a receipt
	CreditLimit     money.Micros  // how far the supplier runs ahead of payment
}

// Terms gives the lease's metering terms. A zero credit limit means two
// receipt intervals' worth of the lease at its price: the receipt just
// issued and one more, so that a voucher in flight, a tick a little late
// or rounding never pauses a renter that pays.
func (l *Lease) Terms() Terms {
	p := l.Proposal.LeaseProposal
	t := Terms{JobSpecHash: p.JobSpecHash, ReceiptInterval: time.Duration(p.ReceiptIntervalMs) * time.Millisecond, CreditLimit: money.Micros(p.CreditLimitMicros)}
	if t.ReceiptInterval == 0 {
		t.ReceiptInterval = DefaultReceiptInterval
	}
	if t.CreditLimit == 0 {
		t.CreditLimit = money.Micros(AmountMicros(l.PriceMicros, 2*int64(t.ReceiptInterval/time.Millisecond)*int64(l.Count)))
	}
	return t
}

// AmountMicros is what gpuMs GPU-milliseconds cost at priceMicros per
// GPU-hour, rounded down. Metering applies it to cumulative totals, so
// rounding never accumulates.
func AmountMicros(priceMicros, gpuMs int64) int64 {
	hi, lo := bits.Mul64(uint64(priceMicros), uint64(gpuMs))
	q, _ := bits.Div64(hi, lo, 3_600_000)
	return int64(q)
}

// The record types of the market, for p2p.Seal and p2p.Open.
var (
	AskType      = p2p.RecordType{Domain: AskDomain, PayloadType: AskPayloadType, MaxSize: MaxAskSize}
	BidType      = p2p.RecordType{Domain: BidDomain, PayloadType: BidPayloadType, MaxSize: MaxBidSize}
	CancelType   = p2p.RecordType{Domain: CancelDomain, PayloadType: CancelPayloadType, MaxSize: MaxCancelSize}
	QuoteType    = p2p.RecordType{Domain: QuoteDomain, PayloadType: QuotePayloadType, MaxSize: MaxQuoteSize}
	ProposalType = p2p.RecordType{Domain: ProposalDomain, PayloadType: ProposalPayloadType, MaxSize: MaxProposalSize}
	LeaseType    = p2p.RecordType{Domain: LeaseDomain, PayloadType: LeasePayloadType, MaxSize: MaxLeaseSize}
	TradeType    = p2p.RecordType{Domain: TradeDomain, PayloadType: TradePayloadType, MaxSize: MaxTradeSize}
)

// Decline is why a supplier that has the bid's model will not serve it,
// so the renter learns why: the decline field of a Quote. The empty
// Decline is an offer. (The pricing modes an Ask names are the PricingMode
// constants Fixed, Auction and Dynamic.)
type Decline string

// The decline reason codes.
const (
	// DeclineBusy: not enough free GPUs of the model.
	DeclineBusy Decline = "busy"
	// DeclinePrice: the supplier's price is above the bid's maximum; the
	// quote's min_price_micros says what it would take.
	DeclinePrice Decline = "price"
	// DeclineDuration: the bid's duration is outside the supplier's
	// minimum and maximum.
	DeclineDuration Decline = "duration"
	// DeclineMismatch: the supplier has the model but the bid's filter
	// excludes it on something else (region, reputation, ...).
	DeclineMismatch Decline = "mismatch"
)

// DeclineUnclaimed prefixes a lease refusal, never a quote: the renter
// already holds MaxRenterHolds leases at the supplier with no job started
// on them, or it recently let one lapse unconfirmed or go unclaimed.
const DeclineUnclaimed Decline = "unclaimed"

// Valid reports whether d is one of a quote's reason codes (not an offer).
func (d Decline) Valid() bool {
	switch d {
	case DeclineBusy, DeclinePrice, DeclineDuration, DeclineMismatch:
		return true
	}
	return false
}

// validPricing reports whether s is one of the pricing modes.
func validPricing(s string) bool {
	switch PricingMode(s) {
	case Fixed, Auction, Dynamic:
		return true
	}
	return false
}
