package market

// Why a rent found nothing: NoMatch and its explanation.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/money"
)

// explain builds the reasons why no lease was made: it gathers what the
// renter knows (the answers to its bid, and the live asks of its own
// book, else of the first of req.Books that answers) and summarises it
// (explainNoMatch).
func (r *Renter) explain(ctx context.Context, req RentRequest, f noMatchFacts) *NoMatch {
	f.asks = r.candidates(ctx, req)
	return explainNoMatch(req, f)
}

// noMatchFacts is what a renter knows when no lease was made: the asks in
// an order book, the answers to its bid (offers it could take, declines,
// offers from suppliers below its reputation floor or unproven) and the
// proposals that suppliers refused, and the offers of suppliers that what
// the lease is for cannot reach (RentRequest.Unreachable).
type noMatchFacts struct {
	asks                                []*Ask
	offers, declines, shunned, unproven []*Quote
	tried, unreachable                  []attempt
}

// modelView is what the facts say of one model: the suppliers that have
// it (with a live ask or an answer), those that answered, and why they
// did not lease.
type modelView struct {
	suppliers           map[peer.ID]bool
	answered            map[peer.ID]bool
	leftOut             map[peer.ID]bool // unproven suppliers that did not answer (counted in unproven)
	simulated           map[peer.ID]bool // suppliers of simulated GPUs left out by RealOnly
	busy, dur, mismatch int
	held                []*Quote // busy declines for GPUs held by leases with no job yet
	shunned, unproven   int
	priceDeclines       []int64 // the least price of each supplier that declined on price
	// firm holds the price of each supplier's cheapest ask that is not
	// an auction one: what the supplier quotes at least.
	firm map[peer.ID]money.Micros
}

