package market

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// SupplierConfig configures a Supplier. Every field without a default
// note is required.
type SupplierConfig struct {
	Net    *p2p.Network
	Key    crypto.PrivKey
	Store  store.Store
	Orders *p2p.Topic[Order]       // the orders topic, joined by the node
	Trades *p2p.Topic[*TradePrint] // the trades topic, joined by the node
	Book   *Book
	Index  *PriceIndex
	Pricer Pricer
	// GPUs are the supplier's devices by model slug.
	GPUs map[string][]string
	// Describe gives the static attributes of the supplier's offer for a
	// model (name, memory, compute capability, region, simulated ...), so
	// that bids' filters can be checked exactly as search checks them.
	Describe func(model string) Offer
	// Region is advertised in asks.
	Region string
	// MinDuration and MaxDuration bound the leases it accepts; 1 min and
	// 30 days when zero.
	MinDuration, MaxDuration time.Duration
	// AskTTL is the lifetime of an ask, renewed at 30% to 50% of it
	// (Supplier.renewal); 10 min when zero.
	AskTTL time.Duration
	// ClaimWindow bounds how long a confirmed lease with no job started
	// on it is held (Lease.ClaimWindow), and how long a renter that let
	// a lease lapse or go unclaimed is refused; DefaultClaimWindow when
	// zero.
	ClaimWindow time.Duration
	// Clock runs the supplier's timers: ask renewal, reposts when a lease
	// ends, claim windows (clock.Real() when nil).
	Clock clock.Clock
	// Now is the time for records (Clock.Now when nil).
	Now func() time.Time
	Log *slog.Logger
	// Metrics counts quotes and leases; nil counts nothing.
	Metrics *metrics.Market
}

// Supplier is the selling side of a node: it posts asks, answers bids
// with quotes over QuoteProtocol, and turns proposals into countersigned
// leases over LeaseProtocol, reserving capacity in its Ledger.
type Supplier struct {
	cfg    SupplierConfig
	self   peer.ID
	quotes *p2p.AuthorLimits // answers per bidder
	// direct limits the bids each peer sends straight (BidProtocol);
	// answered holds the bids answered, so that a bid that comes both
	// straight and by gossip is answered once.
	direct   *p2p.AuthorLimits
	answered *p2p.ReplayTable[ID]
	log      *slog.Logger

	mu      sync.Mutex
	asks    map[string]*Ask      // live own ask per model
	renew   map[string]time.Time // when each live ask is renewed
	unsent  map[string]bool      // models whose live ask could not be gossiped
	changed chan struct{}        // capacity changed: re-post asks
	done    chan struct{}        // closed when Run returns

	// leases owns the supplier's leases: their reservations in the
	// capacity ledger, their records and their renters' holds.
	leases *LeaseBook

	// connWaits holds a token per bid waiting for its author's
	// connection (awaitBidder).
	connWaits chan struct{}
}

// NewSupplier opens the capacity ledger and installs the lease protocol.
func NewSupplier(cfg SupplierConfig) (*Supplier, error) {
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MinDuration == 0 {
		cfg.MinDuration = MinDuration
	}
	if cfg.MaxDuration == 0 {
		cfg.MaxDuration = MaxDuration
	}
	if cfg.AskTTL == 0 {
		cfg.AskTTL = 10 * time.Minute
	}
	if cfg.ClaimWindow == 0 {
		cfg.ClaimWindow = DefaultClaimWindow
	}
	s := &Supplier{
		cfg: cfg, self: cfg.Net.Host.ID(), log: cfg.Log.With("sub", "supplier"),
		asks: map[string]*Ask{}, renew: map[string]time.Time{}, unsent: map[string]bool{}, changed: make(chan struct{}, 1), done: make(chan struct{}),
		quotes: p2p.NewAuthorLimits(rate.Every(QuoteRefill), QuotesPerBidder, maxQuotedBidders),
		direct: p2p.NewAuthorLimits(OrderRate, OrderBurst, maxQuotedBidders), answered: p2p.NewReplayTable[ID](maxAnsweredBids),
		connWaits: make(chan struct{}, MaxBidderWaits),
	}
	var err error
	if s.leases, err = newLeaseBook(cfg, s.CapacityChanged); err != nil {
		return nil, fmt.Errorf("supplier: %w", err)
	}
	p2p.Serve(cfg.Net.Host, LeaseProtocol, s.handleLease)
	p2p.Serve(cfg.Net.Host, LeaseReleaseProtocol, s.handleRelease)
	return s, nil
}

