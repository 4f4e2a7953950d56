package market

// The gang lease: Nodes leases on distinct suppliers, all or nothing
// (docs/PROTOCOL.md, "Gang leases").

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/p2p"
)

// MaxGangNodes bounds GangRequest.Nodes.
const MaxGangNodes = 64

// Gang lease timing.
const (
	// DefaultGangSpares is how many reservations beyond Nodes a gang
	// makes when GangRequest.Spares is zero (fewer when fewer offer).
	DefaultGangSpares = 2
	// gangReserveTimeout bounds the parallel reservations of one try:
	// the first reservation made must still be held (ConfirmWindow)
	// when the last one is in and the confirmations go out.
	gangReserveTimeout = 3 * time.Second
	// Between two tries a gang waits a random time in this range, so
	// that two gangs contending for the same suppliers fall out of step.
	gangBackoffMin = 250 * time.Millisecond
	gangBackoffMax = time.Second
)

// GangRequest asks for Nodes leases of Count GPUs each (req.RentRequest), on distinct suppliers, all or nothing.
type GangRequest struct {
	RentRequest               // the filter, Count (GPUs per member), Duration, MaxPrice, screening, Exclude, Terms ...
	Nodes       int           // N >= 1 (at most MaxGangNodes = 64)
	Spares      int           // extra reservations beyond N (default min(2, what is offered beyond N)); -1: none
	Prefer      []peer.ID     // suppliers to lease from first when they offer (a cluster's survivors)
	RentFor     time.Duration // how long to keep trying (default: until ctx ends; between tries a random 250-1000 ms back-off, refusers of a try tried last in the next)
	// Placement, when set, orders acceptable quotes (better first) before
	// reservation, and may drop some; nil: the Rent order, Prefer first,
	// then same region as the most offers, then public before punchable
	// reach.
	Placement func(offers []*Quote) []*Quote
	// ReachOf is how a supplier can be reached, as its profile states it.
	// Members must connect to each other directly, so only suppliers whose
	// reach is public or punchable are eligible: relay-only and unknown
	// ones are left out, saying why. nil: every supplier is eligible (a
	// network with no NAT, such as a test's loopback).
	ReachOf func(peer.ID) p2p.Reach
}

// GangError is the error of a gang lease that could not be made whole:
// how many eligible suppliers offered in the last try, which suppliers
// refused or failed and why, and why others were not eligible (NoMatch,
// from the last try).
type GangError struct {
	Nodes    int
	Eligible int // distinct eligible suppliers that offered in the last try
	Tries    int
	Refused  []GangRefusal // the last word of each supplier that refused or failed, in the order it came
	NoMatch  *NoMatch      // why suppliers did not offer or were not eligible in the last try; nil when enough did
	Err      error         // what ended the tries (the context's error), if anything did
}

// GangRefusal is one supplier's refusal (or failure) in a gang lease.
type GangRefusal struct {
	Supplier peer.ID
	Reason   string
}

