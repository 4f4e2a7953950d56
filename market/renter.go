package market

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// RenterConfig configures a Renter.
type RenterConfig struct {
	Net    *p2p.Network
	Key    crypto.PrivKey
	Orders *p2p.Topic[Order] // the orders topic, to publish bids on
	Store  store.Store       // where leases are kept; none when nil
	// Book is the renter's own order book (a node keeps one): Rent finds
	// the suppliers to connect to there. Without it (a light client), it
	// asks the first of RentRequest.Books that answers.
	Book *Book
	Now  func() time.Time
	Log  *slog.Logger
	// Metrics counts quotes and leases; nil counts nothing.
	Metrics *metrics.Market
}

// Renter is the buying side: it publishes bids, gathers the quotes that
// suppliers send over QuoteProtocol, and proposes leases over
// LeaseProtocol, falling back to the next quote on refusal.
type Renter struct {
	cfg  RenterConfig
	self peer.ID
	log  *slog.Logger

	mu      sync.Mutex
	waiting map[ID]chan *Quote // bid ID -> quotes
	// gossip counts the bids still being sent straight (sendBid),
	// gossiped or withdrawn (gossipBid), for Close.
	gossip sync.WaitGroup
}

// NewRenter installs the quote protocol on cfg.Net.
func NewRenter(cfg RenterConfig) *Renter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Renter{cfg: cfg, self: cfg.Net.Host.ID(), log: cfg.Log.With("sub", "renter"), waiting: map[ID]chan *Quote{}}
	p2p.Serve(cfg.Net.Host, QuoteProtocol, r.handleQuote)
	return r
}

func (r *Renter) handleQuote(st network.Stream) error {
	raw, err := p2p.ReadRaw(st, QuoteType.MaxSize)
	if err != nil {
		return err
	}
	q, err := OpenQuote(raw, r.cfg.Now())
	if err != nil {
		r.cfg.Metrics.Quote(metrics.Renter, metrics.QuoteInvalid)
		return err
	}
	if q.Renter != r.self || q.Supplier != st.Conn().RemotePeer() {
		r.cfg.Metrics.Quote(metrics.Renter, metrics.QuoteInvalid)
		return fmt.Errorf("quote for %s from %s sent by %s", q.Renter, q.Supplier, st.Conn().RemotePeer())
	}
	if q.Decline != "" {
		r.cfg.Metrics.Quote(metrics.Renter, metrics.QuoteDeclined)
	} else {
		r.cfg.Metrics.Quote(metrics.Renter, metrics.QuoteReceived)
	}
	r.mu.Lock()
	ch := r.waiting[q.BidID]
	r.mu.Unlock()
	if ch == nil {
		return nil // a quote for a bid we no longer wait on
	}
	select {
	case ch <- q:
	default:
	}
	return nil
}

// Standings are how a renter screens suppliers: each one's reputation,
// verified status and uptime (nil when unknown), and whether it has
// earned trust rather than merely exists. A reputation book
// (verify/reputation.Book) is one; market does not read attestations.
type Standings interface {
	Standing(p peer.ID) (rep float64, verified bool, uptimePct *float64)
	Proven(p peer.ID) bool
}

// ScreenBy has r screen suppliers by s: s gives the Score and Proven that
// r does not bring itself.
func (r *RentRequest) ScreenBy(s Standings) {
	if r.Score == nil {
		r.Score = s.Standing
	}
	if r.Proven == nil {
		r.Proven = s.Proven
	}
}

