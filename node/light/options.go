package light

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/store"
)

// Option configures a Client.
type Option func(*config)

// config is a Client's configuration, defaults filled in by New.
type config struct {
	key              crypto.PrivKey
	network          string
	store            store.Store
	bootstrap        []peer.AddrInfo
	bootstrapTimeout time.Duration
	queryTimeout     time.Duration
	log              *slog.Logger
	now              func() time.Time
	userAgent        string
	renting          bool
	crossCheck       bool
}

// WithKey sets the client's identity; a fresh ephemeral key by default.
func WithKey(k crypto.PrivKey) Option { return func(c *config) { c.key = k } }

// WithNetwork sets the ID of the network to join (p2p.ValidNetwork);
// p2p.DefaultNetwork by default. A bootstrap peer of another network
// fails New with p2p.ErrWrongNetwork.
func WithNetwork(id string) Option { return func(c *config) { c.network = id } }

// WithStore keeps the leases the client makes in st (the renter's side of
// SPEC §4.5); none are kept by default. It implies WithRenting.
func WithStore(st store.Store) Option {
	return func(c *config) { c.store, c.renting = st, true }
}

// WithBootstrap sets the peers to join through. At least one is required.
func WithBootstrap(peers ...peer.AddrInfo) Option {
	return func(c *config) { c.bootstrap = append(c.bootstrap, peers...) }
}

// WithBootstrapTimeout bounds joining the network; 10 s by default (and
// when d is 0).
func WithBootstrapTimeout(d time.Duration) Option {
	return func(c *config) { c.bootstrapTimeout = d }
}

// WithQueryTimeout bounds the queries whose answers are optional: the
// order book a search prices offers from, and the attestations
// reputation is built from; 1 s by default (and when d is 0). One that
// times out leaves prices or reputation unknown rather than failing.
func WithQueryTimeout(d time.Duration) Option {
	return func(c *config) { c.queryTimeout = d }
}

// WithLogger sets the client's logger; slog.Default by default.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithClock sets the clock records are validated against; time.Now by
// default.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithUserAgent sets what the client announces through identify, e.g.
// "gpumesh/0.1.0"; p2p's default when empty.
func WithUserAgent(ua string) Option { return func(c *config) { c.userAgent = ua } }

// WithRenting makes the client able to Rent and TakeAsk: it joins the
// orders topic (to publish bids) and listens on an ephemeral port.
func WithRenting() Option { return func(c *config) { c.renting = true } }

// WithCrossCheck makes every Search also walk the DHT, as it does when no
// bootstrap node answers from its directory, and merge what it finds:
// slower (a DHT lookup, then one per supplier), but a directory that
// withholds suppliers is caught, and logged as such.
func WithCrossCheck() Option { return func(c *config) { c.crossCheck = true } }

// newConfig applies opts over the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if len(c.bootstrap) == 0 {
		return c, ErrNoBootstrap
	}
	if c.key == nil {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return c, fmt.Errorf("light client: key: %w", err)
		}
		c.key = k
	}
	if c.bootstrapTimeout == 0 {
		c.bootstrapTimeout = 10 * time.Second
	}
	if c.queryTimeout == 0 {
		c.queryTimeout = time.Second
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}
