// Package assembly wires one node's market: the order book and the price
// index, the orders and trades topics with the market's validators and
// the book's caps, the book served to peers, the renter, the supplier of
// a node that sells, and the loops that read gossip into them.
//
// The node (package node) and the 1000-node simulation (testnet/sim)
// both build their market with New and Run, so that what the simulation
// measures is the node's wiring; they differ only in the network under
// the p2p.Network, the clock, and what they believe of suppliers (Trust).
// An architecture test at the module root (TestMarketWiredOnce) keeps the
// simulation from wiring a market of its own.
package assembly

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// Per-author gossip rate limits of the trades topic (those of the orders
// topic are market.OrderRate and market.OrderBurst).
const (
	TradeRate  = rate.Limit(10)
	TradeBurst = 20
)

// GCEvery is how often the book's expired orders and the index's old
// prints are dropped, on the market's clock.
const GCEvery = 10 * time.Second

// Config is what a market is built from.
type Config struct {
	Net   *p2p.Network
	Key   crypto.PrivKey
	Store store.Store
	// Trust is what the book and the price index believe of suppliers
	// (their profiles, reputations and refusals); TrustFloor the
	// reputation under which the index ignores a supplier's prints
	// (market.DefaultTrustFloor when 0).
	Trust      market.Trust
	TrustFloor float64
	// Clock runs the market's timers (clock.Real() when nil); Now is the
	// time for records (Clock.Now when nil).
	Clock clock.Clock
	Now   func() time.Time
	Log   *slog.Logger
	// Metrics counts quotes and leases; nil counts nothing.
	Metrics *metrics.Market
	// TopicOptions are the options each topic is joined with (a node's
	// metrics observer); nil for none.
	TopicOptions func(topic string) []p2p.TopicOption
	// Observe, when set, is told every message the topics' validators
	// see, before any check (the simulation's gossip meter).
	Observe func(topic string, data []byte)
	// Sell, when set, makes this market's node a supplier of its GPUs.
	Sell *Sell
}

// Sell is the supplier's part of a Config: what it sells and how. The
// fields are market.SupplierConfig's of the same names.
type Sell struct {
	Pricer      market.Pricer
	GPUs        map[string][]string // devices by model slug; none: no supplier
	Region      string
	Describe    func(model string) market.Offer
	AskTTL      time.Duration
	MaxDuration time.Duration
	ClaimWindow time.Duration
}

// Market is one node's market. Its fields are set by New and never
// changed.
type Market struct {
	Book     *market.Book
	Index    *market.PriceIndex
	Orders   *p2p.Topic[market.Order]
	Trades   *p2p.Topic[*market.TradePrint]
	Renter   *market.Renter
	Supplier *market.Supplier // nil unless the node sells

	cfg  Config
	self peer.ID
	log  *slog.Logger
}