// RentRequest is what a renter asks for.
type RentRequest struct {
	Filter   Filter
	Count    int
	Duration time.Duration
	MaxPrice money.Micros // per GPU-hour
	// Wait bounds how long quotes are collected (default 2 s).
	Wait time.Duration
	// Enough stops collecting early once this many acceptable offers
	// are in (default 3).
	Enough int
	// Exclude lists suppliers never to lease from.
	Exclude []peer.ID
	// Books are nodes whose order book explains a failure to match.
	Books []peer.ID
	// Score gives a supplier's reputation, verified status and uptime
	// (nil: all unknown). Quotes from suppliers below MinReputation, or
	// failing the filter's rep, uptime or verified terms, are not taken.
	Score         func(peer.ID) (rep float64, verified bool, uptimePct *float64)
	MinReputation float64
	// Proven says whether a supplier has earned trust (verified, or
	// passed by a trusted challenger and above the floor) rather than
	// merely exists; nil: nobody is proven. Proven suppliers are tried
	// first. Unproven ones, such as any fresh key, are left out unless
	// AllowUnproven is set, and then tried only after every proven one.
	Proven        func(peer.ID) bool
	AllowUnproven bool
	// AllowSimulated lets a filter that says nothing of simulated GPUs
	// match them too; without it the rent adds simulated=false to the
	// filter (Filter.RealOnly), bid included, and a failed rent counts
	// the simulated suppliers it left out.
	AllowSimulated bool
	// Terms are the metering terms put in the proposal (zero: defaults,
	// no job spec bound).
	Terms Terms
	// Unreachable says why what the lease is for cannot reach supplier
	// from this renter ("" when it can), e.g. a job session that needs a
	// direct connection to a supplier behind a symmetric NAT. Such a
	// supplier's quote is not taken, and a failed rent names the reason
	// instead of leaving the renter to time out after the lease. nil:
	// every supplier is reachable.
	Unreachable func(supplier peer.ID) string

	// asked is the filter as given, before Rent applied RealOnly;
	// realOnly reports that it added simulated=false.
	asked    Filter
	realOnly bool
}

// NoMatch is the error of a rent that made no lease: each reason says
// what stood in the way, from the same checks that matching uses.
type NoMatch struct {
	Reasons []string
}

func (e *NoMatch) Error() string {
	return "no lease: " + strings.Join(e.Reasons, "; ")
}

// attempt is one proposal and what came of it.
type attempt struct {
	q      *Quote
	reason string
}

// Rent publishes a bid for req, collects quotes, and leases from the best
// acceptable one: cheapest, then (when reputation lands) most reputable,
// then nearest by round-trip time. Quotes are collected until every
// supplier it connected to has answered, req.Enough acceptable ones are
// in, or req.Wait passes; when every offer collected is refused, the
// answers still to come are collected and tried. A refused proposal
// falls back to the next quote. With no lease it returns a *NoMatch that
// says why.
func (r *Renter) Rent(ctx context.Context, req RentRequest) (*Lease, error) {
	req = req.withDefaults()
	b, err := r.openBid(ctx, req)
	if err != nil {
		return nil, err
	}
	defer b.close()
	// Lease from the best offers collected; when every one of them
	// refuses, collect the answers still to come (within the same
	// ceiling) and try those.
	f := noMatchFacts{unreachable: b.unreachable}
	for {
		offers, more := b.next(ctx, &f)
		for _, q := range offers {
			l, refused, err := r.proposeQuote(ctx, q, req.Terms)
			if err != nil {
				f.tried = append(f.tried, attempt{q, err.Error()})
				continue
			}
			if refused != "" {
				f.tried = append(f.tried, attempt{q, refused})
				continue
			}
			return l, nil
		}
		if !more {
			break
		}
		b.c.extend()
	}
	return nil, r.explain(ctx, req, f)
}

// withDefaults fills req's Wait and Enough and applies RealOnly to its
// filter, keeping the filter as asked.
func (req RentRequest) withDefaults() RentRequest {
	if req.Wait == 0 {
		req.Wait = 2 * time.Second
	}
	if req.Enough == 0 {
		req.Enough = 3
	}
	req.asked = req.Filter
	req.Filter, req.realOnly = req.Filter.RealOnly(req.AllowSimulated)
	return req
}

// A bidRound is one bid out for a rent: the suppliers it was sent to
// straight, and the collection of their answers. close ends it.
type bidRound struct {
	r           *Renter
	req         RentRequest
	id          ID
	cands       []*Ask
	expect      map[peer.ID]bool
	unreachable []attempt // asks left out before the bid (screenAsksReach)
	c           *collector
	t0          time.Time
	times       []any // how long finding, connecting and bidding took, for the log
	closers     []func()
}

