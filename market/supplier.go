package market

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

var ksLeases = store.MustKeyspace("leases") // lease ID -> LeaseRecord (JSON)

// LeaseRecord is how both sides keep a lease: the countersigned envelope
// and where it stands.
type LeaseRecord struct {
	Envelope []byte    `json:"envelope"`
	State    string    `json:"state"` // pending | confirmed | lapsed
	Role     string    `json:"role"`  // supplier | renter
	Saved    time.Time `json:"saved"`
}

// SupplierConfig configures a Supplier. Every field without a default
// note is required.
type SupplierConfig struct {
	Net    *p2p.Network
	Key    crypto.PrivKey
	Store  store.Store
	Orders *p2p.Topic // the orders topic, joined by the node
	Trades *p2p.Topic // the trades topic, joined by the node
	Book   *Book
	Index  *PriceIndex
	Pricer Pricer
	// GPUs are the supplier's devices by model slug.
	GPUs map[string][]string
	// Describe gives the static attributes of the supplier's offer for a
	// model (name, memory, compute capability, region, simulated ...), so
	// that bids' filters can be checked exactly as search checks them.
	Describe func(model string) Offer
	// Region is advertised in asks.
	Region string
	// MinDuration and MaxDuration bound the leases it accepts; 1 min and
	// 30 days when zero.
	MinDuration, MaxDuration time.Duration
	// AskTTL is the lifetime of an ask, renewed at half; 10 min when zero.
	AskTTL time.Duration
	Now    func() time.Time
	Log    *slog.Logger
}

// Supplier is the selling side of a node: it posts asks, answers bids
// with quotes over QuoteProtocol, and turns proposals into countersigned
// leases over LeaseProtocol, reserving capacity in its Ledger.
type Supplier struct {
	cfg    SupplierConfig
	self   peer.ID
	ledger *Ledger
	log    *slog.Logger

	mu      sync.Mutex
	asks    map[string]*Ask // live own ask per model
	changed chan struct{}   // capacity changed: re-post asks
	done    chan struct{}   // closed when Run returns
}

// NewSupplier opens the capacity ledger and installs the lease protocol.
func NewSupplier(cfg SupplierConfig) (*Supplier, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MinDuration == 0 {
		cfg.MinDuration = MinDuration
	}
	if cfg.MaxDuration == 0 {
		cfg.MaxDuration = MaxDuration
	}
	if cfg.AskTTL == 0 {
		cfg.AskTTL = 10 * time.Minute
	}
	led, err := OpenLedger(cfg.Store, cfg.GPUs, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("supplier: %w", err)
	}
	s := &Supplier{
		cfg: cfg, self: cfg.Net.Host.ID(), ledger: led, log: cfg.Log.With("sub", "supplier"),
		asks: map[string]*Ask{}, changed: make(chan struct{}, 1), done: make(chan struct{}),
	}
	p2p.Serve(cfg.Net.Host, LeaseProtocol, s.handleLease)
	return s, nil
}

// Ledger is the supplier's capacity ledger.
func (s *Supplier) Ledger() *Ledger { return s.ledger }

// CapacityChanged tells the supplier that capacity was released outside a
// lease's natural end (a job ended early), so its asks are re-posted.
func (s *Supplier) CapacityChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run posts and renews the supplier's asks until ctx ends, then cancels
// them.
func (s *Supplier) Run(ctx context.Context) {
	defer close(s.done)
	for {
		// Renew at half the asks' lifetime; retry soon when an ask could
		// not be gossiped (no topic peer yet, e.g. right after start).
		wait := s.cfg.AskTTL / 2
		if !s.postAsks(ctx) {
			wait = 2 * time.Second
		}
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if s.cancelAsks(cctx) > 0 {
				// pubsub queues what it publishes and has no flush: give
				// the cancels a moment to leave before the host closes.
				time.Sleep(300 * time.Millisecond)
			}
			cancel()
			return
		case <-time.After(wait):
		case <-s.changed:
		}
	}
}

// Stopped waits, at most limit, for Run to have cancelled its asks.
func (s *Supplier) Stopped(limit time.Duration) {
	select {
	case <-s.done:
	case <-time.After(limit):
	}
}