// New joins the market topics, serves the order book, and makes the
// renter and, when cfg.Sell lists GPUs, the supplier. Nothing runs until
// Run; Close releases what New took.
func New(cfg Config) (_ *Market, err error) {
	if cfg.Net == nil || cfg.Key == nil {
		return nil, errors.New("market assembly: a network and a key are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.TopicOptions == nil {
		cfg.TopicOptions = func(string) []p2p.TopicOption { return nil }
	}
	m := &Market{cfg: cfg, self: cfg.Net.Host.ID(), log: cfg.Log}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	var bookOpts []market.BookOption
	var indexOpts []market.IndexOption
	if cfg.Trust != nil {
		bookOpts = append(bookOpts, market.WithBookTrust(cfg.Trust))
		indexOpts = append(indexOpts, market.WithTrust(cfg.Trust, cfg.TrustFloor))
	}
	m.Book = market.NewBook(cfg.Now, bookOpts...)
	m.Index = market.NewPriceIndex(cfg.Now, 24*time.Hour, indexOpts...)

	ov := market.NewOrderValidator(cfg.Now, market.OrderRate, market.OrderBurst)
	if m.Orders, err = p2p.JoinRelayTopic(cfg.Net.PubSub, m.self, market.OrdersTopic, m.admitOrder(ov), cfg.Log, cfg.TopicOptions(market.OrdersTopic)...); err != nil {
		return nil, fmt.Errorf("market assembly: %w", err)
	}
	tv := market.NewTradeValidator(cfg.Now, TradeRate, TradeBurst)
	checkTrade := func(author peer.ID, data []byte) (*market.TradePrint, error) {
		m.observe(market.TradesTopic, data)
		return tv.Check(author, data)
	}
	if m.Trades, err = p2p.JoinTopic(cfg.Net.PubSub, m.self, market.TradesTopic, checkTrade, cfg.Log, cfg.TopicOptions(market.TradesTopic)...); err != nil {
		return nil, fmt.Errorf("market assembly: %w", err)
	}
	market.ServeBook(cfg.Net.Host, m.Book)
	m.Renter = market.NewRenter(market.RenterConfig{Net: cfg.Net, Key: cfg.Key, Orders: m.Orders, Store: cfg.Store, Book: m.Book, Now: cfg.Now, Log: cfg.Log, Metrics: cfg.Metrics})
	if s := cfg.Sell; s != nil && len(s.GPUs) > 0 {
		m.Supplier, err = market.NewSupplier(market.SupplierConfig{
			Net: cfg.Net, Key: cfg.Key, Store: cfg.Store, Orders: m.Orders, Trades: m.Trades,
			Book: m.Book, Index: m.Index, Pricer: s.Pricer, GPUs: s.GPUs, Region: s.Region,
			Describe: s.Describe, AskTTL: s.AskTTL, MaxDuration: s.MaxDuration, ClaimWindow: s.ClaimWindow,
			Clock: cfg.Clock, Now: cfg.Now, Log: cfg.Log, Metrics: cfg.Metrics,
		})
		if err != nil {
			return nil, fmt.Errorf("market assembly: %w", err)
		}
	}
	return m, nil
}

func (m *Market) observe(topic string, data []byte) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(topic, data)
	}
}

// Run starts the market's loops with goLoop (which the caller waits for
// at Close): the supplier's, the bid answerers that take bids from
// gossip and straight from connected renters, the readers of the two
// topics, and the book's collector. They end with ctx.
func (m *Market) Run(ctx context.Context, goLoop func(func())) {
	var bids *market.BidAnswerers
	if m.Supplier != nil {
		goLoop(func() { m.Supplier.Run(ctx) })
		goLoop(func() { m.Supplier.RunClaims(ctx) })
		bids = market.NewBidAnswerers(ctx, market.BidWorkers, market.BidQueue, m.Supplier.HandleBid, goLoop, m.log)
		m.Supplier.ServeBids(bids.Offer)
	}
	goLoop(func() { m.readOrders(ctx, bids) })
	goLoop(func() { m.readTrades(ctx) })
	goLoop(func() { m.gc(ctx) })
}