// openBid finds the suppliers that could serve req (its filter applied,
// its defaults filled), connects to them, and sends them a bid, straight
// and by gossip; the round's collector gathers their answers.
func (r *Renter) openBid(ctx context.Context, req RentRequest) (_ *bidRound, err error) {
	t0 := time.Now()
	b := &bidRound{r: r, req: req, t0: t0}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	b.cands, b.unreachable = screenAsksReach(r.candidates(ctx, req), req)
	tCands := time.Since(t0)
	b.expect = r.connectSuppliers(ctx, b.cands, req)
	tConnect := time.Since(t0)
	now := r.cfg.Now()
	bid := &pb.Bid{
		Nonce: nonce(), CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(req.Wait + BidLife).UnixMilli(),
		Filter: req.Filter.String(), Count: uint32(req.Count), DurationS: uint32(req.Duration / time.Second),
		MaxPriceMicros: int64(req.MaxPrice),
	}
	for _, a := range r.cfg.Net.Host.Addrs() {
		if len(bid.Addrs) < 16 {
			bid.Addrs = append(bid.Addrs, a.Bytes())
		}
	}
	raw, err := SealBid(bid, r.cfg.Key)
	if err != nil {
		return nil, err
	}
	bidID := IDOf(raw)
	b.id = bidID
	// The renter's own book applies the caps relays apply: a bid it
	// refuses, they would refuse too, and penalise the renter's relay.
	if r.cfg.Book != nil {
		ob, err := OpenBid(raw, now)
		if err != nil {
			return nil, fmt.Errorf("rent: own bid invalid: %w", err)
		}
		if err := r.cfg.Book.AddBidFrom(ob, ""); err != nil {
			return nil, fmt.Errorf("rent: the order book refuses the bid (a renter has at most %d live bids; wait for one to end): %w", MaxBidsPerRenter, err)
		}
	}
	ch := make(chan *Quote, 256)
	r.mu.Lock()
	r.waiting[bidID] = ch
	r.mu.Unlock()
	b.defer_(func() {
		r.mu.Lock()
		delete(r.waiting, bidID)
		r.mu.Unlock()
	})
	// The suppliers connected above get the bid straight, too, so that
	// their answers do not wait on gossip; the rest hear it by gossip.
	b.defer_(r.sendBid(ctx, raw, b.expect))
	// Once the rent is over, its bid is withdrawn (gossipBid).
	over := make(chan []byte, 1)
	b.defer_(func() { over <- r.withdrawOwn(bidID) })
	if err := r.gossipBid(ctx, raw, bidID, len(b.expect) > 0, over); err != nil {
		return nil, err
	}
	b.times = []any{"book", tCands, "connected", tConnect, "bid_out", time.Since(t0)}
	b.c = r.newCollector(ch, req, b.expect)
	b.defer_(b.c.stop)
	return b, nil
}

// defer_ has close run f, before what was deferred earlier.
func (b *bidRound) defer_(f func()) { b.closers = append(b.closers, f) }

// close stops the collection and withdraws the bid.
func (b *bidRound) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
}

// next returns, ranked and screened, the acceptable offers that came in
// since the last call (collector.collect), and adds to f the answers and
// offers screened out; more reports whether answers may still come.
func (b *bidRound) next(ctx context.Context, f *noMatchFacts) (offers []*Quote, more bool) {
	offers, more = b.c.collect(ctx)
	b.r.log.Debug("rent: quotes in", append([]any{"bid", b.id.Short(), "offers", len(offers), "more", more,
		"asks", len(b.cands), "expected", len(b.expect), "first_offer", b.c.first, "collected", time.Since(b.t0)}, b.times...)...)
	f.declines = append(f.declines, b.c.takeDeclines()...)
	offers, sh, un := b.r.screen(offers, b.req)
	offers, ur := screenReach(offers, b.req)
	f.offers, f.shunned, f.unproven, f.unreachable = append(f.offers, offers...), append(f.shunned, sh...), append(f.unproven, un...), append(f.unreachable, ur...)
	return offers, more
}

