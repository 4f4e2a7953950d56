package light

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// ErrNoBootstrap means a client was started without bootstrap peers.
var ErrNoBootstrap = errors.New("no bootstrap peers")

// ErrNotRenting means Rent or TakeAsk was called on a client built
// without WithRenting (or WithStore).
var ErrNotRenting = errors.New("light client cannot rent: built without WithRenting")

// ErrSimulatedAsk means TakeAsk was asked for an ask of simulated GPUs
// without allowing them.
var ErrSimulatedAsk = errors.New("the ask offers simulated GPUs, which are not real hardware (allow simulated GPUs to take it)")

// Client is a light client of the network. Its methods are safe for
// concurrent use; Close it when done.
type Client struct {
	net       *p2p.Network
	orders    *p2p.Topic[market.Order] // nil unless renting
	renter    *market.Renter           // nil unless renting
	store     store.Store              // where leases are kept (WithStore); nil: none
	bootstrap []peer.AddrInfo
	query     time.Duration
	cross     bool
	now       func() time.Time
	log       *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// New joins the network in DHT client mode through the bootstrap peers
// (WithBootstrap is required) within the bootstrap timeout. It fails with
// p2p.ErrWrongNetwork, naming both networks, when the bootstrap peers it
// reached are all on another network than WithNetwork's.
func New(ctx context.Context, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	pc := p2p.Config{
		Key: cfg.key, Network: cfg.network, Bootstrap: cfg.bootstrap, Mode: p2p.ModeClient,
		UserAgent: cfg.userAgent, Logger: cfg.log, Now: cfg.now,
	}
	if cfg.renting {
		pc.PubSub, pc.ListenAddrs = true, ephemeralListen(cfg.bootstrap)
	}
	n, err := p2p.New(pc)
	if err != nil {
		return nil, fmt.Errorf("light client: %w", err)
	}
	if err := n.Bootstrap(ctx, cfg.bootstrapTimeout); err != nil {
		n.Close()
		return nil, fmt.Errorf("light client: %w", err)
	}
	c := &Client{net: n, store: cfg.store, bootstrap: cfg.bootstrap, query: cfg.queryTimeout, cross: cfg.crossCheck, now: cfg.now, log: cfg.log}
	if cfg.renting {
		ov := market.NewOrderValidator(cfg.now, market.OrderRate, market.OrderBurst)
		if c.orders, err = p2p.JoinTopic(n.PubSub, n.Host.ID(), market.OrdersTopic, ov.Check, cfg.log); err != nil {
			n.Close()
			return nil, fmt.Errorf("light client: %w", err)
		}
		c.renter = market.NewRenter(market.RenterConfig{Net: n, Key: cfg.key, Orders: c.orders, Store: cfg.store, Now: cfg.now, Log: cfg.log})
	}
	return c, nil
}

// ephemeralListen picks where a renting client listens: on loopback when
// it joins through a loopback node (a local testnet), else on every
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
func (c *Client) Network() *p2p.Network { return c.net }

// Close leaves the network. It is safe to call more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		if c.renter != nil {
			c.renter.Close() // its bids' gossip, before the topic goes
		}
		if c.orders != nil {
			errs = append(errs, c.orders.Close())
		}
		c.closeErr = errors.Join(append(errs, c.net.Close())...)
	})
	return c.closeErr
}
