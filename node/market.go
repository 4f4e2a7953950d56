package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// Per-author gossip rate limits of the trades topic (those of the orders
// topic are market.OrderRate and OrderBurst).
const (
	tradeRate  = rate.Limit(10)
	tradeBurst = 20
)

// marketParts are the market pieces every node runs: the order book, the
// price index, the two topics, and, on a node with priced GPUs, the
// supplier.
type marketParts struct {
	trust    *trustView // what the book and index believe of suppliers
	book     *market.Book
	index    *market.PriceIndex
	orders   *p2p.Topic
	trades   *p2p.Topic
	supplier *market.Supplier // nil unless this node sells
}

// addrsChanged has the supplier, if any, re-post its asks with the host's
// new addresses.
func (m *marketParts) addrsChanged() {
	if m.supplier != nil {
		m.supplier.AddrsChanged()
	}
}

// startMarket joins the market topics, serves the order book, and starts
// the supplier when the node has GPUs with a list price.
func (n *Node) startMarket(ctx context.Context) error {
	m := &n.market
	m.trust = newTrustView(n.id, n.now, n.net.Refuses)
	for _, p := range n.dir.List(nil, math.MaxInt, math.MaxInt, n.now()) {
		m.trust.observe(p)
	}
	m.book = market.NewBook(n.now, market.WithBookTrust(m.trust))
	m.index = market.NewPriceIndex(n.now, 24*time.Hour, market.WithTrust(m.trust, reputation.DefaultFloor))
	var err error
	ov := market.NewOrderValidator(n.now, market.OrderRate, market.OrderBurst)
	if m.orders, err = p2p.JoinRelayTopic(n.net.PubSub, n.id, market.OrdersTopic, n.admitOrder(ov), n.log, n.topic(market.OrdersTopic)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	tv := market.NewTradeValidator(n.now, tradeRate, tradeBurst)
	if m.trades, err = p2p.JoinTopic(n.net.PubSub, n.id, market.TradesTopic, tv.Check, n.log, n.topic(market.TradesTopic)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	market.ServeBook(n.net.Host, m.book)
	pricer := n.cfg.Pricer()
	gpus := map[string][]string{}
	for _, g := range n.gpus {
		if _, priced := pricer.List[g.Model]; priced {
			gpus[g.Model] = append(gpus[g.Model], g.UUID)
		}
	}
	for _, g := range n.gpus {
		if _, priced := pricer.List[g.Model]; !priced && g.Model != inventory.UnknownModel {
			n.log.Warn("no --price for this model: not selling it", "model", g.Model)
		}
	}
	if len(gpus) > 0 {
		m.supplier, err = market.NewSupplier(market.SupplierConfig{
			Net: n.net, Key: n.key, Store: n.store, Orders: m.orders, Trades: m.trades,
			Book: m.book, Index: m.index, Pricer: pricer, GPUs: gpus, Region: n.cfg.Region,
			Describe: n.describe, AskTTL: n.cfg.AskTTL, Clock: n.clock, Now: n.now, Log: n.log,
			MaxDuration: n.cfg.MaxLease, ClaimWindow: n.cfg.ClaimWindow, Metrics: n.metrics.Market,
		})
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		n.goLoop(func() { m.supplier.Run(ctx) })
		n.goLoop(func() { m.supplier.RunClaims(ctx) })
	}
	n.goLoop(func() { n.syncBook(ctx) })
	// Bids come by gossip and, from renters connected to this supplier,
	// straight (BidProtocol): one pool of answerers takes both.
	var bids *market.BidAnswerers
	if m.supplier != nil {
		bids = market.NewBidAnswerers(ctx, market.BidWorkers, market.BidQueue, m.supplier.HandleBid, n.goLoop, n.log)
		m.supplier.ServeBids(bids.Offer)
	}
	n.goLoop(func() { n.readOrders(ctx, bids) })
	n.goLoop(func() { n.readTrades(ctx) })
	n.goLoop(func() { n.gcBook(ctx) })
	return nil
}

// describe is the static part of this node's offer of a model.
func (n *Node) describe(model string) market.Offer {
	o := market.Offer{PeerID: n.id.String(), Model: model, Region: n.cfg.Region, Version: Software(),
		Reach: string(n.net.Reach().Reach)}
	var mine []inventory.GPU
	for _, g := range n.gpus {
		if g.Model == model {
			o.Name, o.VRAMGiB, o.ComputeCapability = g.Name, g.VRAMGiB, g.ComputeCapability
			o.Simulated = o.Simulated || g.Simulated
			mine = append(mine, g)
		}
	}
	wire, _ := profileGPUs(mine)
	o.SetHardware(wire)
	o.TFLOPS = catalog.TFLOPS(model)
	return o
}

// admitOrder is the orders topic's validator: ov's checks, then the
// order book's caps, so that an order the book will not hold is neither
// delivered nor forwarded and earns its relay no score. The book takes
// asks and bids here, in one step with the caps; cancels are applied as
// they are read. The node's own orders are already in its book and pass. A relay that alone forwards more live
// orders of one author than the author's cap is penalised: honest relays
// apply the same cap first (market.ErrRelayFlood).
func (n *Node) admitOrder(ov *market.OrderValidator) p2p.RelayCheckFunc {
	return func(author, from peer.ID, data []byte) (any, error) {
		v, err := ov.Check(author, data)
		if err != nil || author == n.id {
			return v, err
		}
		switch o := v.(type) {
		case *market.Ask:
			err = n.market.book.AddAskFrom(o, from)
		case *market.Bid:
			err = n.market.book.AddBidFrom(o, from)
		}
		if errors.Is(err, market.ErrRelayFlood) {
			n.net.Penalize(from, 1)
		}
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

// readOrders applies cancels from the orders topic and hands bids, which
// the validator put in the book, to the supplier's bid answerers (nil on
// a node that sells nothing).
func (n *Node) readOrders(ctx context.Context, bids *market.BidAnswerers) {
	m := &n.market
	for {
		msg, err := m.orders.Next(ctx)
		if err != nil {
			return
		}
		switch o := msg.Value.(type) {
		case *market.Bid:
			if bids != nil {
				bids.Offer(o) // a drop is counted and logged there
			}
		case *market.Cancel:
			m.book.Cancel(o)
		}
	}
}

// syncBook fills a new node's order book from its bootstrap peers' books
// (or, without any, its connected peers'; see syncBookOnce):
// asks are gossiped when posted and renewed only every few minutes, so a
// node that has just joined would otherwise not see them for that long.
// Every ask is checked again, as if it had come by gossip. A peer serves
// only the asks it lists, those whose supplier's profile it holds, which
// just after a supplier starts may be fewer than it has heard; so the
// sync is repeated, at intervals growing from 5 s to syncBookEvery.
func (n *Node) syncBook(ctx context.Context) {
	wait, peers := 5*time.Second, 0
	for {
		n.syncBookOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, syncBookEvery)
		// A node without bootstrap peers syncs from its connected
		// peers: while new ones keep coming (a network starting around
		// it), it goes on every 5 s.
		if now := len(n.net.Host.Network().Peers()); len(n.cfg.Bootstrap) == 0 && now > peers {
			wait, peers = 5*time.Second, now
		}
	}
}

// syncBookEvery is the longest wait between two syncs of the order book.
const syncBookEvery = 5 * time.Minute

// syncBookOnce asks the first bootstrap peer that answers for its book. A
// node without bootstrap peers (the first node of a network, which the
// others bootstrap from) asks up to syncPeers of the peers it is
// connected to instead, every one of them: an ask gossiped before the
// poster knew this node as a topic peer never reached it, and would not
// again until renewed minutes later.
func (n *Node) syncBookOnce(ctx context.Context) {
	ids, first := n.bootstrapIDs(), true
	if len(ids) == 0 {
		ids, first = n.net.Host.Network().Peers(), false
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ids = ids[:min(len(ids), syncPeers)]
	}
	for _, id := range ids {
		asks, err := market.QueryBook(ctx, n.net.Host, id, nil, n.now())
		if err != nil {
			n.log.Debug("sync order book", "from", id, "err", err)
			continue
		}
		for _, a := range asks {
			_ = n.market.book.AddAskFrom(a, id) // capped as if relayed by id
		}
		n.log.Debug("order book synced", "from", id, "asks", len(asks))
		if first {
			return
		}
	}
}

// syncPeers is how many connected peers a node without bootstrap peers
// syncs its order book from.
const syncPeers = 4

// readTrades feeds the price index from the trades topic.
func (n *Node) readTrades(ctx context.Context) {
	for {
		msg, err := n.market.trades.Next(ctx)
		if err != nil {
			return
		}
		if tp, ok := msg.Value.(*market.TradePrint); ok {
			market.AddTrade(n.market.index, tp)
		}
	}
}

// gcBook drops, every 10 s, the book's expired orders and the price
// index's prints older than its window, of every model.
func (n *Node) gcBook(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.market.book.GC()
			n.market.index.Prune()
		}
	}
}

// Book is the node's order book.
func (n *Node) Book() *market.Book { return n.market.book }

// PriceIndex is the node's price index.
func (n *Node) PriceIndex() *market.PriceIndex { return n.market.index }

// Supplier is the node's selling side, nil when it sells nothing.
func (n *Node) Supplier() *market.Supplier { return n.market.supplier }

// freeGPUs counts the node's GPUs not held by a lease or reservation
// (GPUs of models it does not sell count as free).
func (n *Node) freeGPUs() uint32 {
	free := len(n.gpus)
	if sup := n.market.supplier; sup != nil {
		for _, c := range sup.Ledger().Capacity() {
			free -= c.Reserved
		}
	}
	return uint32(max(free, 0))
}