// sendBid sends the sealed bid raw to each of suppliers over
// BidProtocol, all at once, over the connections the renter has open (it
// never dials: a supplier it could not connect to gets the bid by gossip
// only). A supplier that does not speak BidProtocol (an older version)
// refuses the stream and answers the gossiped copy. The returned func
// stops the sends still going, without waiting for them: a send that is
// writing to a supplier too busy to read ends at its stream deadline
// (p2p.StreamTimeout), and the rent's lease should not wait on that.
// Close waits for them.
func (r *Renter) sendBid(ctx context.Context, raw []byte, suppliers map[peer.ID]bool) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ctx = network.WithNoDial(ctx, "a bid goes straight only over the renter's own connection")
	ctx = network.WithAllowLimitedConn(ctx, string(BidProtocol))
	for p := range suppliers {
		r.gossip.Go(func() {
			if err := p2p.Send(ctx, r.cfg.Net.Host, p, BidProtocol, raw); err != nil {
				r.log.Debug("bid not sent straight; the supplier hears it by gossip", "supplier", p, "err", err)
			}
		})
	}
	return cancel
}

// screenAsksReach leaves out, before the bid, the asks of suppliers that
// req.Unreachable says the lease's use cannot reach, with the reason for
// each (once per supplier and model, at its ask's price): the renter does
// not wait on an answer that could not lead to a lease, and says why at
// once, whether or not such a supplier would have answered.
func screenAsksReach(asks []*Ask, req RentRequest) (kept []*Ask, unreachable []attempt) {
	if req.Unreachable == nil {
		return asks, nil
	}
	told := map[supplierModel]bool{}
	for _, a := range asks {
		why := req.Unreachable(a.Supplier)
		if why == "" {
			kept = append(kept, a)
			continue
		}
		if k := (supplierModel{a.Supplier, a.Model}); !told[k] {
			told[k] = true
			unreachable = append(unreachable, attempt{&Quote{Quote: &pb.Quote{Model: a.Model, PriceMicros: a.PriceMicros}, Supplier: a.Supplier}, why})
		}
	}
	return kept, unreachable
}

// screenReach drops the offers of suppliers that req.Unreachable says the
// lease's use cannot reach, with the reason for each.
func screenReach(offers []*Quote, req RentRequest) (kept []*Quote, unreachable []attempt) {
	if req.Unreachable == nil {
		return offers, nil
	}
	for _, q := range offers {
		if why := req.Unreachable(q.Supplier); why != "" {
			unreachable = append(unreachable, attempt{q, why})
			continue
		}
		kept = append(kept, q)
	}
	return kept, unreachable
}

// scoreOf is supplier's reputation by req.Score.
func scoreOf(req RentRequest, supplier peer.ID) float64 {
	rep, _, _ := req.Score(supplier)
	return rep
}

// gossipBid publishes the bid raw on the orders topic (to every order
// book, the Explorer and the suppliers the renter did not connect to)
// and, once the rent is over and has withdrawn the bid from its own book
// (its cancel comes on over), publishes that cancel when the bid went
// out, so that renting often does not keep MaxBidsPerRenter live bids
// out everywhere.
//
// When suppliers got the bid straight (straight), the publish runs
// beside the collection of their answers, not before it, and so does the
// cancel after the rent: on a loaded node GossipSub's event loop can hold
// a publish for seconds (it takes a message only when its loop comes
// round, whatever the caller's deadline), and neither the answers nor
// the lease returned, whose job must start within its claim window,
// should wait on that. A failed publish then costs only the gossiped
// copy. With no supplier connected, gossip is the bid's only way out:
// gossipBid publishes before it returns and fails with the publish.
// Close waits for the publishes still going.
func (r *Renter) gossipBid(ctx context.Context, raw []byte, id ID, straight bool, over <-chan []byte) error {
	publish := func() error {
		if err := r.cfg.Orders.Publish(ctx, raw); err != nil {
			return fmt.Errorf("rent: publish bid: %w", err)
		}
		r.log.Debug("bid published", "bid", id.Short())
		return nil
	}
	out := true
	if !straight {
		if err := publish(); err != nil {
			return err
		}
	}
	r.gossip.Add(1)
	go func() {
		defer r.gossip.Done()
		if straight {
			if err := publish(); err != nil {
				r.log.Debug("bid not gossiped; the suppliers connected have it straight", "bid", id.Short(), "err", err)
				out = false
			}
		}
		if cancel := <-over; cancel != nil && out {
			r.publishCancel(ctx, id, cancel)
		}
	}()
	return nil
}

