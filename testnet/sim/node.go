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

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/assembly"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// simNode is one gpumesh node of the simulation, its market built by
// market/assembly exactly as node.Node builds its own (an order book and
// a price index that believe what the simulation's Trust does, the
// orders and trades topics with the market's validators, the book served
// to peers, a renter, and a supplier when the node sells). It has no DHT,
// API, jobs or Badger: profiles come from the simulation's claims, the
// store is in memory, and a lease's job "starts" (Supplier.Claim) as soon
// as it is made.
type simNode struct {
	index    int
	id       peer.ID
	host     *simHost
	net      *p2p.Network
	asm      *assembly.Market
	book     *market.Book
	priceIdx *market.PriceIndex
	orders   *p2p.Topic[market.Order]
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
	n.net, err = p2p.New(p2p.Config{Key: key, Network: Network, Host: h, Mode: p2p.ModeClient, PubSub: true, Now: d.clock.Now, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	var sell *assembly.Sell
	if spec != nil {
		sell = &assembly.Sell{Pricer: spec.Pricer, GPUs: map[string][]string{spec.Model: gpus}, Region: spec.Region, Describe: describe(id, spec)}
	}
	n.asm, err = assembly.New(assembly.Config{
		Net: n.net, Key: key, Store: n.store, Trust: nodeTrust{self: id, claims: d.claims, rep: d.rep}, TrustFloor: reputation.DefaultFloor,
		Clock: d.clock, Now: d.clock.Now, Log: log, Sell: sell,
		Observe: func(_ string, data []byte) { d.meter.observe(index, data) },
	})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", index, err)
	}
	n.book, n.priceIdx, n.orders, n.renter, n.supplier = n.asm.Book, n.asm.Index, n.asm.Orders, n.asm.Renter, n.asm.Supplier
	return n, nil
}

// run starts the node's market loops (assembly.Market.Run, as a node's).
func (n *simNode) run() {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.asm.Run(ctx, n.wg.Go)
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

// syncBook fills the book from its connected peers' books, as a node
// syncs from its peers (assembly.Market.SyncFrom), every ask checked
// again: peer after peer until the book lists want asks or maxSyncPeers
// have answered (a peer that missed some asks itself leaves the book
// short).
func (n *simNode) syncBook(ctx context.Context, want int) {
	n.asm.SyncFrom(ctx, n.host.Network().Peers(), maxSyncPeers, func(b *market.Book) bool {
		have, _ := b.Len()
		return have >= want
	})
}

// maxSyncPeers bounds the peers one syncBook asks.
const maxSyncPeers = 4

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
	if !abrupt {
		n.asm.Stopped(market.ShutdownGrace + time.Second)
	}
}

// Close stops the node and releases its topics, network and store. It
// is safe to call more than once.
func (n *simNode) Close() error {
	n.closeOnce.Do(func() {
		n.stop(false)
		var errs []error
		if n.asm != nil {
			errs = append(errs, n.asm.Close())
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