// explainNoMatch summarises the facts into reasons: one per model that
// any supplier has (or one per model asked for, when none has any), then
// one per refused proposal.
func explainNoMatch(req RentRequest, f noMatchFacts) *NoMatch {
	var relaxed *Filter
	if req.realOnly {
		relaxed = &req.asked
	}
	byModel := viewByModel(req.Filter, relaxed, f)
	if !req.AllowUnproven && req.Proven != nil {
		for _, v := range byModel {
			v.leaveOutUnproven(req.Proven)
		}
	}
	var reasons []string
	if len(byModel) == 0 {
		if models := req.Filter.Models(); models != nil {
			for _, m := range models {
				reasons = append(reasons, fmt.Sprintf("no supplier offers %s (no ask in the order book, no answer to the bid)", m))
			}
		} else {
			reasons = append(reasons, "no supplier offers GPUs matching the filter (no ask in the order book, no answer to the bid)")
		}
	}
	ms := make([]string, 0, len(byModel))
	for m := range byModel {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	for _, m := range ms {
		reasons = append(reasons, byModel[m].reason(req, m))
	}
	for _, t := range f.tried {
		reasons = append(reasons, fmt.Sprintf("%s (%s at %s) refused the proposal: %s", t.q.Supplier, t.q.Model, money.Micros(t.q.PriceMicros).String(), t.reason))
	}
	for _, u := range f.unreachable {
		reasons = append(reasons, fmt.Sprintf("%s (%s at %s) cannot be reached for this lease: %s", u.q.Supplier, u.q.Model, money.Micros(u.q.PriceMicros).String(), u.reason))
	}
	return &NoMatch{Reasons: reasons}
}

// viewByModel groups the facts by model. An ask counts when it matches
// the filter, or fails it only on attributes an ask does not carry. With
// relaxed (the filter before RealOnly added simulated=false), an ask of
// simulated GPUs that only that term fails counts as left out for being
// simulated.
func viewByModel(filter Filter, relaxed *Filter, f noMatchFacts) map[string]*modelView {
	byModel := map[string]*modelView{}
	get := func(m string) *modelView {
		v := byModel[m]
		if v == nil {
			v = &modelView{suppliers: map[peer.ID]bool{}, answered: map[peer.ID]bool{}, leftOut: map[peer.ID]bool{}, simulated: map[peer.ID]bool{}, firm: map[peer.ID]money.Micros{}}
			byModel[m] = v
		}
		return v
	}
	simAsk := map[supplierModel]bool{} // asks left out only for being simulated
	for _, a := range f.asks {
		if !askMatches(filter, a) {
			if relaxed != nil && a.Simulated && askMatches(*relaxed, a) {
				get(a.Model).simulated[a.Supplier] = true
				simAsk[supplierModel{a.Supplier, a.Model}] = true
			}
			continue
		}
		v := get(a.Model)
		v.suppliers[a.Supplier] = true
		if p, ok := v.firm[a.Supplier]; PricingMode(a.Pricing) != Auction && (!ok || money.Micros(a.PriceMicros) < p) {
			v.firm[a.Supplier] = money.Micros(a.PriceMicros)
		}
	}
	answer := func(q *Quote) *modelView {
		v := get(q.Model)
		v.suppliers[q.Supplier], v.answered[q.Supplier] = true, true
		return v
	}
	for _, q := range f.declines {
		// A supplier of simulated GPUs that got the bid anyway (it was
		// connected) declines simulated=false as a mismatch: it is left
		// out for being simulated, not for other terms.
		if Decline(q.Decline) == DeclineMismatch && simAsk[supplierModel{q.Supplier, q.Model}] {
			continue
		}
		answer(q).decline(q)
	}
	for _, q := range f.offers {
		answer(q)
	}
	for _, q := range f.shunned {
		answer(q).shunned++
	}
	for _, q := range f.unproven {
		answer(q).unproven++
	}
	for _, u := range f.unreachable {
		answer(u.q) // explained on a line of its own
	}
	return byModel
}

// leaveOutUnproven counts the unproven suppliers that did not answer as
// unproven, not silent: the default screen does not connect to them, and
// a supplier quotes only over a connection the renter has, so most of
// them cannot answer at all.
func (v *modelView) leaveOutUnproven(proven func(peer.ID) bool) {
	for s := range v.suppliers {
		if !v.answered[s] && !proven(s) {
			v.unproven++
			v.leftOut[s] = true
		}
	}
}

// decline counts a declining quote by its reason; any other reason than
// busy, duration or mismatch counts as a price, the least the supplier
// takes (its quote's price when it names none).
func (v *modelView) decline(q *Quote) {
	switch Decline(q.Decline) {
	case DeclineBusy:
		if q.Held > 0 {
			v.held = append(v.held, q)
			break
		}
		v.busy++
	case DeclineDuration:
		v.dur++
	case DeclineMismatch:
		v.mismatch++
	default:
		p := q.MinPriceMicros
		if p == 0 {
			p = q.PriceMicros
		}
		v.priceDeclines = append(v.priceDeclines, p)
	}
}

// reason is the one line that says why no supplier of model m leased.
func (v *modelView) reason(req RentRequest, m string) string {
	// Suppliers of simulated GPUs left out by default are named apart:
	// they do not have the model, only a simulation of it.
	var sim int
	for s := range v.simulated {
		if !v.suppliers[s] {
			sim++
		}
	}
	if len(v.suppliers) == 0 {
		return fmt.Sprintf("no supplier has real %s GPUs: %d %s only simulated ones, left out by default (add simulated=true to the filter, or --allow-simulated, to rent simulated GPUs)", m, sim, plural(sim, "offers", "offer"))
	}
	parts := []string{fmt.Sprintf("%d %s %s", len(v.suppliers), plural(len(v.suppliers), "supplier has", "suppliers have"), m)}
	if sim > 0 {
		parts = append(parts, fmt.Sprintf("%d more %s only simulated GPUs, left out by default (simulated=true or --allow-simulated to rent them)", sim, plural(sim, "offers", "offer")))
	}
	if v.busy > 0 {
		parts = append(parts, fmt.Sprintf("%d %s fully booked (fewer than %d free)", v.busy, plural(v.busy, "is", "are"), req.Count))
	}
	if len(v.held) > 0 {
		parts = append(parts, heldReason(v.held))
	}
	if len(v.priceDeclines) > 0 {
		parts = append(parts, fmt.Sprintf("the cheapest free one asks %s > your max %s", money.Micros(slices.Min(v.priceDeclines)).String(), req.MaxPrice.String()))
	}
	// Suppliers that did not answer because the renter did not ask them:
	// their asks, not auction ones, are above its maximum
	// (connectSuppliers), so they are priced out, not silent.
	var over []money.Micros
	for s := range v.suppliers {
		if p, ok := v.firm[s]; ok && req.MaxPrice > 0 && p > req.MaxPrice && !v.answered[s] && !v.leftOut[s] {
			over = append(over, p)
		}
	}
	switch {
	case len(over) == 1:
		parts = append(parts, fmt.Sprintf("1 asks %s > your max %s", over[0].String(), req.MaxPrice.String()))
	case len(over) > 1:
		parts = append(parts, fmt.Sprintf("%d ask more than your max %s (from %s)", len(over), req.MaxPrice.String(), slices.Min(over).String()))
	}
	if v.dur > 0 {
		parts = append(parts, fmt.Sprintf("%d %s not lease for %s", v.dur, plural(v.dur, "does", "do"), req.Duration))
	}
	if v.shunned > 0 {
		parts = append(parts, fmt.Sprintf("%d %s below your reputation requirements (floor %.2f)", v.shunned, plural(v.shunned, "is", "are"), req.MinReputation))
	}
	if v.unproven > 0 {
		parts = append(parts, fmt.Sprintf("%d %s unproven (no trusted challenger has passed %s yet) and left out by default; allow unproven suppliers to lease from %[3]s", v.unproven, plural(v.unproven, "is", "are"), plural(v.unproven, "it", "them")))
	}
	if v.mismatch > 0 {
		parts = append(parts, fmt.Sprintf("%d %s other terms of the filter", v.mismatch, plural(v.mismatch, "fails", "fail")))
	}
	if silent := len(v.suppliers) - len(v.answered) - len(v.leftOut) - len(over); silent > 0 {
		parts = append(parts, fmt.Sprintf("%d did not answer within %s", silent, req.Wait))
	}
	return strings.Join(parts, "; ")
}

// heldReason says why suppliers that have free GPUs declined: too many
// of them are held by leases with no job started on them yet, as each
// supplier counted them, and when the first says to retry.
func heldReason(qs []*Quote) string {
	retry := slices.MinFunc(qs, func(a, b *Quote) int { return cmp.Compare(a.RetryAfterMs, b.RetryAfterMs) }).RetryAfterMs
	in := (time.Duration(retry) * time.Millisecond).Round(time.Second)
	if len(qs) == 1 {
		q := qs[0]
		return fmt.Sprintf("1 has %d of %d held by leases with no job yet (%d free); retry in %s", q.Held, q.Total, q.Free, in)
	}
	return fmt.Sprintf("%d have too many GPUs held by leases with no job yet; the soonest says retry in %s", len(qs), in)
}

// askMatches reports whether a matches f, or fails it only on attributes
// an ask does not carry.
func askMatches(f Filter, a *Ask) bool {
	ok, _ := f.Match(Offer{Model: a.Model, Region: a.Region, Simulated: a.Simulated, Count: int(a.Count), Free: int(a.Count), PriceMicros: money.Micros(a.PriceMicros)})
	return ok || onlyAttrsUnknown(f, a)
}

// onlyAttrsUnknown reports whether an ask fails f only on attributes an
// ask does not carry (vram, cc, tflops, reputation ...): such asks still
// count as candidates when explaining.
func onlyAttrsUnknown(f Filter, a *Ask) bool {
	var known Filter
	for _, t := range f.Terms {
		switch t.Key {
		case "model", "region", "simulated":
			known.Terms = append(known.Terms, t)
		}
	}
	ok, _ := known.Match(Offer{Model: a.Model, Region: a.Region, Simulated: a.Simulated})
	return ok
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// supplierModel is one supplier's offer of one model.
type supplierModel struct {
	s peer.ID
	m string
}