// publishCancel gossips the cancel of bid id, best effort, within
// cancelBidTimeout even when ctx has ended.
func (r *Renter) publishCancel(ctx context.Context, id ID, raw []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelBidTimeout)
	defer cancel()
	if err := r.cfg.Orders.Publish(ctx, raw); err != nil {
		r.log.Debug("publish the cancel of a bid", "bid", id.Short(), "err", err)
	}
}

// withdrawOwn seals the cancel of bid id and applies it to the renter's
// own book; it returns the cancel (nil if it could not be sealed).
func (r *Renter) withdrawOwn(id ID) []byte {
	now := r.cfg.Now()
	raw, err := SealCancel(&pb.Cancel{Nonce: nonce(), CreatedMs: now.UnixMilli(), OrderId: id[:]}, r.cfg.Key)
	if err != nil {
		r.log.Debug("seal the cancel of a bid", "bid", id.Short(), "err", err)
		return nil
	}
	if c, err := OpenCancel(raw, now); err == nil && r.cfg.Book != nil {
		r.cfg.Book.Cancel(c)
	}
	return raw
}

// cancelBidTimeout bounds publishing the cancel of a rent's bid.
const cancelBidTimeout = 2 * time.Second

// Close waits, at most CloseWait, for what rents that have returned
// still send: their bids straight to suppliers, and their bids and the
// cancels that withdraw them handed to GossipSub, so that a light client
// exiting after a rent does not leave its bid live in every book until
// it expires. Call it before closing the network.
func (r *Renter) Close() {
	done := make(chan struct{})
	go func() {
		r.gossip.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(CloseWait):
		r.log.Debug("renter closed with bids' gossip still going")
	}
}

// CloseWait bounds Renter.Close.
const CloseWait = 3 * time.Second

// Connecting to suppliers before bidding.
const (
	// maxConnectSuppliers bounds the suppliers a renter connects to
	// before bidding.
	maxConnectSuppliers = 32
	// connectTimeout bounds connecting to them, all in parallel.
	connectTimeout = 5 * time.Second
	// maxDialAddrs bounds the addresses of one ask dialled: an ask's
	// author chooses them, so they are not a list of targets to flood.
	maxDialAddrs = 4
)

// candidates lists the live asks of the models req allows: from the
// renter's own book, else from the first of req.Books that answers.
func (r *Renter) candidates(ctx context.Context, req RentRequest) []*Ask {
	models := req.Filter.Models()
	if r.cfg.Book != nil {
		if models == nil {
			return r.cfg.Book.Asks("")
		}
		var out []*Ask
		for _, m := range models {
			out = append(out, r.cfg.Book.Asks(m)...)
		}
		return out
	}
	for _, b := range req.Books {
		bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		asks, err := r.QueryBook(bctx, b, models)
		cancel()
		if err == nil {
			return asks
		}
		r.log.Debug("no order book to find suppliers in", "node", b, "err", err)
	}
	return nil
}

