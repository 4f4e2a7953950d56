package market

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
)

// Errors of Book.FindAsk.
var (
	// ErrAskNotFound is returned, wrapped, when no live ask has the ID.
	ErrAskNotFound = errors.New("no such ask")
	// ErrAmbiguousPrefix is returned, wrapped, when several live asks
	// share an ID prefix.
	ErrAmbiguousPrefix = errors.New("ambiguous ID prefix")
)

// Errors of Book.AddAskFrom and Book.AddBidFrom. The first is stale (an
// honest relay may forward it late); the other two are over a quota.
// Gossip validators ignore all three: the record is valid, but the book
// neither keeps nor forwards it.
var (
	// ErrNotNew: the order is held already, expired, cancelled, or not
	// newer than its supplier's live ask of the model.
	ErrNotNew = fmt.Errorf("order held, expired, cancelled or superseded: %w", p2p.ErrStale)
	// ErrBookFull: the book holds as many orders from the relaying peer
	// as it takes from one source, or is full and the relaying peer is
	// its largest source.
	ErrBookFull = fmt.Errorf("order book full for this source: %w", p2p.ErrOverQuota)
	// ErrAuthorCap: the order's author holds as many live orders as one
	// author may.
	ErrAuthorCap = fmt.Errorf("author over its live order cap: %w", p2p.ErrOverQuota)
	// ErrRelayFlood wraps ErrAuthorCap when the relaying peer itself
	// delivered every order the author holds. An honest relay applies the
	// same cap before forwarding, so it never forwards more live orders
	// of one author than the cap; one that does is flooding, and the node
	// penalises it. (An honest relay can still forward an order over the
	// cap when the author's other orders came here by other paths: that
	// is ErrAuthorCap alone.)
	ErrRelayFlood = fmt.Errorf("relay forwards more live orders of one author than the cap: %w", ErrAuthorCap)
)

// Caps of a Book, so that no one source can fill it: many keys behind one
// connection are one source (the relaying peer), and one key is one
// author whatever connection it uses. Orders the node makes itself are
// from no relay and count only toward the model and author caps.
const (
	// MaxAsksPerModel is how many asks of one model a book holds.
	MaxAsksPerModel = 500
	// MaxAsks is how many asks a book holds in all: model names are free
	// to make up, so the per-model caps alone bound nothing.
	MaxAsks = 2000
	// MaxBids is how many bids a book holds (a bid's filter may name
	// many models, or none).
	MaxBids = 1000
	// MaxAsksPerRelay is how many asks of one model may come through one
	// relaying peer.
	MaxAsksPerRelay = MaxAsksPerModel / 4
	// MaxAsksPerRelayAll is how many asks of all models may come through
	// one relaying peer.
	MaxAsksPerRelayAll = MaxAsks / 4
	// MaxBidsPerRelay is how many bids may come through one relaying peer.
	MaxBidsPerRelay = MaxBids / 4
	// MaxAsksPerSupplier is how many live asks one supplier may have
	// (one per model).
	MaxAsksPerSupplier = 16
	// MaxBidsPerRenter is how many live bids one renter may have: a rent
	// has one out for a few seconds.
	MaxBidsPerRenter = 8
	// sweepEvery bounds how often a full book looks for expired orders
	// to make room, so a flood of refused orders costs little.
	sweepEvery = time.Second
)

// MinIDPrefix is the fewest hex digits FindAsk accepts.
const MinIDPrefix = 8

// Limits on cancel tombstones for orders the book has not seen (the cancel
// arrived before the order, or the order was never gossiped here).
const (
	// pendingCancelTTL is how long such a tombstone is kept: no order
	// lives longer than MaxOrderLifetime, so its order cannot outlast it.
	pendingCancelTTL = MaxOrderLifetime
	// maxPendingCancels bounds how many are kept; the oldest go first.
	maxPendingCancels = 10_000
)

// askKey names a supplier's one live ask per model.
type askKey struct {
	supplier peer.ID
	model    string
}