func (s *Supplier) models() []string {
	ms := make([]string, 0, len(s.cfg.GPUs))
	for m := range s.cfg.GPUs {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	return ms
}

func (s *Supplier) utilization(model string) float64 {
	total := len(s.cfg.GPUs[model])
	if total == 0 {
		return 0
	}
	return float64(total-s.ledger.Free(model)) / float64(total)
}

// postAsks publishes a fresh ask for every model with a list price and
// free GPUs, and cancels the ask of a model with none free. It reports
// whether every ask was gossiped.
func (s *Supplier) postAsks(ctx context.Context) bool {
	now := s.cfg.Now()
	ok := true
	for _, m := range s.models() {
		free := s.ledger.Free(m)
		price, ok := s.cfg.Pricer.AskPrice(m, s.utilization(m), s.cfg.Index.Median(m))
		if !ok {
			continue
		}
		if free == 0 {
			s.cancelAsk(ctx, m)
			continue
		}
		a := &pb.Ask{
			Nonce: nonce(), CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(s.cfg.AskTTL).UnixMilli(),
			Model: m, Count: uint32(free), PriceMicros: price, Region: s.cfg.Region,
			MinDurationS: uint32(s.cfg.MinDuration / time.Second), MaxDurationS: uint32(s.cfg.MaxDuration / time.Second),
			Pricing: string(s.cfg.Pricer.Mode), Simulated: s.cfg.Describe(m).Simulated,
		}
		for _, addr := range s.cfg.Net.Host.Addrs() {
			if len(a.Addrs) < 16 {
				a.Addrs = append(a.Addrs, addr.Bytes())
			}
		}
		raw, err := SealAsk(a, s.cfg.Key)
		if err != nil {
			s.log.Warn("seal ask", "model", m, "err", err)
			continue
		}
		ask, err := OpenAsk(raw, now)
		if err != nil {
			s.log.Warn("own ask invalid", "model", m, "err", err)
			continue
		}
		s.cfg.Book.AddAsk(ask)
		s.mu.Lock()
		s.asks[m] = ask
		s.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.cfg.Orders.Publish(pctx, raw); err != nil && ctx.Err() == nil {
			s.log.Debug("publish ask", "model", m, "err", err)
			ok = false
		}
		cancel()
	}
	return ok
}

func (s *Supplier) cancelAsk(ctx context.Context, model string) bool {
	s.mu.Lock()
	a := s.asks[model]
	delete(s.asks, model)
	s.mu.Unlock()
	if a == nil {
		return false
	}
	now := s.cfg.Now()
	raw, err := SealCancel(&pb.Cancel{Nonce: nonce(), CreatedMs: now.UnixMilli(), OrderId: a.ID[:]}, s.cfg.Key)
	if err != nil {
		s.log.Warn("seal cancel", "err", err)
		return false
	}
	if c, err := OpenCancel(raw, now); err == nil {
		s.cfg.Book.Cancel(c)
	}
	if err := s.cfg.Orders.Publish(ctx, raw); err != nil {
		s.log.Debug("publish cancel", "model", model, "err", err)
		return false
	}
	return true
}

// cancelAsks withdraws every live ask and returns how many cancels it sent.
func (s *Supplier) cancelAsks(ctx context.Context) int {
	sent := 0
	for _, m := range s.models() {
		if s.cancelAsk(ctx, m) {
			sent++
		}
	}
	return sent
}

// HandleBid answers one bid from the order book: at most one quote (the
// cheapest model it can serve) or, when it has a model the bid names but
// cannot serve it, one decline saying why. Bids that name none of its
// models get no answer.
func (s *Supplier) HandleBid(ctx context.Context, b *Bid) {
	if b.Renter == s.self {
		return
	}
	q := s.quoteFor(b)
	if q == nil {
		return
	}
	now := s.cfg.Now()
	q.Renter, q.BidId = []byte(b.Renter), b.ID[:]
	q.Nonce, q.CreatedMs = nonce(), now.UnixMilli()
	q.ExpiresMs = min(now.Add(30*time.Second).UnixMilli(), b.ExpiresMs+int64(10*time.Second/time.Millisecond))
	q.ExpiresMs = max(q.ExpiresMs, now.Add(5*time.Second).UnixMilli())
	q.DurationS, q.Region = b.DurationS, s.cfg.Region
	raw, err := SealQuote(q, s.cfg.Key)
	if err != nil {
		s.log.Warn("seal quote", "err", err)
		return
	}
	s.cfg.Net.Host.Peerstore().AddAddrs(b.Renter, b.Addrs, peerstore.TempAddrTTL)
	if err := p2p.Send(ctx, s.cfg.Net.Host, b.Renter, QuoteProtocol, raw); err != nil {
		s.log.Debug("send quote", "to", b.Renter, "err", err)
		return
	}
	s.log.Debug("quoted", "bid", b.ID.Short(), "model", q.Model, "price", q.PriceMicros, "decline", q.Decline)
}

// quoteFor decides the answer to b, using the same filter checks as search.
func (s *Supplier) quoteFor(b *Bid) *pb.Quote {
	named := b.Filter.Models()
	var best, decline *pb.Quote
	for _, m := range s.models() {
		if named != nil && !slices.Contains(named, m) {
			continue
		}
		list, ok := s.cfg.Pricer.AskPrice(m, s.utilization(m), s.cfg.Index.Median(m))
		if !ok {
			continue
		}
		free := s.ledger.Free(m)
		o := s.cfg.Describe(m)
		o.Count, o.Free, o.PriceMicros = len(s.cfg.GPUs[m]), free, list
		var q *pb.Quote
		switch price, why := s.cfg.Pricer.Quote(PriceInput{
			Model: m, Count: int(b.Count), DurationS: b.DurationS, MaxPrice: b.MaxPriceMicros,
			Utilization: s.utilization(m), Competing: s.competing(m), Index: s.cfg.Index.Median(m),
		}); {
		case !filterAllowsExcept(b.Filter, o, append(RenterKeys, "price", "free", "count")...):
			q = &pb.Quote{Model: m, Decline: string(DeclineMismatch), Free: uint32(free)}
		case free < int(b.Count):
			q = &pb.Quote{Model: m, Decline: string(DeclineBusy), Free: uint32(free)}
		case time.Duration(b.DurationS)*time.Second < s.cfg.MinDuration || time.Duration(b.DurationS)*time.Second > s.cfg.MaxDuration:
			q = &pb.Quote{Model: m, Decline: string(DeclineDuration), Free: uint32(free)}
		case why != "":
			q = &pb.Quote{Model: m, Decline: why, Free: uint32(free), MinPriceMicros: price}
		default:
			o.PriceMicros = price
			if !filterAllowsExcept(b.Filter, o, RenterKeys...) {
				// Its price, or its free or total count, fails a term.
				why := DeclinePrice
				if !filterAllowsExcept(b.Filter, o, append(RenterKeys, "price")...) {
					why = DeclineMismatch
				}
				q = &pb.Quote{Model: m, Decline: string(why), Free: uint32(free), MinPriceMicros: price}
				break
			}
			q = &pb.Quote{Model: m, Count: b.Count, PriceMicros: price, Free: uint32(free)}
		}
		if q.Decline == "" {
			if best == nil || q.PriceMicros < best.PriceMicros {
				best = q
			}
		} else if decline == nil && named != nil {
			decline = q
		}
	}
	if best != nil {
		return best
	}
	return decline
}

// RenterKeys are the filter keys a renter checks itself, from the
// attestations it trusts: a supplier cannot vouch for its own reputation,
// uptime or verification, so it leaves those terms of a bid to the renter.
var RenterKeys = []string{"rep", "uptime", "verified"}

// filterAllowsExcept checks f against o with the terms on keys treated as
// met, so that each kind of failure is reported as such.
func filterAllowsExcept(f Filter, o Offer, keys ...string) bool {
	var rest Filter
	for _, t := range f.Terms {
		if !slices.Contains(keys, t.Key) {
			rest.Terms = append(rest.Terms, t)
		}
	}
	ok, _ := rest.Match(o)
	return ok
}

// competing lists the prices of other suppliers' live asks for model.
func (s *Supplier) competing(model string) []int64 {
	var out []int64
	for _, a := range s.cfg.Book.Asks(model) {
		if a.Supplier != s.self {
			out = append(out, a.PriceMicros)
		}
	}
	return out
}

// handleLease serves LeaseProtocol: proposal in, countersigned lease (or a
// refusal) out, then the renter's confirmation.
func (s *Supplier) handleLease(st network.Stream) error {
	raw, err := p2p.ReadRaw(st, ProposalType.MaxSize)
	if err != nil {
		return err
	}
	refuse := func(format string, args ...any) error {
		reason := fmt.Sprintf(format, args...)
		s.log.Info("lease refused", "renter", st.Conn().RemotePeer(), "reason", reason)
		return p2p.WriteMsg(st, &pb.LeaseResponse{Refused: reason})
	}
	now := s.cfg.Now()
	p, err := OpenProposal(raw, now)
	if err != nil {
		return refuse("invalid proposal: %v", err)
	}
	switch {
	case p.Supplier != s.self:
		return refuse("proposal is addressed to %s", p.Supplier)
	case p.Renter != st.Conn().RemotePeer():
		return refuse("proposal signed by %s but sent by %s", p.Renter, st.Conn().RemotePeer())
	case time.Duration(p.DurationS)*time.Second < s.cfg.MinDuration || time.Duration(p.DurationS)*time.Second > s.cfg.MaxDuration:
		return refuse("%s: duration %ds outside %s..%s", DeclineDuration, p.DurationS, s.cfg.MinDuration, s.cfg.MaxDuration)
	case p.Ask != nil && !s.isCurrentAsk(p.Ask) && s.ledger.Free(p.Model) < int(p.Count):
		// Withdrawn because it sold out: say so, as for any busy supplier.
		return refuse("%s: %d of %s free, %d asked; the ask was withdrawn", DeclineBusy, s.ledger.Free(p.Model), p.Model, p.Count)
	case p.Ask != nil && !s.isCurrentAsk(p.Ask):
		return refuse("that ask was replaced or withdrawn; take the current one or bid")
	case s.leaseExists(p.ID):
		return refuse("this proposal already made lease %s", p.ID.Short())
	}
	confirmBy := now.Add(ConfirmWindow)
	res, err := s.ledger.Reserve(p.ID, p.Model, int(p.Count), confirmBy)
	if err != nil {
		if errors.Is(err, ErrInsufficientCapacity) {
			return refuse("%s: %v", DeclineBusy, err)
		}
		return refuse("reserve: %v", err)
	}
	l := &pb.Lease{
		Proposal: raw, Renter: []byte(p.Renter), LeaseId: p.ID[:],
		StartMs: now.UnixMilli(), EndMs: now.Add(time.Duration(p.DurationS) * time.Second).UnixMilli(),
		Model: p.Model, Count: p.Count, PriceMicros: p.PriceMicros, GpuUuids: res.GPUs,
		ConfirmByMs: confirmBy.UnixMilli(),
	}
	leaseRaw, err := SealLease(l, s.cfg.Key)
	if err != nil {
		_ = s.ledger.Release(p.ID)
		return refuse("seal lease: %v", err)
	}
	if err := saveLease(s.cfg.Store, p.ID, leaseRaw, "pending", "supplier", now); err != nil {
		_ = s.ledger.Release(p.ID)
		return refuse("persist lease: %v", err)
	}
	if err := p2p.WriteMsg(st, &pb.LeaseResponse{Lease: leaseRaw}); err != nil {
		return err // the reservation lapses at confirmBy
	}
	_ = st.SetReadDeadline(confirmBy)
	var c pb.LeaseConfirm
	if err := p2p.ReadMsg(st, 256, &c); err != nil || ID(c.LeaseId) != p.ID {
		s.log.Info("lease not confirmed; reservation lapses", "lease", p.ID.Short(), "err", err)
		_ = saveLease(s.cfg.Store, p.ID, leaseRaw, "lapsed", "supplier", s.cfg.Now())
		return nil
	}
	_ = st.SetWriteDeadline(time.Now().Add(p2p.StreamTimeout))
	end := time.UnixMilli(l.EndMs)
	if _, err := s.ledger.Confirm(p.ID, end); err != nil {
		s.log.Warn("confirm came too late", "lease", p.ID.Short(), "err", err)
		_ = saveLease(s.cfg.Store, p.ID, leaseRaw, "lapsed", "supplier", s.cfg.Now())
		return p2p.WriteMsg(st, &pb.LeaseConfirmed{Refused: "the confirmation came after the reservation lapsed"})
	}
	if err := saveLease(s.cfg.Store, p.ID, leaseRaw, "confirmed", "supplier", s.cfg.Now()); err != nil {
		s.log.Error("persist confirmed lease", "lease", p.ID.Short(), "err", err)
		_ = s.ledger.Release(p.ID)
		return p2p.WriteMsg(st, &pb.LeaseConfirmed{Refused: "the supplier could not keep the lease"})
	}
	if err := p2p.WriteMsg(st, &pb.LeaseConfirmed{}); err != nil {
		s.log.Debug("tell the renter the lease is kept", "lease", p.ID.Short(), "err", err)
	}
	s.log.Info("leased", "lease", p.ID.Short(), "renter", p.Renter, "model", p.Model, "count", p.Count, "price", FormatPrice(p.PriceMicros))
	s.publishTrade(leaseRaw)
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return nil
}

// isCurrentAsk reports whether a is the live ask the supplier posts now
// for its model: a replaced (re-priced) or cancelled ask is not honoured.
func (s *Supplier) isCurrentAsk(a *Ask) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.asks[a.Model]
	return cur != nil && cur.ID == a.ID
}

