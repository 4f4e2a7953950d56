package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// LightClient is a short-lived DHT client: it joins the network through
// bootstrap peers without serving anything, for search (and later rent).
type LightClient struct {
	net       *p2p.Network
	log       *slog.Logger
	bootstrap []peer.AddrInfo
	now       func() time.Time
}

// LightOptions configure a LightClient.
type LightOptions struct {
	// Key is the identity to use; a fresh ephemeral one when nil.
	Key crypto.PrivKey
	// Bootstrap peers to join through. Required.
	Bootstrap []peer.AddrInfo
	// BootstrapTimeout bounds joining; 10 s when zero.
	BootstrapTimeout time.Duration
	// Logger for the client; slog.Default when nil.
	Logger *slog.Logger
	// Now is the clock for validating records; time.Now when nil.
	Now func() time.Time
}

// ErrNoBootstrap means a light client was started without bootstrap peers.
var ErrNoBootstrap = fmt.Errorf("no bootstrap peers: pass --bootstrap MULTIADDR (or set %s)", EnvName("bootstrap"))

// fill checks o and sets its defaults.
func (o *LightOptions) fill() error {
	if len(o.Bootstrap) == 0 {
		return ErrNoBootstrap
	}
	if o.Key == nil {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return fmt.Errorf("light client: key: %w", err)
		}
		o.Key = k
	}
	if o.BootstrapTimeout == 0 {
		o.BootstrapTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// NewLightClient joins the network in DHT client mode.
func NewLightClient(ctx context.Context, o LightOptions) (*LightClient, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	n, err := p2p.New(p2p.Config{
		Key: o.Key, Bootstrap: o.Bootstrap, Mode: p2p.ModeClient,
		UserAgent: Software(), Logger: o.Logger, Now: o.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("light client: %w", err)
	}
	if err := n.Bootstrap(ctx, o.BootstrapTimeout); err != nil {
		n.Close()
		return nil, fmt.Errorf("light client: %w", err)
	}
	return &LightClient{net: n, log: o.Logger, bootstrap: o.Bootstrap, now: o.Now}, nil
}

// Close leaves the network.
func (c *LightClient) Close() error { return c.net.Close() }

// reputation builds a reputation book from the attestations a bootstrap
// node keeps, each verified here, with the bootstrap peers pre-trusted;
// nil when no bootstrap peer answers within a second.
func (c *LightClient) reputation(ctx context.Context) *reputation.Book {
	return syncReputation(ctx, c.net, c.bootstrap, c.now, c.log)
}

// syncReputation is the light clients' reputation: attestations fetched
// from the first bootstrap peer that answers, checked, and scored in
// memory with the bootstrap peers pre-trusted.
func syncReputation(ctx context.Context, n *p2p.Network, bootstrap []peer.AddrInfo, now func() time.Time, log *slog.Logger) *reputation.Book {
	trusted := make([]peer.ID, 0, len(bootstrap))
	for _, b := range bootstrap {
		trusted = append(trusted, b.ID)
	}
	book, err := reputation.Open(store.NewMemory(store.WithClock(now)), n.Host.ID(), reputation.Config{Now: now, PreTrusted: trusted, Log: log})
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, b := range bootstrap {
		if _, err := reputation.FetchSync(ctx, n.Host, b.ID, book); err == nil {
			return book
		}
	}
	return nil
}

// asks fetches the live asks for models from the order book of the first
// bootstrap peer that answers, within a second; none if none does.
func (c *LightClient) asks(ctx context.Context, models []string) []*market.Ask {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	asks, _ := firstBook(ctx, c.net, c.bootstrap, models, c.now)
	return asks
}

// firstBook fetches the live asks for models (all when nil) from the
// order book of the first bootstrap peer that answers; each ask is
// checked again here.
func firstBook(ctx context.Context, n *p2p.Network, bootstrap []peer.AddrInfo, models []string, now func() time.Time) ([]*market.Ask, error) {
	err := ErrNoBootstrap
	for _, b := range bootstrap {
		var asks []*market.Ask
		if asks, err = market.QueryBook(ctx, n.Host, b.ID, models, now()); err == nil {
			return asks, nil
		}
	}
	return nil, err
}

// Network exposes the client's libp2p network.
func (c *LightClient) Network() *p2p.Network { return c.net }

// Search finds suppliers of the models f allows (all known models when
// it does not restrict them) through their DHT provider records, fetches
// and validates each one's profile, adds the price and free count of each
// supplier's live ask from a bootstrap node's order book (each ask checked
// again here), and returns the offers f accepts.
// Suppliers whose profile is missing, invalid or expired are skipped.
func (c *LightClient) Search(ctx context.Context, f market.Filter) ([]market.Offer, error) {
	models := f.Models()
	if models == nil {
		models = catalog.Slugs()
	}
	if len(models) == 0 {
		return nil, nil
	}
	// The order book (for prices and free counts) and the attestations
	// (for reputation) are fetched meanwhile.
	booked := make(chan []*market.Ask, 1)
	go func() { booked <- c.asks(ctx, models) }()
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
	return MatchOffers(profiles, f, <-booked, <-rated), nil
}