// cancelKey names a cancelled order together with the cancel's signer: a
// cancel binds only an order by its own signer, so a forged cancel for
// someone else's order cannot mask the author's own.
type cancelKey struct {
	order  ID
	author peer.ID
}

// tombstone remembers a cancelled order until it would have expired, so a
// copy that arrives late over gossip is not added again.
type tombstone struct {
	until time.Time // the order's expiry, or a bound when it was unknown
	known bool      // the order was in the book when it was cancelled
}

// Book is the order book every node keeps: the live asks and bids it has
// heard of over gossip or made itself. A supplier has at most one live ask
// per model; a newer ask replaces the older. Bids are indexed under each
// model their filter allows, so a supplier looks up only the bids that
// could concern its GPUs.
//
// Orders past their expiry are never returned, even before GC removes
// them.
//
// The book is capped per model and in all, per relaying peer (per model
// and in all), and per author (see the Max constants). When a model's
// asks, all asks, or the bids are full, a new order makes room by
// evicting (among that model's asks, or all) the oldest ask whose
// supplier's profile does not list its GPUs, else the oldest order of
// the largest relaying source, unless that source is the new order's
// own: then the new order is refused. With a Trust (WithBookTrust), an ask is listed (returned by
// Asks, Ask and FindAsk, so served to renters and priced against) only
// while its supplier's valid profile has at least that many GPUs of the
// model; unlisted asks are held, within the caps, and listed once the
// profile arrives. A Book is safe for concurrent use.
type Book struct {
	now   func() time.Time
	trust Trust // nil: every ask is listed

	mu         sync.RWMutex
	asks       map[ID]*Ask
	askByOwner map[askKey]ID           // (supplier, model) → its live ask
	asksModel  map[string]map[ID]*Ask  // model → asks
	bids       map[ID]*Bid             // all bids
	bidsModel  map[string]map[ID]*Bid  // model → bids whose filter lists it
	bidsAny    map[ID]*Bid             // bids whose filter names no model list
	cancelled  map[cancelKey]tombstone // cancelled orders
	pending    int                     // tombstones with known == false

	from       map[ID]peer.ID             // order -> the peer that relayed it ("" for the node's own)
	askRelays  map[string]map[peer.ID]int // model -> relay -> asks held
	askRelayed map[peer.ID]int            // relay -> asks held, all models
	askAuthors map[peer.ID]int            // supplier -> asks held
	askVia     map[authorRelay]int        // (supplier, relay) -> asks held
	bidRelays  map[peer.ID]int            // relay -> bids held
	bidAuthors map[peer.ID]int            // renter -> bids held
	bidVia     map[authorRelay]int        // (renter, relay) -> bids held
	lastSweep  time.Time
}

// authorRelay names the orders of one author that one relay delivered.
type authorRelay struct{ author, relay peer.ID }

// BookOption configures a Book.
type BookOption func(*Book)

// WithBookTrust lists an ask only while t says its supplier's profile has
// the GPUs it offers. Without it every ask is listed: for books built
// from asks another node already screened, and tests.
func WithBookTrust(t Trust) BookOption { return func(b *Book) { b.trust = t } }

