package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// RentClient is a light client that can buy: besides the DHT it joins the
// orders topic (to publish bids) and listens on an ephemeral port (a bid
// must list an address; suppliers send quotes over the connections the
// renter opens to them, never to that address).
type RentClient struct {
	net       *p2p.Network
	orders    *p2p.Topic
	renter    *market.Renter
	bootstrap []peer.AddrInfo
	now       func() time.Time
	log       *slog.Logger
}

// NewRentClient joins the network to rent. st, when not nil, keeps the
// leases made (the renter's side of SPEC §4.5).
func NewRentClient(ctx context.Context, o LightOptions, st store.Store) (*RentClient, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	n, err := p2p.New(p2p.Config{
		Key: o.Key, Bootstrap: o.Bootstrap, Mode: p2p.ModeClient, PubSub: true,
		ListenAddrs: ephemeralListen(o.Bootstrap), UserAgent: Software(), Logger: o.Logger, Now: o.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("rent: %w", err)
	}
	if err := n.Bootstrap(ctx, o.BootstrapTimeout); err != nil {
		n.Close()
		return nil, fmt.Errorf("rent: %w", err)
	}
	ov := market.NewOrderValidator(o.Now, orderRate, orderBurst)
	orders, err := p2p.JoinTopic(n.PubSub, n.Host.ID(), market.OrdersTopic, ov.Check, o.Logger)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("rent: %w", err)
	}
	r := market.NewRenter(market.RenterConfig{Net: n, Key: o.Key, Orders: orders, Store: st, Now: o.Now, Log: o.Logger})
	return &RentClient{net: n, orders: orders, renter: r, bootstrap: o.Bootstrap, now: o.Now, log: o.Logger}, nil
}

// ephemeralListen picks where a renter listens: on loopback
// when it joins through a loopback node (a local testnet), else on every
// interface; always on a port the OS chooses.
func ephemeralListen(bootstrap []peer.AddrInfo) []string {
	for _, b := range bootstrap {
		for _, a := range b.Addrs {
			if manet.IsIPLoopback(a) {
				return []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
			}
		}
	}
	return []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
}

// Network exposes the client's libp2p network.
func (c *RentClient) Network() *p2p.Network { return c.net }

// Close leaves the network.
func (c *RentClient) Close() error {
	return errors.Join(c.orders.Close(), c.net.Close())
}

func (c *RentClient) books() []peer.ID {
	var ids []peer.ID
	for _, b := range c.bootstrap {
		ids = append(ids, b.ID)
	}
	return ids
}

// asks fetches the order book of the first bootstrap node that answers.
func (c *RentClient) asks(ctx context.Context, models []string) ([]*market.Ask, error) {
	return firstBook(ctx, c.net, c.bootstrap, models, c.now)
}

// Rent leases GPUs as req describes. Before bidding the renter connects to
// the suppliers whose asks in a bootstrap node's book could match, so that
// their quotes arrive over connections it opened (and so through its NAT,
// if any): suppliers never dial a bidder.
func (c *RentClient) Rent(ctx context.Context, req market.RentRequest) (*market.Lease, error) {
	req.Books = c.books()
	if book := syncReputation(ctx, c.net, c.bootstrap, c.now, c.log); book != nil && req.Score == nil {
		req.Score = func(p peer.ID) (float64, bool, *float64) {
			s := book.Score(p)
			var up *float64
			if s.Pings > 0 {
				u := s.Uptime * 100
				up = &u
			}
			return s.Reputation, s.Verified, up
		}
		req.Proven = func(p peer.ID) bool { return proven(book.Score(p)) }
	}
	return c.renter.Rent(ctx, req)
}

// TakeAsk leases count GPUs for duration from the posted ask whose ID
// starts with prefix, at its price.
func (c *RentClient) TakeAsk(ctx context.Context, prefix string, count int, duration time.Duration) (*market.Lease, error) {
	asks, err := c.asks(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("rent: %w", err)
	}
	book := market.NewBook(c.now)
	for _, a := range asks {
		book.AddAsk(a)
	}
	a, err := book.FindAsk(strings.ToLower(prefix))
	if err != nil {
		return nil, fmt.Errorf("rent --ask %s: %w", prefix, err)
	}
	return c.renter.TakeAsk(ctx, a, count, duration, market.Terms{})
}

// ViewLease describes a validated lease: verified means both signatures
// (the renter's on the proposal, the supplier's on the lease) checked out,
// which every market.Lease value guarantees.
func ViewLease(l *market.Lease, state, role string) api.LeaseView {
	return api.LeaseView{
		LeaseID: l.ID.String(), Supplier: l.Supplier.String(), Renter: l.Renter.String(),
		Model: l.Model, Count: int(l.Count), PriceMicros: l.PriceMicros, Price: money.Micros(l.PriceMicros).String(),
		Start: l.Start().UTC(), End: l.End().UTC(), GPUs: l.GpuUuids, Verified: true, State: state, Role: role,
	}
}

// OpenStore opens the Badger store of a data dir for a command that runs
// without a node (a renter's light client).
func OpenStore(dataDir string) (store.Store, error) {
	return store.OpenBadger(storeDir(dataDir), store.WithGCInterval(0))
}

// StoredLeases lists the leases kept in the store of dataDir, for a
// renter whose node is not running.
func StoredLeases(dataDir string, now time.Time) ([]api.LeaseView, error) {
	st, err := OpenStore(dataDir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return leaseViews(st, now)
}

func leaseViews(st store.Store, now time.Time) ([]api.LeaseView, error) {
	ls, err := market.Leases(st, now)
	if err != nil {
		return nil, err
	}
	out := make([]api.LeaseView, 0, len(ls))
	for _, l := range ls {
		v := ViewLease(l.Lease, l.State, l.Role)
		v.Reason = l.Reason
		out = append(out, v)
	}
	return out, nil
}
