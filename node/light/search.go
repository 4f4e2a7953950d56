package light

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// Search finds suppliers of the models f allows (every model when it
// does not restrict them), adds the price and free count of each
// supplier's live ask from a bootstrap node's order book and its
// reputation, and returns the offers f accepts (market.MatchOffers).
//
// Suppliers' profiles come from the directories of the bootstrap nodes
// (p2p.DirectoryProtocol: one round trip each, all asked at once), each
// profile's signature and expiry checked here. When none answers, none
// lists a supplier (a node that has just started), or with
// WithCrossCheck, they come from the DHT as well: the provider
// records of the models (one lookup for all models), then each
// supplier's profile record. The order book and the attestations are
// fetched meanwhile; either may be missing.
func (c *Client) Search(ctx context.Context, f market.Filter) ([]market.Offer, error) {
	models := f.Models()
	if models != nil && len(models) == 0 {
		return nil, nil
	}
	booked := make(chan []*market.Ask, 1)
	go func() {
		qctx, cancel := context.WithTimeout(ctx, c.query)
		defer cancel()
		asks, _ := c.book(qctx, models)
		booked <- asks
	}()
	rated := make(chan *reputation.Book, 1)
	go func() { rated <- c.reputation(ctx) }()

	found := p2p.NewDirectory()
	answered := c.directories(ctx, models, found)
	if answered == 0 || found.Len() == 0 || c.cross {
		listed := found.Len()
		walked := c.walkDHT(ctx, models, found)
		if answered > 0 && found.Len() > listed {
			c.log.Warn("the DHT lists suppliers that no bootstrap node's directory did", "directories", listed, "dht", walked, "missing", found.Len()-listed)
		}
	}
	profiles := found.List(nil, math.MaxInt, math.MaxInt, c.now())
	if err := ctx.Err(); err != nil && len(profiles) == 0 {
		return nil, fmt.Errorf("search: %w", err)
	}
	in := market.OfferInputs{Asks: <-booked}
	if book := <-rated; book != nil {
		in.Score = book.Standing
	}
	return market.MatchOffers(profiles, f, in), nil
}

// directories asks every bootstrap node at once for the profiles of
// models it keeps and puts each checked profile in found; it returns how
// many nodes answered.
func (c *Client) directories(ctx context.Context, models []string, found *p2p.Directory) int {
	qctx, cancel := context.WithTimeout(ctx, c.query)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		answered int
	)
	for _, b := range c.bootstrap {
		wg.Go(func() {
			ps, rejected, err := p2p.QueryDirectory(qctx, c.net.Host, b.ID, models, c.now())
			if err != nil {
				c.log.Debug("directory", "node", b.ID, "err", err)
				return
			}
			if rejected > 0 {
				c.log.Warn("directory listed profiles that fail their checks", "node", b.ID, "rejected", rejected)
			}
			for _, p := range ps {
				found.Put(p)
			}
			mu.Lock()
			answered++
			mu.Unlock()
		})
	}
	wg.Wait()
	return answered
}

// walkDHT finds the suppliers of models (every supplier when nil)
// through their provider records, fetches and checks each one's profile
// record as soon as a lookup finds it, and puts it in found; it returns
// how many it fetched.
func (c *Client) walkDHT(ctx context.Context, models []string, found *p2p.Directory) int {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		fetched int
		sem     = make(chan struct{}, 16)
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
			found.Put(p)
			mu.Lock()
			fetched++
			mu.Unlock()
		}(ai.ID)
	}
	wg.Wait()
	return fetched
}
