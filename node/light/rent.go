package light

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
)

// Rent leases GPUs as req describes, screening suppliers by the
// reputation built from a bootstrap peer's attestations unless req brings
// its own Score. Before bidding the renter connects to the suppliers whose
// asks in a bootstrap node's book could match, so that their quotes arrive
// over connections it opened (and so through its NAT, if any): suppliers
// never dial a bidder.
func (c *Client) Rent(ctx context.Context, req market.RentRequest) (*market.Lease, error) {
	if c.renter == nil {
		return nil, ErrNotRenting
	}
	req.Books = c.bootstrapIDs()
	if req.Score == nil {
		if book := c.reputation(ctx); book != nil {
			req.ScreenBy(book)
		}
	}
	return c.renter.Rent(ctx, req)
}

// TakeAsk leases count GPUs for duration from the posted ask whose ID
// starts with prefix, at its price, as a bootstrap node's order book
// lists it. An ask of simulated GPUs is taken only with allowSimulated.
func (c *Client) TakeAsk(ctx context.Context, prefix string, count int, duration time.Duration, allowSimulated bool) (*market.Lease, error) {
	if c.renter == nil {
		return nil, ErrNotRenting
	}
	asks, err := c.book(ctx, nil)
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
	if a.Simulated && !allowSimulated {
		return nil, fmt.Errorf("rent --ask %s: %w", prefix, ErrSimulatedAsk)
	}
	return c.renter.TakeAsk(ctx, a, count, duration, market.Terms{})
}

// bootstrapIDs are the bootstrap peers, whose order books explain a rent
// that matched nothing.
func (c *Client) bootstrapIDs() []peer.ID {
	ids := make([]peer.ID, 0, len(c.bootstrap))
	for _, b := range c.bootstrap {
		ids = append(ids, b.ID)
	}
	return ids
}
