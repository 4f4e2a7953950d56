package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// The trades topic's per-author rate limits, as a node sets them
// (node/market.go).
const (
	tradeRate  = rate.Limit(10)
	tradeBurst = 20
)

// simNode is one gpumesh node of the simulation, wired as node.Node
// wires its market (node/market.go): an order book and a price index
// that believe what the node's Trust does, the orders and trades topics
// with the market's validators, the book served to peers, a renter, and
// a supplier when the node sells. It has no DHT, API, jobs or Badger:
// profiles come from the simulation's claims, the store is in memory,
// and a lease's job "starts" (Supplier.Claim) as soon as it is made.
type simNode struct {
	index    int
	id       peer.ID
	host     *simHost
	net      *p2p.Network
	book     *market.Book
	priceIdx *market.PriceIndex
	orders   *p2p.Topic
	trades   *p2p.Topic
	renter   *market.Renter
	supplier *market.Supplier // nil unless it sells
	store    store.Store
	now      func() time.Time
	log      *slog.Logger

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// nodeDeps is what every node shares: the fabric, the clock, what
// nodes know of suppliers, and the meter.
type nodeDeps struct {
	fab    *fabric
	clock  clock.Clock
	claims claims
	rep    *reputation.Book
	meter  *gossipMeter
	log    *slog.Logger
}

// startNode starts node index with key in region, selling spec's GPUs
// when spec is not nil.
func startNode(d nodeDeps, index int, key crypto.PrivKey, region string, spec *SupplierSpec, gpus []string) (_ *simNode, err error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	log := d.log.With("node", index, "peer", id.String())
	h, err := d.fab.addHost(key, index, region)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	n := &simNode{index: index, id: id, host: h, now: d.clock.Now, log: log, store: store.NewMemory(store.WithClock(d.clock.Now))}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	// A light DHT client: nobody serves the DHT, so it stays idle;
	// profiles come from the claims instead.
	n.net, err = p2p.New(p2p.Config{Key: key, Host: h, Mode: p2p.ModeClient, PubSub: true, Now: d.clock.Now, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	trust := nodeTrust{self: id, claims: d.claims, rep: d.rep}
	n.book = market.NewBook(d.clock.Now, market.WithBookTrust(trust))
	n.priceIdx = market.NewPriceIndex(d.clock.Now, 24*time.Hour, market.WithTrust(trust, reputation.DefaultFloor))
	ov := market.NewOrderValidator(d.clock.Now, market.OrderRate, market.OrderBurst)
	if n.orders, err = p2p.JoinRelayTopic(n.net.PubSub, id, market.OrdersTopic, n.admitOrder(ov, d.meter), log); err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	tv := market.NewTradeValidator(d.clock.Now, tradeRate, tradeBurst)
	checkTrade := func(author peer.ID, data []byte) (any, error) {
		d.meter.observe(index, data)
		return tv.Check(author, data)
	}
	if n.trades, err = p2p.JoinTopic(n.net.PubSub, id, market.TradesTopic, checkTrade, log); err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	market.ServeBook(h, n.book)
	n.renter = market.NewRenter(market.RenterConfig{Net: n.net, Key: key, Orders: n.orders, Store: n.store, Book: n.book, Now: d.clock.Now, Log: log})
	if spec != nil {
		n.supplier, err = market.NewSupplier(market.SupplierConfig{
			Net: n.net, Key: key, Store: n.store, Orders: n.orders, Trades: n.trades,
			Book: n.book, Index: n.priceIdx, Pricer: spec.Pricer, GPUs: map[string][]string{spec.Model: gpus},
			Region: spec.Region, Describe: describe(id, spec), Clock: d.clock, Now: d.clock.Now, Log: log,
		})
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", index, err)
		}
	}
	return n, nil
}

// run starts the node's loops: the supplier's, and the readers of the
// two topics (as node/market.go's).
func (n *simNode) run(c clock.Clock) {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if n.supplier != nil {
		n.wg.Go(func() { n.supplier.Run(ctx) })
		n.wg.Go(func() { n.supplier.RunClaims(ctx) })
	}
	// Bids come by gossip and, from renters connected to a supplier,
	// straight (BidProtocol): one pool of answerers takes both.
	var bids *market.BidAnswerers
	if n.supplier != nil {
		bids = market.NewBidAnswerers(ctx, market.BidWorkers, market.BidQueue, n.supplier.HandleBid, n.wg.Go, n.log)
		n.supplier.ServeBids(bids.Offer)
	}
	n.wg.Go(func() { n.readOrders(ctx, bids) })
	n.wg.Go(func() { n.readTrades(ctx) })
	n.wg.Go(func() { n.gcBook(ctx, c) })
}

// describe is a supplier's offer of its model, as node.describe makes it.
func describe(id peer.ID, spec *SupplierSpec) func(string) market.Offer {
	return func(model string) market.Offer {
		o := market.Offer{PeerID: id.String(), Model: model, Region: spec.Region, Simulated: true, TFLOPS: catalog.TFLOPS(model)}
		if p, ok := catalog.Lookup(model); ok {
			o.Name, o.VRAMGiB, o.ComputeCapability = p.Name, p.MemoryGiB, fmt.Sprintf("%d.%d", p.CCMajor, p.CCMinor)
		}
		return o
	}
}

// admitOrder is the orders topic's validator, as node.admitOrder: the
// market's checks, then the book's caps, penalising a relay that floods.
// It also reports each message to the meter.
func (n *simNode) admitOrder(ov *market.OrderValidator, meter *gossipMeter) p2p.RelayCheckFunc {
	return func(author, from peer.ID, data []byte) (any, error) {
		meter.observe(n.index, data)
		v, err := ov.Check(author, data)
		if err != nil || author == n.id {
			return v, err
		}
		switch o := v.(type) {
		case *market.Ask:
			err = n.book.AddAskFrom(o, from)
		case *market.Bid:
			err = n.book.AddBidFrom(o, from)
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

// readOrders applies cancels and hands bids to the supplier's answerers
// (bids; nil on a node that sells nothing).
func (n *simNode) readOrders(ctx context.Context, bids *market.BidAnswerers) {
	for {
		msg, err := n.orders.Next(ctx)
		if err != nil {
			return
		}
		switch o := msg.Value.(type) {
		case *market.Bid:
			if bids != nil {
				bids.Offer(o) // dropped when full, as a node drops them
			}
		case *market.Cancel:
			n.book.Cancel(o)
		}
	}
}

// syncBook fills the book from its connected peers' books, as
// node.syncBookOnce does from one, every ask checked again: peer after
// peer until the book lists want asks or maxSyncPeers have answered (a
// peer that missed some asks itself leaves the book short).
func (n *simNode) syncBook(ctx context.Context, want int) {
	answered := 0
	for _, p := range n.host.Network().Peers() {
		asks, err := market.QueryBook(ctx, n.host, p, nil, n.now())
		if err != nil {
			continue
		}
		for _, a := range asks {
			_ = n.book.AddAskFrom(a, p) // capped as if relayed by p
		}
		if have, _ := n.book.Len(); have >= want {
			return
		}
		if answered++; answered == maxSyncPeers {
			return
		}
	}
}

// maxSyncPeers bounds the peers one syncBook asks.
const maxSyncPeers = 4

func (n *simNode) readTrades(ctx context.Context) {
	for {
		msg, err := n.trades.Next(ctx)
		if err != nil {
			return
		}
		if tp, ok := msg.Value.(*market.TradePrint); ok {
			market.AddTrade(n.priceIdx, tp)
		}
	}
}

// gcBook drops expired orders and old prints every 10 s of the
// simulated clock.
func (n *simNode) gcBook(ctx context.Context, c clock.Clock) {
	t := c.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			n.book.GC()
			n.priceIdx.Prune()
		}
	}
}

// stop ends the node's loops; a supplier withdraws its asks first
// (Supplier.Run does when its context ends), unless abrupt.
func (n *simNode) stop(abrupt bool) {
	if n.cancel == nil {
		return
	}
	if abrupt {
		n.host.Host.Close() // gone before anything is withdrawn
	}
	n.cancel()
	if n.supplier != nil && !abrupt {
		n.supplier.Stopped(market.ShutdownGrace + time.Second)
	}
}

// Close stops the node and releases its topics, network and store. It
// is safe to call more than once.
func (n *simNode) Close() error {
	n.closeOnce.Do(func() {
		n.stop(false)
		if n.renter != nil {
			n.renter.Close()
		}
		var errs []error
		for _, t := range []*p2p.Topic{n.orders, n.trades} {
			if t != nil {
				errs = append(errs, t.Close())
			}
		}
		if n.net != nil {
			errs = append(errs, n.net.Close())
		} else {
			errs = append(errs, n.host.Close())
		}
		n.wg.Wait()
		errs = append(errs, n.store.Close())
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}