// connectSuppliers connects to the suppliers of asks that could match
// req, at the addresses each supplier signed in its ask (at most
// maxDialAddrs of them). Suppliers send quotes only over a connection the
// bidder has open (they never dial the addresses a bid lists), so this
// is what lets their quotes come back. Asks offering fewer than
// req.Count GPUs are skipped, and so are asks priced above req.MaxPrice,
// except auction asks: an auction supplier's ask shows its list price,
// and it quotes a bid's maximum down to a floor it does not announce
// (Pricer), so its answer is worth asking for. Unproven suppliers are
// skipped unless req.AllowUnproven. Proven suppliers go first, then the
// cheaper (so auction asks above the maximum come after every ask within
// it), so that cheap asks of fresh keys cannot take every slot.
// It returns the suppliers connected: those whose quote or decline the
// rent can expect.
func (r *Renter) connectSuppliers(ctx context.Context, asks []*Ask, req RentRequest) map[peer.ID]bool {
	proven := func(a *Ask) bool { return req.Proven != nil && req.Proven(a.Supplier) }
	var pick []*Ask
	seen := map[peer.ID]bool{r.self: true}
	for _, e := range req.Exclude {
		seen[e] = true
	}
	for _, a := range asks {
		switch {
		case seen[a.Supplier], !onlyAttrsUnknown(req.Filter, a):
		case req.MaxPrice > 0 && money.Micros(a.PriceMicros) > req.MaxPrice && PricingMode(a.Pricing) != Auction:
		case int(a.Count) < req.Count:
		case !req.AllowUnproven && !proven(a):
		case req.Score != nil && !proven(a) && scoreOf(req, a.Supplier) < req.MinReputation:
		default:
			seen[a.Supplier] = true
			pick = append(pick, a)
		}
	}
	slices.SortStableFunc(pick, func(x, y *Ask) int {
		if px, py := proven(x), proven(y); px != py {
			if px {
				return -1
			}
			return 1
		}
		return cmp.Compare(x.PriceMicros, y.PriceMicros)
	})
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		connected = map[peer.ID]bool{}
	)
	for _, a := range pick[:min(len(pick), maxConnectSuppliers)] {
		// A limited (relayed) connection carries the bid's quote; hole
		// punching, if the NATs allow it, is already making it direct.
		if c := r.cfg.Net.Host.Network().Connectedness(a.Supplier); c == network.Connected || c == network.Limited {
			connected[a.Supplier] = true
			continue
		}
		wg.Go(func() {
			addrs := a.Addrs[:min(len(a.Addrs), maxDialAddrs)]
			if err := r.cfg.Net.Host.Connect(ctx, peer.AddrInfo{ID: a.Supplier, Addrs: addrs}); err != nil {
				r.log.Debug("connect to supplier", "supplier", a.Supplier, "err", err)
				return
			}
			mu.Lock()
			connected[a.Supplier] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	return connected
}

// screen drops the offers of suppliers below the reputation floor or
// failing the filter's rep, uptime and verified terms, which suppliers
// leave to the renter, and those of unproven suppliers unless
// req.AllowUnproven; it puts proven suppliers first.
func (r *Renter) screen(offers []*Quote, req RentRequest) (kept, shunned, unproven []*Quote) {
	kept, shunned = r.screenScore(offers, req)
	isProven := func(q *Quote) bool { return req.Proven != nil && req.Proven(q.Supplier) }
	var proven, rest []*Quote
	for _, q := range kept {
		if isProven(q) {
			proven = append(proven, q)
		} else {
			rest = append(rest, q)
		}
	}
	if !req.AllowUnproven {
		return proven, shunned, rest
	}
	return append(proven, rest...), shunned, nil
}

// screenScore applies the reputation floor and the filter's renter-side
// terms, the more reputable first among equal prices.
func (r *Renter) screenScore(offers []*Quote, req RentRequest) (kept, shunned []*Quote) {
	if req.Score == nil {
		return offers, nil
	}
	var terms Filter
	for _, t := range req.Filter.Terms {
		if slices.Contains(RenterKeys, t.Key) {
			terms.Terms = append(terms.Terms, t)
		}
	}
	for _, q := range offers {
		rep, verified, uptime := req.Score(q.Supplier)
		ok, _ := terms.Match(Offer{Reputation: &rep, Verified: verified, UptimePct: uptime})
		if !ok || rep < req.MinReputation {
			shunned = append(shunned, q)
			continue
		}
		kept = append(kept, q)
	}
	// Among equal prices, the more reputable first.
	sort.SliceStable(kept, func(i, j int) bool {
		if kept[i].PriceMicros != kept[j].PriceMicros {
			return kept[i].PriceMicros < kept[j].PriceMicros
		}
		ri, _, _ := req.Score(kept[i].Supplier)
		rj, _, _ := req.Score(kept[j].Supplier)
		return ri > rj
	})
	return kept, shunned
}

// QueryBook asks node p for the asks in its order book for models (all
// when empty), and verifies each one.
func (r *Renter) QueryBook(ctx context.Context, p peer.ID, models []string) ([]*Ask, error) {
	return QueryBook(ctx, r.cfg.Net.Host, p, models, r.cfg.Now())
}
