package light

import (
	"context"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// reputation builds a reputation book, in memory, from the attestations
// the first bootstrap peer to answer keeps, each verified here, with the
// bootstrap peers pre-trusted; nil when none answers within the query
// timeout.
func (c *Client) reputation(ctx context.Context) *reputation.Book {
	book, err := reputation.Open(store.NewMemory(store.WithClock(c.now)), c.net.Host.ID(), reputation.Config{Now: c.now, PreTrusted: c.bootstrapIDs(), Log: c.log})
	if err != nil {
		c.log.Debug("reputation book", "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.query)
	defer cancel()
	for _, b := range c.bootstrap {
		if _, err := reputation.FetchSync(ctx, c.net.Host, b.ID, book); err == nil {
			return book
		}
	}
	return nil
}

// book fetches the live asks for models (all when nil) from the order
// book of the first bootstrap peer that answers; each ask is checked
// again here.
func (c *Client) book(ctx context.Context, models []string) ([]*market.Ask, error) {
	err := ErrNoBootstrap
	for _, b := range c.bootstrap {
		var asks []*market.Ask
		if asks, err = market.QueryBook(ctx, c.net.Host, b.ID, models, c.now()); err == nil {
			return asks, nil
		}
	}
	return nil, err
}