// NewBook returns an empty Book that reads the time from now (time.Now
// when nil).
func NewBook(now func() time.Time, opts ...BookOption) *Book {
	if now == nil {
		now = time.Now
	}
	b := &Book{
		now:        now,
		asks:       make(map[ID]*Ask),
		askByOwner: make(map[askKey]ID),
		asksModel:  make(map[string]map[ID]*Ask),
		bids:       make(map[ID]*Bid),
		bidsModel:  make(map[string]map[ID]*Bid),
		bidsAny:    make(map[ID]*Bid),
		cancelled:  make(map[cancelKey]tombstone),
		from:       make(map[ID]peer.ID),
		askRelays:  make(map[string]map[peer.ID]int),
		askRelayed: make(map[peer.ID]int),
		askAuthors: make(map[peer.ID]int),
		askVia:     make(map[authorRelay]int),
		bidRelays:  make(map[peer.ID]int),
		bidAuthors: make(map[peer.ID]int),
		bidVia:     make(map[authorRelay]int),
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

// listed reports whether ask a is shown: its supplier's profile has the
// GPUs it offers.
func (b *Book) listed(a *Ask) bool {
	return b.trust == nil || b.trust.ProfileHas(a.Supplier, a.Model, nil, int(a.Count))
}

// live reports whether an order expiring at expiresMs is live at now.
func live(expiresMs int64, now time.Time) bool {
	return now.UnixMilli() < expiresMs
}

// newer reports whether an order made at (created, nonce) supersedes one
// made at (oldCreated, oldNonce): a later creation time wins, then a
// higher nonce.
func newer(created int64, nonce uint64, oldCreated int64, oldNonce uint64) bool {
	if created != oldCreated {
		return created > oldCreated
	}
	return nonce > oldNonce
}

// AddAsk adds a validated ask the node made or fetched itself (from no
// relay) and reports whether the book took it; see AddAskFrom.
func (b *Book) AddAsk(a *Ask) bool { return b.AddAskFrom(a, "") == nil }

// AddAskFrom adds a validated ask relayed by from ("" for none). A
// supplier has one live ask per model: a newer ask (later CreatedMs, then
// higher Nonce) replaces the older one, in its place. An ask is refused
// with ErrNotNew when it is expired, already in the book, cancelled, or
// not newer than the supplier's live ask of the model, and with
// ErrAuthorCap or ErrBookFull when over a cap (see Book).
func (b *Book) AddAskFrom(a *Ask, from peer.ID) error {
	if a == nil || a.Ask == nil {
		return fmt.Errorf("ask: %w", p2p.ErrMalformed)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !live(a.ExpiresMs, now) || b.isCancelled(a.ID, a.Supplier, now) {
		return fmt.Errorf("ask %s: %w", a.ID.Short(), ErrNotNew)
	}
	if _, dup := b.asks[a.ID]; dup {
		return fmt.Errorf("ask %s: %w", a.ID.Short(), ErrNotNew)
	}
	key := askKey{supplier: a.Supplier, model: a.Model}
	if oldID, ok := b.askByOwner[key]; ok {
		old := b.asks[oldID]
		if live(old.ExpiresMs, now) && !newer(a.CreatedMs, a.Nonce, old.CreatedMs, old.Nonce) {
			return fmt.Errorf("ask %s: %w", a.ID.Short(), ErrNotNew)
		}
		b.removeAsk(old)
	} else if err := b.roomForAsk(a, from, now); err != nil {
		return fmt.Errorf("ask %s of %s via %s: %w", a.ID.Short(), a.Supplier, from, err)
	}
	if a.Received.IsZero() {
		a.Received = now
	}
	b.asks[a.ID] = a
	b.askByOwner[key] = a.ID
	m := b.asksModel[a.Model]
	if m == nil {
		m = make(map[ID]*Ask)
		b.asksModel[a.Model] = m
	}
	m[a.ID] = a
	b.from[a.ID] = from
	b.askAuthors[a.Supplier]++
	b.askVia[authorRelay{a.Supplier, from}]++
	if b.askRelays[a.Model] == nil {
		b.askRelays[a.Model] = make(map[peer.ID]int)
	}
	b.askRelays[a.Model][from]++
	b.askRelayed[from]++
	return nil
}

// roomForAsk checks the caps for a new ask, evicting another when the
// model is full; the caller holds b.mu. A full book first drops its
// expired orders.
func (b *Book) roomForAsk(a *Ask, from peer.ID, now time.Time) error {
	err := b.askRoom(a, from)
	if err != nil && b.sweep(now) {
		err = b.askRoom(a, from)
	}
	return err
}

func (b *Book) askRoom(a *Ask, from peer.ID) error {
	switch {
	case b.askAuthors[a.Supplier] >= MaxAsksPerSupplier:
		return authorCapErr(b.askVia[authorRelay{a.Supplier, from}] >= MaxAsksPerSupplier)
	case from != "" && b.askRelays[a.Model][from] >= MaxAsksPerRelay:
		return ErrBookFull
	case from != "" && b.askRelayed[from] >= MaxAsksPerRelayAll:
		return ErrBookFull
	}
	// A full model gives up one of its asks; a full book, one of any.
	if len(b.asksModel[a.Model]) >= MaxAsksPerModel {
		victim := b.askVictim(a, from, b.asksModel[a.Model], b.askRelays[a.Model])
		if victim == nil {
			return ErrBookFull
		}
		b.removeAsk(victim)
	} else if len(b.asks) >= MaxAsks {
		victim := b.askVictim(a, from, b.asks, b.askRelayed)
		if victim == nil {
			return ErrBookFull
		}
		b.removeAsk(victim)
	}
	return nil
}

// askVictim picks the ask of asks (those of a's model, or all) that a
// makes room for: the oldest unlisted one, else (only for a listed a)
// the oldest of the largest relaying source by relays other than a's
// own; nil when there is none. The caller holds b.mu.
func (b *Book) askVictim(a *Ask, from peer.ID, asks map[ID]*Ask, relays map[peer.ID]int) *Ask {
	var victim *Ask
	older := func(x *Ask) bool {
		return victim == nil || x.CreatedMs < victim.CreatedMs || x.CreatedMs == victim.CreatedMs && compareIDs(x.ID, victim.ID) < 0
	}
	for _, x := range asks {
		if !b.listed(x) && older(x) {
			victim = x
		}
	}
	if victim != nil || !b.listed(a) {
		return victim
	}
	largest := largestSource(relays)
	if largest == "" || largest == from {
		return nil
	}
	for _, x := range asks {
		if b.from[x.ID] == largest && older(x) {
			victim = x
		}
	}
	return victim
}

// authorCapErr is ErrRelayFlood when the relay itself delivered the
// author's whole cap, else ErrAuthorCap.
func authorCapErr(flood bool) error {
	if flood {
		return ErrRelayFlood
	}
	return ErrAuthorCap
}

// largestSource is the relay holding the most orders in counts, ignoring
// the node's own (""); "" when there is none.
func largestSource(counts map[peer.ID]int) peer.ID {
	var best peer.ID
	n := 0
	for p, c := range counts {
		if p != "" && (c > n || c == n && p < best) {
			best, n = p, c
		}
	}
	return best
}

// sweep drops expired orders, at most once per sweepEvery, and reports
// whether it ran; the caller holds b.mu.
func (b *Book) sweep(now time.Time) bool {
	if now.Sub(b.lastSweep) < sweepEvery && !now.Before(b.lastSweep) {
		return false
	}
	b.lastSweep = now
	b.dropExpired(now)
	return true
}

// dropExpired removes expired asks and bids and returns how many; the
// caller holds b.mu.
func (b *Book) dropExpired(now time.Time) (removed int) {
	for _, a := range b.asks {
		if !live(a.ExpiresMs, now) {
			b.removeAsk(a)
			removed++
		}
	}
	for _, x := range b.bids {
		if !live(x.ExpiresMs, now) {
			b.removeBid(x)
			removed++
		}
	}
	return removed
}

// removeAsk drops a from every index; the caller holds b.mu.
func (b *Book) removeAsk(a *Ask) {
	if _, ok := b.asks[a.ID]; !ok {
		return
	}
	from := b.from[a.ID]
	delete(b.from, a.ID)
	decrement(b.askAuthors, a.Supplier)
	decrementVia(b.askVia, authorRelay{a.Supplier, from})
	decrement(b.askRelayed, from)
	if r := b.askRelays[a.Model]; r != nil {
		decrement(r, from)
		if len(r) == 0 {
			delete(b.askRelays, a.Model)
		}
	}
	delete(b.asks, a.ID)
	key := askKey{supplier: a.Supplier, model: a.Model}
	if b.askByOwner[key] == a.ID {
		delete(b.askByOwner, key)
	}
	if m := b.asksModel[a.Model]; m != nil {
		delete(m, a.ID)
		if len(m) == 0 {
			delete(b.asksModel, a.Model)
		}
	}
}

// decrement lowers counts[k], forgetting it at zero.
func decrement(counts map[peer.ID]int, k peer.ID) {
	if counts[k] <= 1 {
		delete(counts, k)
		return
	}
	counts[k]--
}

// decrementVia is decrement for counts per author and relay.
func decrementVia(counts map[authorRelay]int, k authorRelay) {
	if counts[k] <= 1 {
		delete(counts, k)
		return
	}
	counts[k]--
}

// AddBid adds a validated bid from no relay and reports whether the book
// took it; see AddBidFrom.
func (b *Book) AddBid(x *Bid) bool { return b.AddBidFrom(x, "") == nil }

// AddBidFrom adds a validated bid relayed by from ("" for none). The bid
// is indexed under each model its filter allows (Filter.Models), or under
// all models when the filter names none. An expired, duplicate or
// cancelled bid is refused with ErrNotNew, and one over a cap with
// ErrAuthorCap or ErrBookFull (see Book).
func (b *Book) AddBidFrom(x *Bid, from peer.ID) error {
	if x == nil || x.Bid == nil {
		return fmt.Errorf("bid: %w", p2p.ErrMalformed)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !live(x.ExpiresMs, now) || b.isCancelled(x.ID, x.Renter, now) {
		return fmt.Errorf("bid %s: %w", x.ID.Short(), ErrNotNew)
	}
	if _, dup := b.bids[x.ID]; dup {
		return fmt.Errorf("bid %s: %w", x.ID.Short(), ErrNotNew)
	}
	err := b.bidRoom(x, from)
	if err != nil && b.sweep(now) {
		err = b.bidRoom(x, from)
	}
	if err != nil {
		return fmt.Errorf("bid %s of %s via %s: %w", x.ID.Short(), x.Renter, from, err)
	}
	b.bids[x.ID] = x
	b.from[x.ID] = from
	b.bidAuthors[x.Renter]++
	b.bidVia[authorRelay{x.Renter, from}]++
	b.bidRelays[from]++
	models := x.Filter.Models()
	if models == nil {
		b.bidsAny[x.ID] = x
		return nil
	}
	for _, model := range models {
		m := b.bidsModel[model]
		if m == nil {
			m = make(map[ID]*Bid)
			b.bidsModel[model] = m
		}
		m[x.ID] = x
	}
	return nil
}

// bidRoom checks the caps for a new bid, evicting the oldest bid of the
// largest other relaying source when the book is full; the caller holds
// b.mu.
func (b *Book) bidRoom(x *Bid, from peer.ID) error {
	switch {
	case b.bidAuthors[x.Renter] >= MaxBidsPerRenter:
		return authorCapErr(b.bidVia[authorRelay{x.Renter, from}] >= MaxBidsPerRenter)
	case from != "" && b.bidRelays[from] >= MaxBidsPerRelay:
		return ErrBookFull
	case len(b.bids) < MaxBids:
		return nil
	}
	largest := largestSource(b.bidRelays)
	if largest == "" || largest == from {
		return ErrBookFull
	}
	var victim *Bid
	for _, y := range b.bids {
		if b.from[y.ID] == largest && (victim == nil || y.CreatedMs < victim.CreatedMs || y.CreatedMs == victim.CreatedMs && compareIDs(y.ID, victim.ID) < 0) {
			victim = y
		}
	}
	if victim == nil {
		return ErrBookFull
	}
	b.removeBid(victim)
	return nil
}

// removeBid drops x from every index; the caller holds b.mu.
func (b *Book) removeBid(x *Bid) {
	if _, ok := b.bids[x.ID]; !ok {
		return
	}
	decrement(b.bidAuthors, x.Renter)
	decrementVia(b.bidVia, authorRelay{x.Renter, b.from[x.ID]})
	decrement(b.bidRelays, b.from[x.ID])
	delete(b.from, x.ID)
	delete(b.bids, x.ID)
	delete(b.bidsAny, x.ID)
	for _, model := range x.Filter.Models() {
		if m := b.bidsModel[model]; m != nil {
			delete(m, x.ID)
			if len(m) == 0 {
				delete(b.bidsModel, model)
			}
		}
	}
}

// isCancelled reports whether the order id by author has been cancelled;
// the caller holds b.mu. A tombstone left by a cancel that arrived before
// its order binds only an order by the cancel's signer.
func (b *Book) isCancelled(id ID, author peer.ID, now time.Time) bool {
	t, ok := b.cancelled[cancelKey{order: id, author: author}]
	return ok && now.Before(t.until)
}

// Cancel applies a validated cancellation and reports whether it removed
// an order. The order is removed only when c.Signer is its author (the
// ask's supplier or the bid's renter). The cancelled ID is remembered
// until the order's expiry, so a copy that arrives late is not added
// again. A cancel for an order the book has not seen is remembered too,
// for a bounded time, and binds only an order by the same author.
func (b *Book) Cancel(c *Cancel) bool {
	if c == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if a, ok := b.asks[c.OrderID]; ok {
		if a.Supplier != c.Signer {
			return false
		}
		b.removeAsk(a)
		b.bury(cancelKey{c.OrderID, c.Signer}, tombstone{until: a.Expires(), known: true})
		return live(a.ExpiresMs, now)
	}
	if x, ok := b.bids[c.OrderID]; ok {
		if x.Renter != c.Signer {
			return false
		}
		b.removeBid(x)
		b.bury(cancelKey{c.OrderID, c.Signer}, tombstone{until: x.Expires(), known: true})
		return live(x.ExpiresMs, now)
	}
	key := cancelKey{c.OrderID, c.Signer}
	if _, ok := b.cancelled[key]; !ok {
		b.bury(key, tombstone{until: now.Add(pendingCancelTTL)})
	}
	return false
}

// bury records a tombstone, evicting the oldest-expiring unknown-order
// tombstone when there are too many; the caller holds b.mu.
func (b *Book) bury(key cancelKey, t tombstone) {
	if old, ok := b.cancelled[key]; ok && !old.known {
		b.pending--
	}
	if !t.known {
		if b.pending >= maxPendingCancels {
			b.evictPendingCancel()
		}
		b.pending++
	}
	b.cancelled[key] = t
}

// evictPendingCancel drops the unknown-order tombstone that expires first;
// the caller holds b.mu.
func (b *Book) evictPendingCancel() {
	var victim cancelKey
	var first time.Time
	found := false
	for key, t := range b.cancelled {
		if !t.known && (!found || t.until.Before(first)) {
			victim, first, found = key, t.until, true
		}
	}
	if found {
		delete(b.cancelled, victim)
		b.pending--
	}
}

// Ask returns the live ask with the given ID.
func (b *Book) Ask(id ID) (*Ask, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	a, ok := b.asks[id]
	if !ok || !live(a.ExpiresMs, b.now()) || !b.listed(a) {
		return nil, false
	}
	return a, true
}

// FindAsk returns the live ask whose hex ID starts with prefix, which
// must have at least MinIDPrefix digits. It fails with ErrAskNotFound
// when no ask matches and ErrAmbiguousPrefix when several do.
func (b *Book) FindAsk(prefix string) (*Ask, error) {
	p := strings.ToLower(prefix)
	if len(p) < MinIDPrefix {
		return nil, fmt.Errorf("ask ID %q: give at least %d hex digits", prefix, MinIDPrefix)
	}
	if len(p) > 2*len(ID{}) {
		return nil, fmt.Errorf("ask ID %q: longer than %d hex digits", prefix, 2*len(ID{}))
	}
	for i := 0; i < len(p); i++ {
		if !isHexDigit(p[i]) {
			return nil, fmt.Errorf("ask ID %q: not hexadecimal", prefix)
		}
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	now := b.now()
	var found *Ask
	n := 0
	for id, a := range b.asks {
		if live(a.ExpiresMs, now) && strings.HasPrefix(id.String(), p) && b.listed(a) {
			found = a
			n++
		}
	}
	switch n {
	case 0:
		return nil, fmt.Errorf("ask %s: %w", prefix, ErrAskNotFound)
	case 1:
		return found, nil
	}
	return nil, fmt.Errorf("ask %s matches %d asks (give more digits): %w", prefix, n, ErrAmbiguousPrefix)
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
}

// Asks returns the live, listed asks of model ("" = all models), cheapest
// first, then oldest first, then by ID.
func (b *Book) Asks(model string) []*Ask {
	b.mu.RLock()
	src := b.asks
	if model != "" {
		src = b.asksModel[model]
	}
	now := b.now()
	out := make([]*Ask, 0, len(src))
	for _, a := range src {
		if live(a.ExpiresMs, now) && b.listed(a) {
			out = append(out, a)
		}
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(x, y *Ask) int {
		if c := cmp.Compare(x.PriceMicros, y.PriceMicros); c != 0 {
			return c
		}
		if c := cmp.Compare(x.CreatedMs, y.CreatedMs); c != 0 {
			return c
		}
		return compareIDs(x.ID, y.ID)
	})
	return out
}

// Bids returns the live bids that could concern model: those whose filter
// allows it and those whose filter names no model list. With model "" it
// returns every live bid. The result is ordered oldest first, then by ID.
func (b *Book) Bids(model string) []*Bid {
	b.mu.RLock()
	now := b.now()
	var out []*Bid
	collect := func(src map[ID]*Bid) {
		for _, x := range src {
			if live(x.ExpiresMs, now) {
				out = append(out, x)
			}
		}
	}
	if model == "" {
		out = make([]*Bid, 0, len(b.bids))
		collect(b.bids)
	} else {
		out = make([]*Bid, 0, len(b.bidsModel[model])+len(b.bidsAny))
		collect(b.bidsModel[model])
		collect(b.bidsAny)
	}
	b.mu.RUnlock()
	slices.SortFunc(out, func(x, y *Bid) int {
		if c := cmp.Compare(x.CreatedMs, y.CreatedMs); c != 0 {
			return c
		}
		return compareIDs(x.ID, y.ID)
	})
	return out
}

func compareIDs(a, b ID) int {
	return strings.Compare(string(a[:]), string(b[:]))
}

// GC drops expired orders and tombstones and returns how many entries it
// removed.
func (b *Book) GC() (removed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	removed = b.dropExpired(now)
	for key, t := range b.cancelled {
		if !now.Before(t.until) {
			delete(b.cancelled, key)
			if !t.known {
				b.pending--
			}
			removed++
		}
	}
	return removed
}

// Len returns the number of live, listed asks and live bids.
func (b *Book) Len() (asks, bids int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	now := b.now()
	for _, a := range b.asks {
		if live(a.ExpiresMs, now) && b.listed(a) {
			asks++
		}
	}
	for _, x := range b.bids {
		if live(x.ExpiresMs, now) {
			bids++
		}
	}
	return asks, bids
}

// Held returns how many asks and bids the book holds, listed or not,
// expired or not until GC: what its caps bound.
func (b *Book) Held() (asks, bids int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.asks), len(b.bids)
}

// HeldFrom returns how many asks and bids the book holds that relay
// forwarded: what the per-relay caps bound.
func (b *Book) HeldFrom(relay peer.ID) (asks, bids int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.askRelayed[relay], b.bidRelays[relay]
}
