package light

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/gpumesh/gpumesh/market"
)

// ErrNoStore is returned by Release for a client with no store: the
// lease to release is read from the store that rent kept it in.
var ErrNoStore = errors.New("no data dir: the lease is kept in the data dir it was rented with (--data)")

// Release ends the lease whose ID starts with prefix, rented from the
// client's store, before its end: it finds the supplier (connected
// already, in a bootstrap node's order book, or through the DHT) and
// sends it the renter's signed release (market.Renter.Release). It
// returns the released lease and when it ended.
func (c *Client) Release(ctx context.Context, prefix string) (*market.Lease, time.Time, error) {
	if c.renter == nil {
		return nil, time.Time{}, ErrNotRenting
	}
	if c.store == nil {
		return nil, time.Time{}, ErrNoStore
	}
	l, err := market.FindLease(c.store, prefix, market.RoleRenter, c.now())
	if err != nil {
		return nil, time.Time{}, err
	}
	c.findSupplier(ctx, l.Supplier)
	at, err := c.renter.Release(ctx, l.Lease)
	return l.Lease, at, err
}

// findSupplier adds the addresses of supplier to the peerstore when
// the client has no connection to it: those of its asks in a bootstrap
// node's book, else the DHT's. Failing that, the release's dial says so.
func (c *Client) findSupplier(ctx context.Context, supplier peer.ID) {
	h := c.net.Host
	if len(h.Network().ConnsToPeer(supplier)) > 0 {
		return
	}
	if asks, err := c.book(ctx, nil); err == nil {
		for _, a := range asks {
			if a.Supplier == supplier && len(a.Addrs) > 0 {
				h.Peerstore().AddAddrs(supplier, a.Addrs, peerstore.TempAddrTTL)
				return
			}
		}
	}
	if c.net.DHT != nil {
		fctx, cancel := context.WithTimeout(ctx, c.query)
		defer cancel()
		if ai, err := c.net.DHT.FindPeer(fctx, supplier); err == nil {
			h.Peerstore().AddAddrs(supplier, ai.Addrs, peerstore.TempAddrTTL)
		}
	}
}