// admitOrder is the orders topic's validator: the market's checks, then
// the order book's caps, so that an order the book will not hold is
// neither delivered nor forwarded and earns its relay no score. The book
// takes asks and bids here, in one step with the caps; cancels are
// applied as they are read. The node's own orders are already in its book
// and pass. A relay that alone forwards more live orders of one author
// than the author's cap is penalised: honest relays apply the same cap
// first (market.ErrRelayFlood).
func (m *Market) admitOrder(ov *market.OrderValidator) p2p.RelayCheckFunc[market.Order] {
	return func(author, from peer.ID, data []byte) (market.Order, error) {
		m.observe(market.OrdersTopic, data)
		v, err := ov.Check(author, data)
		if err != nil || author == m.self {
			return v, err
		}
		switch o := v.(type) {
		case *market.Ask:
			err = m.Book.AddAskFrom(o, from)
		case *market.Bid:
			err = m.Book.AddBidFrom(o, from)
		}
		if errors.Is(err, market.ErrRelayFlood) {
			m.cfg.Net.Penalize(from, 1)
		}
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

// readOrders applies cancels from the orders topic and hands bids, which
// the validator put in the book, to the supplier's bid answerers (nil on
// a node that sells nothing; a drop is counted and logged there).
func (m *Market) readOrders(ctx context.Context, bids *market.BidAnswerers) {
	for {
		msg, err := m.Orders.Next(ctx)
		if err != nil {
			return
		}
		switch o := msg.Value.(type) {
		case *market.Bid:
			if bids != nil {
				bids.Offer(o)
			}
		case *market.Cancel:
			m.Book.Cancel(o)
		}
	}
}

// readTrades feeds the price index from the trades topic.
func (m *Market) readTrades(ctx context.Context) {
	for {
		msg, err := m.Trades.Next(ctx)
		if err != nil {
			return
		}
		market.AddTrade(m.Index, msg.Value)
	}
}

// gc drops, every GCEvery of the market's clock, the book's expired
// orders and the price index's prints older than its window.
func (m *Market) gc(ctx context.Context) {
	t := m.cfg.Clock.NewTicker(GCEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			m.Book.GC()
			m.Index.Prune()
		}
	}
}

// SyncFrom fills the book from peers' books, every ask checked again as
// if it had come by gossip and capped as if relayed by the peer that
// served it: peer after peer, until answers peers have answered or done
// (nil: never) says the book has enough. It returns how many answered.
func (m *Market) SyncFrom(ctx context.Context, peers []peer.ID, answers int, done func(*market.Book) bool) int {
	answered := 0
	for _, id := range peers {
		asks, err := market.QueryBook(ctx, m.cfg.Net.Host, id, nil, m.cfg.Now())
		if err != nil {
			m.log.Debug("sync order book", "from", id, "err", err)
			continue
		}
		for _, a := range asks {
			_ = m.Book.AddAskFrom(a, id)
		}
		m.log.Debug("order book synced", "from", id, "asks", len(asks))
		answered++
		if answered >= answers || (done != nil && done(m.Book)) {
			break
		}
	}
	return answered
}

// SyncEvery is the longest wait between two syncs of RunSync; SyncPeers
// how many connected peers a node without bootstrap peers syncs from.
const (
	SyncEvery = 5 * time.Minute
	SyncPeers = 4
)

// RunSync fills a new node's order book from its bootstrap peers' books
// until ctx ends: asks are gossiped when posted and renewed only every
// few minutes, so a node that has just joined would otherwise not see
// them for that long. It asks the first bootstrap peer that answers; a
// node without bootstrap peers (the first of a network, which the others
// bootstrap from) asks up to SyncPeers of its connected peers instead,
// every one of them: an ask gossiped before the poster knew this node as
// a topic peer never reached it. A peer serves only the asks whose
// supplier's profile it holds, which just after a supplier starts may be
// fewer than it has heard, so the sync is repeated at intervals growing
// from 5 s to SyncEvery; while new connected peers keep coming (a network
// starting around a node without bootstrap peers) it goes on every 5 s.
func (m *Market) RunSync(ctx context.Context, bootstrap []peer.ID) {
	wait, seen := 5*time.Second, 0
	for {
		if len(bootstrap) > 0 {
			m.SyncFrom(ctx, bootstrap, 1, nil)
		} else {
			ids := m.cfg.Net.Host.Network().Peers()
			rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			m.SyncFrom(ctx, ids[:min(len(ids), SyncPeers)], SyncPeers, nil)
		}
		t := m.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		wait = min(2*wait, SyncEvery)
		if now := len(m.cfg.Net.Host.Network().Peers()); len(bootstrap) == 0 && now > seen {
			wait, seen = 5*time.Second, now
		}
	}
}

// Stopped gives a supplier up to grace to withdraw its asks while the
// network is still up (after Run's context has ended); nothing for a
// node that sells nothing.
func (m *Market) Stopped(grace time.Duration) {
	if m.Supplier != nil {
		m.Supplier.Stopped(grace)
	}
}

// Close releases the renter's gossip and the two topics. The caller
// ends Run's context first and closes the network after.
func (m *Market) Close() error {
	if m.Renter != nil {
		m.Renter.Close()
	}
	var errs []error
	if m.Orders != nil {
		errs = append(errs, m.Orders.Close())
	}
	if m.Trades != nil {
		errs = append(errs, m.Trades.Close())
	}
	return errors.Join(errs...)
}