// Ledger is the supplier's capacity ledger.
func (s *Supplier) Ledger() *Ledger { return s.leases.ledger }

// Leases is the owner of the supplier's leases, which the executor of
// its jobs looks leases up in, claims and releases.
func (s *Supplier) Leases() *LeaseBook { return s.leases }

// RunClaims releases confirmed leases on which no job started within
// their claim window, until ctx ends.
func (s *Supplier) RunClaims(ctx context.Context) { s.leases.RunClaims(ctx) }

// CapacityChanged tells the supplier that capacity was released outside a
// lease's natural end (a job ended early), so its asks are re-posted.
func (s *Supplier) CapacityChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// AddrsChanged tells the supplier that the host's addresses changed (a
// node behind NAT got a relay reservation, or lost one), so its asks,
// which carry the addresses renters dial, are re-posted.
func (s *Supplier) AddrsChanged() { s.CapacityChanged() }

// Run posts and renews the supplier's asks until ctx ends, then cancels
// them and waits (at most ShutdownGrace) until a peer's order book shows
// the cancels arrived.
//
// An ask is re-posted when the model's free count or price moves (a lease
// ended, a reservation lapsed, a job ended early), and renewed otherwise
// at a random point between 30% and 50% of its lifetime (renewal); reposts are at least repostGap apart, so capacity
// that churns under an attacker's proposals cannot turn into a gossip
// flood.
func (s *Supplier) Run(ctx context.Context) {
	defer close(s.done)
	for {
		ok := s.postAsks(ctx)
		wait := s.nextPost(ok)
		timer := s.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			s.withdraw()
			return
		case <-timer.C():
		case <-s.changed:
			timer.Stop()
		}
		// Space reposts out, whatever woke us.
		gap := s.cfg.Clock.NewTimer(repostGap)
		select {
		case <-ctx.Done():
			gap.Stop()
			s.withdraw()
			return
		case <-gap.C():
		}
	}
}

// repostGap is the least time between two rounds of posting asks.
const repostGap = 500 * time.Millisecond

// ShutdownGrace bounds how long a stopping supplier waits for its
// cancels to reach a peer.
const ShutdownGrace = 3 * time.Second

// nextPost is how long Run sleeps before looking at its asks again: until
// the next renewal, the next reservation to lapse, or soon when an ask
// could not be gossiped (no topic peer yet, e.g. right after start).
func (s *Supplier) nextPost(allSent bool) time.Duration {
	if !allSent {
		return 2 * time.Second
	}
	now := s.cfg.Now()
	wait := s.cfg.AskTTL / 2
	s.mu.Lock()
	for m := range s.asks {
		if d := s.renew[m].Sub(now); d < wait {
			wait = d
		}
	}
	s.mu.Unlock()
	if next := s.leases.ledger.NextExpiry(); !next.IsZero() {
		// A little after the lapse, so the ledger sees it lapsed.
		if d := next.Sub(now) + 10*time.Millisecond; d < wait {
			wait = d
		}
	}
	return max(wait, 0)
}

