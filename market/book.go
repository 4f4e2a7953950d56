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
)

// Errors of Book.FindAsk.
var (
	// ErrAskNotFound is returned, wrapped, when no live ask has the ID.
	ErrAskNotFound = errors.New("no such ask")
	// ErrAmbiguousPrefix is returned, wrapped, when several live asks
	// share an ID prefix.
	ErrAmbiguousPrefix = errors.New("ambiguous ID prefix")
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
// them. A Book is safe for concurrent use.
type Book struct {
	now func() time.Time

	mu         sync.RWMutex
	asks       map[ID]*Ask
	askByOwner map[askKey]ID           // (supplier, model) → its live ask
	asksModel  map[string]map[ID]*Ask  // model → asks
	bids       map[ID]*Bid             // all bids
	bidsModel  map[string]map[ID]*Bid  // model → bids whose filter lists it
	bidsAny    map[ID]*Bid             // bids whose filter names no model list
	cancelled  map[cancelKey]tombstone // cancelled orders
	pending    int                     // tombstones with known == false
}

// NewBook returns an empty Book that reads the time from now (time.Now
// when nil).
func NewBook(now func() time.Time) *Book {
	if now == nil {
		now = time.Now
	}
	return &Book{
		now:        now,
		asks:       make(map[ID]*Ask),
		askByOwner: make(map[askKey]ID),
		asksModel:  make(map[string]map[ID]*Ask),
		bids:       make(map[ID]*Bid),
		bidsModel:  make(map[string]map[ID]*Bid),
		bidsAny:    make(map[ID]*Bid),
		cancelled:  make(map[cancelKey]tombstone),
	}
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

// AddAsk adds a validated ask and reports whether the book took it. A
// supplier has one live ask per model: a newer ask (later CreatedMs, then
// higher Nonce) replaces the older one. An ask is refused when it is
// expired, already in the book, cancelled, or not newer than the
// supplier's live ask of the model.
func (b *Book) AddAsk(a *Ask) bool {
	if a == nil || a.Ask == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !live(a.ExpiresMs, now) || b.isCancelled(a.ID, a.Supplier, now) {
		return false
	}
	if _, dup := b.asks[a.ID]; dup {
		return false
	}
	key := askKey{supplier: a.Supplier, model: a.Model}
	if oldID, ok := b.askByOwner[key]; ok {
		old := b.asks[oldID]
		if live(old.ExpiresMs, now) && !newer(a.CreatedMs, a.Nonce, old.CreatedMs, old.Nonce) {
			return false
		}
		b.removeAsk(old)
	}
	b.asks[a.ID] = a
	b.askByOwner[key] = a.ID
	m := b.asksModel[a.Model]
	if m == nil {
		m = make(map[ID]*Ask)
		b.asksModel[a.Model] = m
	}
	m[a.ID] = a
	return true
}

// removeAsk drops a from every index; the caller holds b.mu.
func (b *Book) removeAsk(a *Ask) {
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

// AddBid adds a validated bid and reports whether the book took it. The
// bid is indexed under each model its filter allows (Filter.Models), or
// under all models when the filter names none. An expired, duplicate or
// cancelled bid is refused.
func (b *Book) AddBid(x *Bid) bool {
	if x == nil || x.Bid == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if !live(x.ExpiresMs, now) || b.isCancelled(x.ID, x.Renter, now) {
		return false
	}
	if _, dup := b.bids[x.ID]; dup {
		return false
	}
	b.bids[x.ID] = x
	models := x.Filter.Models()
	if models == nil {
		b.bidsAny[x.ID] = x
		return true
	}
	for _, model := range models {
		m := b.bidsModel[model]
		if m == nil {
			m = make(map[ID]*Bid)
			b.bidsModel[model] = m
		}
		m[x.ID] = x
	}
	return true
}

// removeBid drops x from every index; the caller holds b.mu.
func (b *Book) removeBid(x *Bid) {
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
	if !ok || !live(a.ExpiresMs, b.now()) {
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
		if live(a.ExpiresMs, now) && strings.HasPrefix(id.String(), p) {
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

// Asks returns the live asks of model ("" = all models), cheapest first,
// then oldest first, then by ID.
func (b *Book) Asks(model string) []*Ask {
	b.mu.RLock()
	src := b.asks
	if model != "" {
		src = b.asksModel[model]
	}
	now := b.now()
	out := make([]*Ask, 0, len(src))
	for _, a := range src {
		if live(a.ExpiresMs, now) {
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

// Len returns the number of live asks and bids.
func (b *Book) Len() (asks, bids int) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	now := b.now()
	for _, a := range b.asks {
		if live(a.ExpiresMs, now) {
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