// leaseExists reports whether a lease with this ID was already made and
// confirmed: a proposal is good for one lease only.
func (s *Supplier) leaseExists(id ID) bool {
	b, err := s.cfg.Store.Get(ksLeases, id[:])
	if err != nil {
		return false
	}
	rec, err := (store.JSONCodec[LeaseRecord]{}).Unmarshal(b)
	return err == nil && rec.State == "confirmed"
}

// publishTrade announces a confirmed lease and adds it to the local index.
func (s *Supplier) publishTrade(leaseRaw []byte) {
	now := s.cfg.Now()
	raw, err := SealTradePrint(&pb.TradePrint{Nonce: nonce(), CreatedMs: now.UnixMilli(), Lease: leaseRaw}, s.cfg.Key)
	if err != nil {
		s.log.Warn("seal trade print", "err", err)
		return
	}
	if tp, err := OpenTradePrint(raw, now); err == nil {
		AddTrade(s.cfg.Index, tp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.cfg.Trades.Publish(ctx, raw); err != nil {
		s.log.Debug("publish trade print", "err", err)
	}
}

// AddTrade records a trade print in an index.
func AddTrade(x *PriceIndex, tp *TradePrint) bool { return x.AddPrint(tp) }

func saveLease(s store.Store, id ID, raw []byte, state, role string, now time.Time) error {
	b, err := (store.JSONCodec[LeaseRecord]{}).Marshal(LeaseRecord{Envelope: raw, State: state, Role: role, Saved: now.UTC()})
	if err != nil {
		return err
	}
	return s.Put(ksLeases, id[:], b)
}

// StoredLease is a lease as kept in a store, validated again on reading.
type StoredLease struct {
	*Lease
	State string
	Role  string
}

// Leases lists the leases kept in s, newest first. Records that no longer
// validate are skipped.
func Leases(s store.Store, now time.Time) ([]StoredLease, error) {
	var out []StoredLease
	err := s.Iterate(ksLeases, nil, func(_, v []byte) error {
		rec, err := (store.JSONCodec[LeaseRecord]{}).Unmarshal(v)
		if err != nil {
			return nil
		}
		l, err := OpenLease(rec.Envelope, now)
		if err != nil {
			return nil
		}
		state := rec.State
		if state == "pending" && !now.Before(time.UnixMilli(l.ConfirmByMs)) {
			state = "lapsed" // never confirmed (e.g. the supplier stopped first)
		}
		out = append(out, StoredLease{Lease: l, State: state, Role: rec.Role})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].StartMs > out[j].StartMs })
	return out, err
}

// nonce is a random non-zero 64-bit number.
func nonce() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if n := binary.BigEndian.Uint64(b[:]); n != 0 {
			return n
		}
	}
}

// GetLease returns the lease with this ID kept in s, validated again, or
// an error wrapping store.ErrNotFound.
func GetLease(s store.Store, id ID, now time.Time) (StoredLease, error) {
	b, err := s.Get(ksLeases, id[:])
	if err != nil {
		return StoredLease{}, fmt.Errorf("lease %s: %w", id.Short(), err)
	}
	rec, err := (store.JSONCodec[LeaseRecord]{}).Unmarshal(b)
	if err != nil {
		return StoredLease{}, fmt.Errorf("lease %s: decode: %w", id.Short(), err)
	}
	l, err := OpenLease(rec.Envelope, now)
	if err != nil {
		return StoredLease{}, err
	}
	state := rec.State
	if state == "pending" && !now.Before(time.UnixMilli(l.ConfirmByMs)) {
		state = "lapsed"
	}
	return StoredLease{Lease: l, State: state, Role: rec.Role}, nil
}