// withdraw cancels every live ask and waits, at most ShutdownGrace, until
// the connected peers whose order books listed them no longer do: pubsub
// queues what it publishes and has no flush, so without this the host
// could close with the cancels still queued, and every book would offer a
// supplier that is gone until its asks expire.
func (s *Supplier) withdraw() {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	s.mu.Lock()
	live := make(map[string]ID, len(s.asks))
	for m, a := range s.asks {
		live[m] = a.ID
	}
	s.mu.Unlock()
	holders := s.holding(ctx, live, nil)
	if len(s.cfg.Orders.Peers()) == 0 {
		// Nobody shares the topic to hear the cancels (the last node of
		// a network going down): Publish would wait the whole grace for
		// a peer. The asks are still dropped here.
		cancel()
	}
	ids := s.cancelAsks(ctx)
	if len(ids) == 0 || len(holders) == 0 {
		return
	}
	for {
		if len(s.holding(ctx, ids, holders)) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			s.log.Warn("asks withdrawn, but a peer still listed them at shutdown", "err", ctx.Err())
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// holding asks peers for their order books of the models in ids and
// returns those that list one of the asks in ids (by model): among
// candidates, or else among up to three connected peers that serve
// BookProtocol. A peer that does not answer counts as not holding them.
func (s *Supplier) holding(ctx context.Context, ids map[string]ID, candidates []peer.ID) []peer.ID {
	if len(ids) == 0 {
		return nil
	}
	models := make([]string, 0, len(ids))
	for m := range ids {
		models = append(models, m)
	}
	sort.Strings(models)
	h := s.cfg.Net.Host
	if candidates == nil {
		for _, p := range h.Network().Peers() {
			if len(candidates) == 3 {
				break
			}
			if ok, _ := h.Peerstore().SupportsProtocols(p, BookProtocol); len(ok) > 0 {
				candidates = append(candidates, p)
			}
		}
	}
	var out []peer.ID
	for _, p := range candidates {
		asks, err := QueryBook(ctx, h, p, models, s.cfg.Now())
		if err != nil {
			continue
		}
		for _, a := range asks {
			if a.Supplier == s.self && ids[a.Model] == a.ID {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Stopped waits, at most limit, for Run to have withdrawn its asks.
func (s *Supplier) Stopped(limit time.Duration) {
	select {
	case <-s.done:
	case <-time.After(limit):
	}
}

func (s *Supplier) models() []string {
	ms := make([]string, 0, len(s.cfg.GPUs))
	for m := range s.cfg.GPUs {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	return ms
}

func (s *Supplier) utilization(model string) float64 {
	total := len(s.cfg.GPUs[model])
	if total == 0 {
		return 0
	}
	return float64(total-s.leases.ledger.Free(model)) / float64(total)
}

// postAsks publishes a fresh ask for every model with a list price and
// free GPUs whose live ask is missing, unsent, out of date (free count or
// price moved) or half way through its lifetime, and cancels the ask of a
// model with none free. It reports whether every ask was gossiped.
func (s *Supplier) postAsks(ctx context.Context) bool {
	now := s.cfg.Now()
	allSent := true
	for _, m := range s.models() {
		free := s.leases.ledger.Free(m)
		price, ok := s.cfg.Pricer.AskPrice(m, s.utilization(m), s.cfg.Index.Median(m))
		if !ok {
			continue
		}
		if free == 0 {
			s.cancelAsk(ctx, m)
			continue
		}
		s.mu.Lock()
		cur, unsent, renew := s.asks[m], s.unsent[m], s.renew[m]
		s.mu.Unlock()
		addrs := s.askAddrs()
		if cur != nil && !unsent && int(cur.Count) == free && cur.PriceMicros == price &&
			now.Before(renew) && slices.EqualFunc(cur.Ask.Addrs, addrs, bytes.Equal) {
			continue
		}
		a := &pb.Ask{
			Nonce: nonce(), CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(s.cfg.AskTTL).UnixMilli(),
			Model: m, Count: uint32(free), PriceMicros: price, Region: s.cfg.Region,
			MinDurationS: uint32(s.cfg.MinDuration / time.Second), MaxDurationS: uint32(s.cfg.MaxDuration / time.Second),
			Pricing: string(s.cfg.Pricer.Mode), Simulated: s.cfg.Describe(m).Simulated,
			Addrs: addrs,
		}
		raw, err := SealAsk(a, s.cfg.Key)
		if err != nil {
			s.log.Warn("seal ask", "model", m, "err", err)
			continue
		}
		ask, err := OpenAsk(raw, now)
		if err != nil {
			s.log.Warn("own ask invalid", "model", m, "err", err)
			continue
		}
		// Relays apply the caps the supplier's own book does: an ask it
		// refuses, they would refuse too, and penalise its relay.
		if err := s.cfg.Book.AddAskFrom(ask, ""); err != nil {
			s.log.Warn("own ask refused by the order book; not published", "model", m, "err", err)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = s.cfg.Orders.Publish(pctx, raw)
		cancel()
		failed := err != nil && ctx.Err() == nil
		if failed {
			s.log.Debug("publish ask", "model", m, "err", err)
			allSent = false
		}
		s.mu.Lock()
		s.asks[m], s.unsent[m], s.renew[m] = ask, failed, s.renewal(now)
		s.mu.Unlock()
	}
	return allSent
}

// renewal is when an ask posted at now is renewed if nothing changes: at
// a point drawn uniformly from 30% to 50% of its lifetime (3 to 5 min of
// the default 10). Renewed at exactly half, suppliers that started
// together (a testnet, a farm after a power cut) would renew in step, a
// burst of asks every few minutes; drawn afresh each time, their
// renewals drift apart. It stays well inside the lifetime, so a renewal
// that is lost or late still reaches every book before the ask expires.
func (s *Supplier) renewal(now time.Time) time.Time {
	ttl := s.cfg.AskTTL
	lo := ttl * 3 / 10
	return now.Add(lo + mrand.N(ttl/2-lo+1))
}

// askAddrs are the addresses an ask carries: the host's, at most MaxAddrs
// of them.
func (s *Supplier) askAddrs() [][]byte {
	var out [][]byte
	for _, addr := range p2p.RankAddrs(s.cfg.Net.Host.Addrs()) {
		if len(out) < MaxAddrs {
			out = append(out, addr.Bytes())
		}
	}
	return out
}

// cancelAsk withdraws the live ask of model and returns its ID, or false
// when there was none or the cancel could not be published.
func (s *Supplier) cancelAsk(ctx context.Context, model string) (ID, bool) {
	s.mu.Lock()
	a := s.asks[model]
	delete(s.asks, model)
	delete(s.renew, model)
	delete(s.unsent, model)
	s.mu.Unlock()
	if a == nil {
		return ID{}, false
	}
	now := s.cfg.Now()
	raw, err := SealCancel(&pb.Cancel{Nonce: nonce(), CreatedMs: now.UnixMilli(), OrderId: a.ID[:]}, s.cfg.Key)
	if err != nil {
		s.log.Warn("seal cancel", "err", err)
		return ID{}, false
	}
	if c, err := OpenCancel(raw, now); err == nil {
		s.cfg.Book.Cancel(c)
	}
	if err := s.cfg.Orders.Publish(ctx, raw); err != nil {
		s.log.Debug("publish cancel", "model", model, "err", err)
		return ID{}, false
	}
	return a.ID, true
}

// cancelAsks withdraws every live ask and returns the IDs of those whose
// cancel it published, by model.
func (s *Supplier) cancelAsks(ctx context.Context) map[string]ID {
	sent := map[string]ID{}
	for _, m := range s.models() {
		if id, ok := s.cancelAsk(ctx, m); ok {
			sent[m] = id
		}
	}
	return sent
}

// maxQuotedBidders bounds the bidders whose quote budget is remembered.
const maxQuotedBidders = 4096

// maxAnsweredBids bounds the bids remembered as answered; when it is full
// of live ones, those closest to expiry are forgotten first.
const maxAnsweredBids = 16_384

// ServeBids installs BidProtocol: bids that renters send straight to this
// supplier, beside their gossip (docs/PROTOCOL.md). Each is checked as a
// gossiped bid is (signature, expiry, limits) and must come from its own
// author, over the author's connection; it is then handed to offer, the
// answerers that take gossiped bids, which reports false when they are
// full. A peer may send OrderRate bids a second, in bursts of OrderBurst;
// the answers it gets stay within its quote budget (QuotesPerBidder).
func (s *Supplier) ServeBids(offer func(*Bid) bool) {
	p2p.Serve(s.cfg.Net.Host, BidProtocol, func(st network.Stream) error {
		err := s.handleDirectBid(st, offer)
		if err != nil {
			s.log.Debug("direct bid refused", "from", st.Conn().RemotePeer(), "err", err)
		}
		return err
	})
}

func (s *Supplier) handleDirectBid(st network.Stream, offer func(*Bid) bool) error {
	from, now := st.Conn().RemotePeer(), s.cfg.Now()
	if err := s.direct.Allow(from, now); err != nil {
		return fmt.Errorf("direct bid from %s: %w", from, err)
	}
	raw, err := p2p.ReadRaw(st, MaxBidSize)
	if err != nil {
		return fmt.Errorf("direct bid from %s: %w", from, err)
	}
	b, err := OpenBid(raw, now)
	if err != nil {
		return fmt.Errorf("direct bid from %s: %w", from, err)
	}
	if b.Renter != from {
		return fmt.Errorf("direct bid %s: %w: signed by %s, sent by %s", b.ID.Short(), p2p.ErrSignerMismatch, b.Renter, from)
	}
	if !offer(b) {
		return fmt.Errorf("direct bid %s: %w: the supplier's answerers are full", b.ID.Short(), p2p.ErrRateLimited)
	}
	return nil
}

// HandleBid answers one bid from the order book: at most one quote (the
// cheapest model it can serve) or, when it has a model the bid allows (a
// bid that names no model allows every one) but cannot serve it, one
// decline saying why, so that the renter need not wait for it. Bids that
// name none of its models get no answer, nor do bids whose author has no connection to the
// supplier (after awaitBidder's grace), nor a bidder over its quota of answers.
func (s *Supplier) HandleBid(ctx context.Context, b *Bid) {
	if b.Renter == s.self {
		return
	}
	// Anyone can sign a bid listing anyone's addresses: dialling them
	// would make suppliers flood a third party with connections. The
	// renter connects first (Renter.Rent does), so the quote goes back
	// over its connection, and a bid from a stranger goes unanswered.
	if !s.awaitBidder(ctx, b.Renter) {
		s.log.Debug("bid unanswered: its author is not connected", "bid", b.ID.Short(), "renter", b.Renter)
		return
	}
	// A bid sent straight (ServeBids) also comes by gossip: it is
	// answered once, by whichever copy gets here first.
	if !s.answered.Add(b.ID, b.Expires(), s.cfg.Now()) {
		return
	}
	q := s.quoteFor(b)
	if q == nil {
		return
	}
	if err := s.quotes.Allow(b.Renter, s.cfg.Now()); err != nil {
		s.log.Debug("bid unanswered: its author had its quotes", "bid", b.ID.Short(), "renter", b.Renter, "err", err)
		s.cfg.Metrics.Quote(metrics.Supplier, metrics.QuoteUnanswered)
		return
	}
	now := s.cfg.Now()
	q.Renter, q.BidId = []byte(b.Renter), b.ID[:]
	q.Nonce, q.CreatedMs = nonce(), now.UnixMilli()
	q.ExpiresMs = min(now.Add(QuoteLife).UnixMilli(), b.ExpiresMs+(10*time.Second+p2p.ClockSkew).Milliseconds())
	q.ExpiresMs = max(q.ExpiresMs, now.Add(5*time.Second+p2p.ClockSkew).UnixMilli())
	q.DurationS, q.Region = b.DurationS, s.cfg.Region
	raw, err := SealQuote(q, s.cfg.Key)
	if err != nil {
		s.log.Warn("seal quote", "err", err)
		s.cfg.Metrics.Quote(metrics.Supplier, metrics.QuoteFailed)
		return
	}
	if err := s.sendQuote(ctx, b.Renter, raw); err != nil {
		s.log.Debug("send quote", "to", b.Renter, "err", err)
		s.cfg.Metrics.Quote(metrics.Supplier, metrics.QuoteFailed)
		return
	}
	s.log.Debug("quoted", "bid", b.ID.Short(), "model", q.Model, "price", q.PriceMicros, "decline", q.Decline)
	if q.Decline != "" {
		s.cfg.Metrics.Quote(metrics.Supplier, metrics.QuoteDeclined)
	} else {
		s.cfg.Metrics.Quote(metrics.Supplier, metrics.QuoteSent)
	}
}

// Waiting for a bidder's connection. A renter connects to the suppliers
// it expects quotes from before it publishes its bid, but the bid can
// come round by gossip (through a third node) before the supplier's side
// of that connection is up: the dialler's handshake ends a moment before
// the listener's, and a loaded machine stretches the moment. So a bid
// whose author is not connected waits up to BidderConnectGrace for the
// connection, and at most MaxBidderWaits bids wait at once: a flood of
// strangers' bids holds that many answerers at most, and is then
// dropped at once, as before.
const (
	BidderConnectGrace = 2 * time.Second
	MaxBidderWaits     = 4
)

// awaitBidder reports whether the supplier has, or gets within
// BidderConnectGrace, a connection to the bidder p. It never dials.
func (s *Supplier) awaitBidder(ctx context.Context, p peer.ID) bool {
	if s.connected(p) {
		return true
	}
	select {
	case s.connWaits <- struct{}{}:
		defer func() { <-s.connWaits }()
	default:
		return false
	}
	sub, err := s.cfg.Net.Host.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged))
	if err != nil {
		return false
	}
	defer sub.Close()
	// Subscribed first, checked after: a connection that came in between
	// is seen here, one that comes later as an event.
	if s.connected(p) {
		return true
	}
	t := time.NewTimer(BidderConnectGrace)
	defer t.Stop()
	for {
		select {
		case ev := <-sub.Out():
			if e, ok := ev.(event.EvtPeerConnectednessChanged); ok && e.Peer == p && s.connected(p) {
				return true
			}
		case <-t.C:
			return s.connected(p)
		case <-ctx.Done():
			return false
		}
	}
}

// connected reports whether the supplier has a connection to p: direct,
// or limited (through a relay, as between two peers behind NAT before
// hole punching makes it direct, or for good behind a symmetric NAT).
func (s *Supplier) connected(p peer.ID) bool {
	c := s.cfg.Net.Host.Network().Connectedness(p)
	return c == network.Connected || c == network.Limited
}

// sendQuote writes a quote to renter over an existing connection only:
// it never dials, neither a bid's addresses nor any the peerstore or the
// DHT know for the renter (whose key could have announced a victim's).
// A quote is one small message, so it may go over a limited (relayed)
// connection: a renter behind NAT reaches a supplier behind NAT through a
// relay first (docs/PROTOCOL.md, "Relayed connections").
func (s *Supplier) sendQuote(ctx context.Context, renter peer.ID, raw []byte) error {
	ctx = network.WithNoDial(ctx, "quotes go over the bidder's own connection")
	ctx = network.WithAllowLimitedConn(ctx, string(QuoteProtocol))
	return p2p.Send(ctx, s.cfg.Net.Host, renter, QuoteProtocol, raw)
}

// quoteFor decides the answer to b, using the same filter checks as search.
func (s *Supplier) quoteFor(b *Bid) *pb.Quote {
	named := b.Filter.Models()
	var best, decline *pb.Quote
	for _, m := range s.models() {
		if named != nil && !slices.Contains(named, m) {
			continue
		}
		list, ok := s.cfg.Pricer.AskPrice(m, s.utilization(m), s.cfg.Index.Median(m))
		if !ok {
			continue
		}
		free := s.leases.ledger.Free(m)
		o := s.cfg.Describe(m)
		o.Count, o.Free, o.PriceMicros = len(s.cfg.GPUs[m]), free, money.Micros(list)
		var q *pb.Quote
		switch price, why := s.cfg.Pricer.Quote(PriceInput{
			Model: m, Count: int(b.Count), DurationS: b.DurationS, MaxPrice: b.MaxPriceMicros,
			Utilization: s.utilization(m), Competing: s.competing(m), Index: s.cfg.Index.Median(m),
		}); {
		case !filterAllowsExcept(b.Filter, o, append(RenterKeys, "price", "free", "count")...):
			q = &pb.Quote{Model: m, Decline: string(DeclineMismatch), Free: uint32(free)}
		case free < int(b.Count):
			q = &pb.Quote{Model: m, Decline: string(DeclineBusy), Free: uint32(free)}
		case time.Duration(b.DurationS)*time.Second < s.cfg.MinDuration || time.Duration(b.DurationS)*time.Second > s.cfg.MaxDuration:
			q = &pb.Quote{Model: m, Decline: string(DeclineDuration), Free: uint32(free)}
		case why != "":
			q = &pb.Quote{Model: m, Decline: why, Free: uint32(free), MinPriceMicros: price}
		default:
			o.PriceMicros = money.Micros(price)
			if !filterAllowsExcept(b.Filter, o, RenterKeys...) {
				// Its price, or its free or total count, fails a term.
				why := DeclinePrice
				if !filterAllowsExcept(b.Filter, o, append(RenterKeys, "price")...) {
					why = DeclineMismatch
				}
				q = &pb.Quote{Model: m, Decline: string(why), Free: uint32(free), MinPriceMicros: price}
				break
			}
			if hc := s.leases.overHeldCap(m, int(b.Count)); hc.Over {
				// It would refuse the proposal: too many GPUs are
				// leased with no job on them yet. It says so, and when
				// to retry, rather than look fully booked.
				q = &pb.Quote{Model: m, Decline: string(DeclineBusy), Free: uint32(free),
					Held: uint32(hc.Held), Total: uint32(hc.Total), RetryAfterMs: hc.RetryAfter.Milliseconds()}
				break
			}
			q = &pb.Quote{Model: m, Count: b.Count, PriceMicros: price, Free: uint32(free)}
		}
		if q.Decline == "" {
			if best == nil || q.PriceMicros < best.PriceMicros {
				best = q
			}
		} else if decline == nil {
			decline = q
		}
	}
	if best != nil {
		return best
	}
	return decline
}

// RenterKeys are the filter keys a renter checks itself, from the
// attestations it trusts: a supplier cannot vouch for its own reputation,
// uptime or verification, so it leaves those terms of a bid to the renter.
var RenterKeys = []string{"rep", "uptime", "verified"}

// filterAllowsExcept checks f against o with the terms on keys treated as
// met, so that each kind of failure is reported as such.
func filterAllowsExcept(f Filter, o Offer, keys ...string) bool {
	var rest Filter
	for _, t := range f.Terms {
		if !slices.Contains(keys, t.Key) {
			rest.Terms = append(rest.Terms, t)
		}
	}
	ok, _ := rest.Match(o)
	return ok
}

// competing lists the prices of other suppliers' live asks for model.
func (s *Supplier) competing(model string) []int64 {
	var out []int64
	for _, a := range s.cfg.Book.Asks(model) {
		if a.Supplier != s.self {
			out = append(out, a.PriceMicros)
		}
	}
	return out
}

// handleLease serves LeaseProtocol: proposal in, countersigned lease (or a
// refusal) out, then the renter's confirmation.
func (s *Supplier) handleLease(st network.Stream) error {
	raw, err := p2p.ReadRaw(st, ProposalType.MaxSize)
	if err != nil {
		return err
	}
	refuse := func(format string, args ...any) error {
		reason := fmt.Sprintf(format, args...)
		s.log.Info("lease refused", "renter", st.Conn().RemotePeer(), "reason", reason)
		s.cfg.Metrics.Lease(metrics.Supplier, metrics.LeaseRefused)
		return p2p.WriteMsg(st, &pb.LeaseResponse{Refused: reason})
	}
	now := s.cfg.Now()
	p, err := OpenProposal(raw, now)
	if err != nil {
		return refuse("invalid proposal: %v", err)
	}
	switch {
	case p.Supplier != s.self:
		return refuse("proposal is addressed to %s", p.Supplier)
	case p.Renter != st.Conn().RemotePeer():
		return refuse("proposal signed by %s but sent by %s", p.Renter, st.Conn().RemotePeer())
	case time.Duration(p.DurationS)*time.Second < s.cfg.MinDuration || time.Duration(p.DurationS)*time.Second > s.cfg.MaxDuration:
		return refuse("%s: duration %ds outside %s..%s", DeclineDuration, p.DurationS, s.cfg.MinDuration, s.cfg.MaxDuration)
	}
	// Before anything is reserved: a renter holds GPUs here with no job
	// on them, paying nothing, only within its cap.
	g, decline, why := s.leases.admit(p, now)
	switch {
	case g == nil && decline == "":
		return refuse("%s", why)
	case g == nil:
		return refuse("%s: %s", decline, why)
	}
	defer g.end()
	return s.grant(st, g, raw, now, refuse)
}

// grant checks g's proposal against the supplier's ask and ledger,
// reserves its GPUs, countersigns it and waits for the renter's
// confirmation, each step through g; the caller ends g, which undoes
// what a failed grant left.
func (s *Supplier) grant(st network.Stream, g *leaseGrant, raw []byte, now time.Time, refuse func(string, ...any) error) error {
	p := g.p
	switch {
	case p.Ask != nil && !s.isCurrentAsk(p.Ask) && s.leases.ledger.Free(p.Model) < int(p.Count):
		// Withdrawn because it sold out: say so, as for any busy supplier.
		return refuse("%s: %d of %s free, %d asked; the ask was withdrawn", DeclineBusy, s.leases.ledger.Free(p.Model), p.Model, p.Count)
	case p.Ask != nil && !s.isCurrentAsk(p.Ask):
		return refuse("that ask was replaced or withdrawn; take the current one or bid")
	case s.leases.leaseExists(p.ID):
		return refuse("this proposal already made lease %s", p.ID.Short())
	}
	confirmBy := now.Add(ConfirmWindow)
	gpus, err := g.reserve(confirmBy)
	if err != nil {
		if errors.Is(err, ErrInsufficientCapacity) {
			return refuse("%s: %v", DeclineBusy, err)
		}
		return refuse("reserve: %v", err)
	}
	l := &pb.Lease{
		Proposal: raw, Renter: []byte(p.Renter), LeaseId: p.ID[:],
		StartMs: now.UnixMilli(), EndMs: now.Add(time.Duration(p.DurationS) * time.Second).UnixMilli(),
		Model: p.Model, Count: p.Count, PriceMicros: p.PriceMicros, GpuUuids: gpus,
		ConfirmByMs: confirmBy.UnixMilli(),
	}
	leaseRaw, err := SealLease(l, s.cfg.Key)
	if err != nil {
		return refuse("seal lease: %v", err)
	}
	if err := g.offer(leaseRaw, now); err != nil {
		return refuse("persist lease: %v", err)
	}
	if err := p2p.WriteMsg(st, &pb.LeaseResponse{Lease: leaseRaw}); err != nil {
		return err // the reservation lapses at confirmBy
	}
	// A deadline is real time; confirmBy is by the supplier's clock,
	// which may be off (a skewed machine, or a test's clock).
	_ = st.SetReadDeadline(time.Now().Add(ConfirmWindow))
	var c pb.LeaseConfirm
	err = p2p.ReadMsg(st, 256, &c)
	if err != nil {
		s.log.Info("lease not confirmed; reservation lapses", "lease", p.ID.Short(), "err", err)
		return nil
	}
	switch confirmWord(&c, p.ID) {
	case wordRelease:
		_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
		if err := g.withdraw(); err != nil {
			s.log.Warn("release a reservation at its renter's word", "lease", p.ID.Short(), "err", err)
		}
		if !g.withdrawn {
			return p2p.WriteMsg(st, &pb.LeaseConfirmed{Refused: "the supplier could not free the reservation; it lapses"})
		}
		// The renter's hold is dropped before it hears so, so that it
		// may propose here again at once.
		g.end()
		s.log.Info("reservation released by its renter before confirmation", "lease", p.ID.Short(), "renter", p.Renter)
		return p2p.WriteMsg(st, &pb.LeaseConfirmed{Refused: ReleasedUnconfirmed})
	case wordLapse:
		s.log.Info("lease not confirmed; reservation lapses", "lease", p.ID.Short(), "err", "not a confirmation of this lease")
		return nil
	}
	_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	claimBy, err := g.confirm(&Lease{Lease: l, Proposal: p})
	switch {
	case errors.Is(err, errUnkept):
		s.log.Error("persist confirmed lease", "lease", p.ID.Short(), "err", err)
		return p2p.WriteMsg(st, &pb.LeaseConfirmed{Refused: errUnkept.Error()})
	case err != nil:
		s.log.Warn("confirm came too late", "lease", p.ID.Short(), "err", err)
		return p2p.WriteMsg(st, &pb.LeaseConfirmed{Refused: "the confirmation came after the reservation lapsed"})
	}
	if err := p2p.WriteMsg(st, &pb.LeaseConfirmed{}); err != nil {
		s.log.Debug("tell the renter the lease is kept", "lease", p.ID.Short(), "err", err)
	}
	s.log.Info("leased", "lease", p.ID.Short(), "renter", p.Renter, "model", p.Model, "count", p.Count,
		"price", money.Micros(p.PriceMicros).String(), "claim_by", claimBy.UTC().Format(time.RFC3339))
	s.publishTrade(leaseRaw)
	return nil
}

// What a renter's LeaseConfirm says of the lease offered.
type confirmVerdict uint8

const (
	wordLapse   confirmVerdict = iota // neither, both, or another lease: it lapses, as before release_id
	wordConfirm                       // lease_id is the lease's, release_id empty
	wordRelease                       // release_id is the lease's, lease_id empty
)

// confirmWord reads c, from the renter, as what it says of lease id:
// exactly one of its fields, naming exactly id, confirms or releases it;
// anything else lets the reservation lapse.
func confirmWord(c *pb.LeaseConfirm, id ID) confirmVerdict {
	switch {
	case len(c.ReleaseId) == 0 && isID(c.LeaseId, id):
		return wordConfirm
	case len(c.LeaseId) == 0 && isID(c.ReleaseId, id):
		return wordRelease
	}
	return wordLapse
}

// isID reports whether b, bytes from the network, is id. (Converting
// a shorter slice to an ID would panic.)
func isID(b []byte, id ID) bool { return len(b) == len(id) && ID(b) == id }

// isCurrentAsk reports whether a is the live ask the supplier posts now
// for its model: a replaced (re-priced) or cancelled ask is not honoured.
func (s *Supplier) isCurrentAsk(a *Ask) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.asks[a.Model]
	return cur != nil && cur.ID == a.ID
}

// publishTrade announces a confirmed lease and adds it to the local index.
func (s *Supplier) publishTrade(leaseRaw []byte) {
	now := s.cfg.Now()
	raw, err := SealTradePrint(&pb.TradePrint{Nonce: nonce(), CreatedMs: now.UnixMilli(), Lease: leaseRaw}, s.cfg.Key)
	if err != nil {
		s.log.Warn("seal trade print", "err", err)
		return
	}
	if tp, err := OpenTradePrint(raw, now); err == nil {
		AddTrade(s.cfg.Index, tp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.cfg.Trades.Publish(ctx, raw); err != nil {
		s.log.Debug("publish trade print", "err", err)
	}
}

// AddTrade records a trade print in an index.
func AddTrade(x *PriceIndex, tp *TradePrint) bool { return x.AddPrint(tp) }

// nonce is a random non-zero 64-bit number.
func nonce() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if n := binary.BigEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}
