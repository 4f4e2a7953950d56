package light

import (
	"context"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// Search finds suppliers of the models f allows (all known models when
// it does not restrict them) through their DHT provider records, fetches
// and validates each one's profile, adds the price and free count of each
// supplier's live ask from a bootstrap node's order book (each ask checked
// again here) and its reputation, and returns the offers f accepts
// (market.MatchOffers). Suppliers whose profile is missing, invalid or
// expired are skipped.
func (c *Client) Search(ctx context.Context, f market.Filter) ([]market.Offer, error) {
	models := f.Models()
	if models == nil {
		models = catalog.Slugs()
	}
	if len(models) == 0 {
		return nil, nil
	}
	// The order book (for prices and free counts) and the attestations
	// (for reputation) are fetched meanwhile; either may be missing.
	booked := make(chan []*market.Ask, 1)
	go func() {
		qctx, cancel := context.WithTimeout(ctx, c.query)
		defer cancel()
		asks, _ := c.book(qctx, models)
		booked <- asks
	}()
	rated := make(chan *reputation.Book, 1)
	go func() { rated <- c.reputation(ctx) }()
	// Fetch each supplier's profile as soon as a lookup finds it, while
	// the lookups of the other models go on.
	var (
		mu       sync.Mutex
		profiles []*p2p.Profile
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 16)
	)
	for ai := range c.net.FindSuppliersAsync(ctx, models) {
		wg.Add(1)
		go func(id peer.ID) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p, err := c.net.FetchProfile(ctx, id, 2)
			if err != nil {
				c.log.Debug("skip supplier", "peer", id, "err", err)
				return
			}
			mu.Lock()
			profiles = append(profiles, p)
			mu.Unlock()
		}(ai.ID)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil && len(profiles) == 0 {
		return nil, fmt.Errorf("search: %w", err)
	}
	in := market.OfferInputs{Asks: <-booked}
	if book := <-rated; book != nil {
		in.Score = book.Standing
	}
	return market.MatchOffers(profiles, f, in), nil
}
