package node

import (
	"context"
	"fmt"
	"math"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/assembly"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// marketParts are the market pieces every node runs (market/assembly:
// the order book, the price index, the two topics, the renter and, on a
// node with priced GPUs, the supplier), with what the book and index
// believe of suppliers. The fields are the assembly's, for short.
type marketParts struct {
	asm      *assembly.Market
	trust    *trustView // what the book and index believe of suppliers
	book     *market.Book
	index    *market.PriceIndex
	orders   *p2p.Topic[market.Order]
	trades   *p2p.Topic[*market.TradePrint]
	supplier *market.Supplier // nil unless this node sells
	// startKey is the node's reachKey when the market started: what its
	// first asks state of how to reach it (advertiseLoop re-posts them
	// once that changes).
	startKey string
}

// addrsChanged has the supplier, if any, re-post its asks with the host's
// new addresses.
func (m *marketParts) addrsChanged() {
	if m.supplier != nil {
		m.supplier.AddrsChanged()
	}
}

// startMarket builds the node's market (market/assembly, as the
// simulation does), selling the node's GPUs that have a list price, and
// starts its loops and the sync of the order book from the bootstrap
// peers.
func (n *Node) startMarket(ctx context.Context) error {
	m := &n.market
	m.startKey = n.reachKey()
	m.trust = newTrustView(n.id, n.now, n.net.Refuses)
	for _, p := range n.dir.List(nil, math.MaxInt, math.MaxInt, n.now()) {
		m.trust.observe(p)
	}
	pricer := n.cfg.Pricer()
	gpus := map[string][]string{}
	for _, g := range n.gpus {
		if _, priced := pricer.List[g.Model]; priced {
			gpus[g.Model] = append(gpus[g.Model], g.UUID)
		} else if g.Model != inventory.UnknownModel {
			n.log.Warn("no --price for this model: not selling it", "model", g.Model)
		}
	}
	asm, err := assembly.New(assembly.Config{
		Net: n.net, Key: n.key, Store: n.store, Trust: m.trust, TrustFloor: reputation.DefaultFloor, Clock: n.clock, Now: n.now, Log: n.log,
		Metrics:      n.metrics.Market,
		TopicOptions: func(name string) []p2p.TopicOption { return []p2p.TopicOption{n.topic(name)} },
		Sell: &assembly.Sell{
			Pricer: pricer, GPUs: gpus, Region: n.cfg.Region, Describe: n.describe,
			AskTTL: n.cfg.AskTTL, MaxDuration: n.cfg.MaxLease, ClaimWindow: n.cfg.ClaimWindow,
		},
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	m.asm, m.book, m.index, m.orders, m.trades, m.supplier = asm, asm.Book, asm.Index, asm.Orders, asm.Trades, asm.Supplier
	asm.Run(ctx, n.goLoop)
	n.goLoop(func() { asm.RunSync(ctx, n.bootstrapIDs()) })
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

// FreeGPUs is how many of the node's GPUs no lease or reservation holds.
func (n *Node) FreeGPUs() int { return int(n.freeGPUs()) }