func (e *GangError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no gang of %d: %d eligible supplier(s) offered in the last of %d tries", e.Nodes, e.Eligible, e.Tries)
	if len(e.Refused) > 0 {
		b.WriteString("; refused: ")
		for i, r := range e.Refused {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s: %s", r.Supplier, r.Reason)
		}
	}
	if e.NoMatch != nil {
		b.WriteString("; ")
		b.WriteString(e.NoMatch.Error())
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

// Unwrap gives the NoMatch and the error that ended the tries.
func (e *GangError) Unwrap() []error {
	var out []error
	if e.NoMatch != nil {
		out = append(out, e.NoMatch)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

func (e *GangError) refused(s peer.ID, reason string) {
	for i := range e.Refused {
		if e.Refused[i].Supplier == s {
			e.Refused = append(e.Refused[:i], e.Refused[i+1:]...)
			break
		}
	}
	e.Refused = append(e.Refused, GangRefusal{s, reason})
}

// RentGang leases req.Count GPUs on each of req.Nodes distinct suppliers,
// all or nothing. Each try bids as Rent does and collects offers until
// Nodes+Spares distinct eligible suppliers have offered or req.Wait
// passes; it reserves the best Nodes+Spares in parallel (reservations
// never wait: a supplier that cannot serve refuses at once, so gangs
// cannot deadlock); with at least Nodes reserved it confirms the best
// Nodes in parallel and releases the rest (LeaseConfirm.release_id, no
// penalty), else it releases every reservation and tries again after a
// random back-off, until req.RentFor passes or ctx ends. A member whose
// confirmation fails after others confirmed has the confirmed ones
// released (the signed LeaseRelease, no penalty either) and the gang is
// tried again. The leases returned are kept in the renter's store as
// Rent keeps one; on failure it returns a *GangError.
func (r *Renter) RentGang(ctx context.Context, req GangRequest) ([]*Lease, error) {
	switch {
	case req.Nodes < 1 || req.Nodes > MaxGangNodes:
		return nil, fmt.Errorf("gang lease: %d nodes, want 1 to %d", req.Nodes, MaxGangNodes)
	case req.Count < 1:
		return nil, fmt.Errorf("gang lease: %d GPUs a node, want at least 1", req.Count)
	}
	if req.RentFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.RentFor)
		defer cancel()
	}
	spares := req.Spares
	switch {
	case spares == 0:
		spares = DefaultGangSpares
	case spares < 0:
		spares = 0
	}
	base := req.RentRequest
	base.Enough = req.Nodes + spares
	base.Unreachable = gangUnreachable(req.Unreachable, req.ReachOf)
	base = base.withDefaults()
	gerr := &GangError{Nodes: req.Nodes}
	var last map[peer.ID]bool // the refusers of the last try
	for try := 1; ; try++ {
		gerr.Tries = try
		leases, refusers := r.gangTry(ctx, req, base, spares, last, gerr)
		if leases != nil {
			r.cfg.Metrics.Gang(metrics.GangLeased)
			r.log.Info("gang leased", "nodes", req.Nodes, "tries", try)
			return leases, nil
		}
		last = refusers
		wait := gangBackoffMin + mrand.N(gangBackoffMax-gangBackoffMin)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			gerr.Err = ctx.Err()
			r.cfg.Metrics.Gang(metrics.GangFailed)
			return nil, gerr
		case <-t.C:
			r.cfg.Metrics.Gang(metrics.GangRetry)
		}
	}
}

// gangUnreachable adds the gang's screen to unreachable: a member must
// be reachable directly by the others, so only public and punchable
// suppliers are eligible when reachOf is known.
func gangUnreachable(unreachable func(peer.ID) string, reachOf func(peer.ID) p2p.Reach) func(peer.ID) string {
	if reachOf == nil {
		return unreachable
	}
	return func(s peer.ID) string {
		if unreachable != nil {
			if why := unreachable(s); why != "" {
				return why
			}
		}
		switch reach := reachOf(s); reach {
		case p2p.ReachPublic, p2p.ReachPunchable:
			return ""
		case p2p.ReachRelayOnly:
			return "its reach is relay-only (behind a symmetric NAT): the members of a cluster must connect to each other directly; a gang takes reach=public or reach=punchable suppliers"
		default:
			return fmt.Sprintf("its reach is %s: the members of a cluster must connect to each other directly; a gang takes reach=public or reach=punchable suppliers", reach)
		}
	}
}

// gangTry is one try of RentGang: the leases, or nil and the suppliers
// that refused or failed in it (tried last next time), each noted in
// gerr.
func (r *Renter) gangTry(ctx context.Context, g GangRequest, req RentRequest, spares int, last map[peer.ID]bool, gerr *GangError) ([]*Lease, map[peer.ID]bool) {
	offers, f, err := r.gangOffers(ctx, req, g.Nodes+spares, g.Prefer)
	if err != nil {
		gerr.NoMatch = &NoMatch{Reasons: []string{err.Error()}}
		return nil, nil
	}
	offers = r.placeGang(g, offers, last)
	gerr.Eligible = len(offers)
	if len(offers) < g.Nodes {
		gerr.NoMatch = r.explain(ctx, req, f)
		return nil, nil
	}
	gerr.NoMatch = nil
	take := offers[:min(len(offers), g.Nodes+spares)]
	refusers := map[peer.ID]bool{}
	refuse := func(s peer.ID, why string) {
		refusers[s] = true
		gerr.refused(s, why)
	}

	// Reserve all at once; none waits for another.
	held := make([]*reservation, len(take))
	why := make([]string, len(take))
	rctx, cancel := context.WithTimeout(ctx, gangReserveTimeout)
	var wg sync.WaitGroup
	for i, q := range take {
		wg.Go(func() {
			v, refused, err := r.reserve(rctx, q.Supplier, r.quoteProposal(q, req.Terms))
			switch {
			case err != nil:
				why[i] = err.Error()
			case refused != "":
				why[i] = refused
			default:
				held[i] = v
			}
			if v == nil {
				r.countLease(why[i], err)
			}
		})
	}
	wg.Wait()
	cancel()
	var reserved []*reservation
	for i, v := range held {
		if v == nil {
			refuse(take[i].Supplier, why[i])
			continue
		}
		// The stream's deadline was the reservations'; confirming or
		// releasing gets one of its own.
		_ = v.st.SetDeadline(time.Now().Add(p2p.StreamTimeout))
		reserved = append(reserved, v)
	}
	if len(reserved) < g.Nodes {
		r.log.Debug("gang: too few reserved; releasing all", "reserved", len(reserved), "nodes", g.Nodes)
		releaseReservations(reserved, r.log)
		return nil, refusers
	}

	// Confirm the best Nodes, release the rest, at once.
	members, rest := reserved[:g.Nodes], reserved[g.Nodes:]
	leases := make([]*Lease, len(members))
	whyNot := make([]string, len(members))
	wg.Go(func() { releaseReservations(rest, r.log) })
	for i, v := range members {
		wg.Go(func() {
			l, refused, err := v.confirm()
			r.countLease(refused, err)
			switch {
			case err != nil:
				whyNot[i] = err.Error()
			case refused != "":
				whyNot[i] = refused
			default:
				leases[i] = l
			}
		})
	}
	wg.Wait()
	var confirmed []*Lease
	for i, l := range leases {
		if l == nil {
			refuse(members[i].supplier, "confirmation: "+whyNot[i])
			continue
		}
		confirmed = append(confirmed, l)
	}
	if len(confirmed) == len(members) {
		return leases, nil
	}
	// All or nothing: the members confirmed go back, without penalty.
	if err := r.ReleaseLeases(context.WithoutCancel(ctx), confirmed); err != nil {
		r.log.Warn("gang: release the members confirmed of a gang that failed", "err", err)
	}
	return nil, refusers
}

// gangOffers bids for req and collects the offers of want distinct
// eligible suppliers, screened as Rent screens them, and the answers of
// the suppliers in prefer that it connected to, until nothing more is to
// come (the wait, or its straggler cut, passed); f is what a NoMatch
// explains.
func (r *Renter) gangOffers(ctx context.Context, req RentRequest, want int, prefer []peer.ID) ([]*Quote, noMatchFacts, error) {
	b, err := r.openBid(ctx, req)
	if err != nil {
		return nil, noMatchFacts{}, err
	}
	defer b.close()
	f := noMatchFacts{unreachable: b.unreachable}
	seen := map[peer.ID]bool{}
	var offers []*Quote
	preferred := func() bool {
		return slices.ContainsFunc(prefer, func(p peer.ID) bool { return b.c.waiting[p] })
	}
	for len(offers) < want || preferred() {
		batch, more := b.next(ctx, &f)
		for _, q := range batch {
			if !seen[q.Supplier] {
				seen[q.Supplier] = true
				offers = append(offers, q)
			}
		}
		if !more {
			break
		}
	}
	return offers, f, nil
}

// placeGang orders a gang's offers, better first: by g.Placement when
// set, else the Rent order (price, round trip, reputation, proven
// first) with g.Prefer first, then the region most offers are in, then
// public reach before punchable. Suppliers that refused in the last try
// go last either way.
func (r *Renter) placeGang(g GangRequest, offers []*Quote, last map[peer.ID]bool) []*Quote {
	if g.Placement != nil {
		offers = g.Placement(offers)
	} else {
		offers = r.rank(offers)
		proven := func(q *Quote) bool { return g.Proven != nil && g.Proven(q.Supplier) }
		regions := map[string]int{}
		for _, q := range offers {
			regions[q.Region]++
		}
		top := ""
		for reg, n := range regions {
			if n > regions[top] || n == regions[top] && reg < top {
				top = reg
			}
		}
		reach := func(q *Quote) int {
			if g.ReachOf != nil && g.ReachOf(q.Supplier) == p2p.ReachPublic {
				return 0
			}
			return 1
		}
		slices.SortStableFunc(offers, func(x, y *Quote) int {
			return cmp.Or(
				-cmpBool(slices.Contains(g.Prefer, x.Supplier), slices.Contains(g.Prefer, y.Supplier)),
				-cmpBool(proven(x), proven(y)),
				-cmpBool(x.Region == top, y.Region == top),
				cmp.Compare(reach(x), reach(y)),
			)
		})
	}
	slices.SortStableFunc(offers, func(x, y *Quote) int { return cmpBool(last[x.Supplier], last[y.Supplier]) })
	return offers
}

// cmpBool orders false before true.
func cmpBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return 1
	}
	return -1
}

// releaseReservations gives every reservation in vs up at once.
func releaseReservations(vs []*reservation, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, v := range vs {
		wg.Go(func() {
			if err := v.release(); err != nil {
				log.Debug("gang: release a reservation", "supplier", v.supplier, "err", err)
			}
		})
	}
	wg.Wait()
}

// ReleaseLeases releases the confirmed leases given, all at once, each
// with a signed LeaseRelease (Release): none counts against the renter.
// It returns when every supplier answered, with the errors of those
// that did not release theirs (a lease that had ended already is not an
// error).
func (r *Renter) ReleaseLeases(ctx context.Context, leases []*Lease) error {
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() {
			_, err := r.Release(ctx, l)
			var refused *ReleaseRefused
			if errors.As(err, &refused) && strings.Contains(refused.Reason, ErrLeaseEnded.Error()) {
				err = nil
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
