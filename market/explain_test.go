package market

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market/pb"
)

// TestExplainNoMatch table-tests the summary a renter gets when nothing
// leased: one case per reason, from the facts gathered alone.
func TestExplainNoMatch(t *testing.T) {
	filter := func(s string) Filter {
		f, err := ParseFilter(s)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	req := RentRequest{Filter: filter("model=h100-sxm"), Count: 2, Duration: time.Hour, MaxPrice: 2_000_000,
		Wait: 2 * time.Second, MinReputation: 0.5}
	sa, sb, sc := peer.ID("supplier-a"), peer.ID("supplier-b"), peer.ID("supplier-c")
	ask := func(s peer.ID, model string, price int64) *Ask {
		return &Ask{Ask: &pb.Ask{Model: model, Region: "eu", Count: 4, PriceMicros: price}, Supplier: s}
	}
	quote := func(s peer.ID, model string, d Decline, price, min int64) *Quote {
		return &Quote{Quote: &pb.Quote{Model: model, Decline: string(d), PriceMicros: price, MinPriceMicros: min}, Supplier: s}
	}
	quotes := func(q ...*Quote) []*Quote { return q }
	held := func(q *Quote, held, total, free uint32, retryMs int64) *Quote {
		q.Held, q.Total, q.Free, q.RetryAfterMs = held, total, free, retryMs
		return q
	}
	// realReq is req as Rent makes it when simulated GPUs are not allowed.
	realReq := req
	realReq.asked = req.Filter
	realReq.Filter, realReq.realOnly = req.Filter.RealOnly(false)
	simAsk := func(s peer.ID) *Ask {
		a := ask(s, "h100-sxm", 1_000_000)
		a.Simulated = true
		return a
	}
	for _, tc := range []struct {
		name  string
		req   RentRequest
		facts noMatchFacts
		want  []string
	}{
		{
			name: "no supplier has the model",
			req:  req,
			want: []string{"no supplier offers h100-sxm (no ask in the order book, no answer to the bid)"},
		},
		{
			name: "no supplier has any model the filter allows",
			req:  RentRequest{Filter: filter("vram>=80"), MaxPrice: 1},
			want: []string{"no supplier offers GPUs matching the filter (no ask in the order book, no answer to the bid)"},
		},
		{
			name:  "asks of other models do not count",
			req:   req,
			facts: noMatchFacts{asks: []*Ask{ask(sa, "a100-sxm", 1_000_000)}},
			want:  []string{"no supplier offers h100-sxm (no ask in the order book, no answer to the bid)"},
		},
		{
			name: "a supplier the lease's use cannot reach",
			req:  req,
			facts: noMatchFacts{
				asks:        []*Ask{ask(sa, "h100-sxm", 1_500_000), ask(sb, "h100-sxm", 1_000_000)},
				declines:    quotes(quote(sa, "h100-sxm", DeclineBusy, 0, 0)),
				unreachable: []attempt{{quote(sb, "h100-sxm", "", 1_000_000, 0), "relay-only"}},
			},
			want: []string{"2 suppliers have h100-sxm; 1 is fully booked (fewer than 2 free)",
				sb.String() + " (h100-sxm at 1.00) cannot be reached for this lease: relay-only"},
		},
		{
			name:  "all busy",
			req:   req,
			facts: noMatchFacts{declines: quotes(quote(sa, "h100-sxm", DeclineBusy, 0, 0), quote(sb, "h100-sxm", DeclineBusy, 0, 0))},
			want:  []string{"2 suppliers have h100-sxm; 2 are fully booked (fewer than 2 free)"},
		},
		{
			name: "busy for GPUs held with no job: the supplier's count, not fully booked",
			req:  req,
			facts: noMatchFacts{declines: quotes(held(quote(sa, "h100-sxm", DeclineBusy, 0, 0), 3, 8, 6, 40_400),
				quote(sb, "h100-sxm", DeclineBusy, 0, 0))},
			want: []string{"2 suppliers have h100-sxm; 1 is fully booked (fewer than 2 free); 1 has 3 of 8 held by leases with no job yet (6 free); retry in 40s"},
		},
		{
			name: "two busy for held GPUs: the soonest retry",
			req:  req,
			facts: noMatchFacts{declines: quotes(held(quote(sa, "h100-sxm", DeclineBusy, 0, 0), 3, 8, 6, 90_000),
				held(quote(sb, "h100-sxm", DeclineBusy, 0, 0), 2, 4, 2, 12_000))},
			want: []string{"2 suppliers have h100-sxm; 2 have too many GPUs held by leases with no job yet; the soonest says retry in 12s"},
		},
		{
			name: "cheapest declining supplier above max price",
			req:  req,
			facts: noMatchFacts{declines: quotes(quote(sa, "h100-sxm", DeclinePrice, 3_000_000, 2_500_000),
				quote(sb, "h100-sxm", DeclinePrice, 2_100_000, 0))},
			want: []string{"2 suppliers have h100-sxm; the cheapest free one asks 2.10 > your max 2.00"},
		},
		{
			name:  "asks above max price: not asked, so priced out, not silent",
			req:   req,
			facts: noMatchFacts{asks: []*Ask{ask(sa, "h100-sxm", 3_000_000), ask(sb, "h100-sxm", 2_500_000)}},
			want:  []string{"2 suppliers have h100-sxm; 2 ask more than your max 2.00 (from 2.50)"},
		},
		{
			name: "one ask above max price beside a supplier that answered and one that did not",
			req:  req,
			facts: noMatchFacts{asks: []*Ask{ask(sa, "h100-sxm", 3_000_000), ask(sc, "h100-sxm", 1_500_000)},
				offers: quotes(quote(sb, "h100-sxm", "", 1_000_000, 0))},
			want: []string{"3 suppliers have h100-sxm; 1 asks 3.00 > your max 2.00; 1 did not answer within 2s"},
		},
		{
			name: "an auction ask above max price was asked: it did not answer",
			req:  req,
			facts: noMatchFacts{asks: []*Ask{{Ask: &pb.Ask{Model: "h100-sxm", Region: "eu", Count: 4, PriceMicros: 3_000_000,
				Pricing: string(Auction)}, Supplier: sa}}},
			want: []string{"1 supplier has h100-sxm; 1 did not answer within 2s"},
		},
		{
			name:  "none leases for the duration",
			req:   req,
			facts: noMatchFacts{declines: quotes(quote(sa, "h100-sxm", DeclineDuration, 0, 0))},
			want:  []string{"1 supplier has h100-sxm; 1 does not lease for 1h0m0s"},
		},
		{
			name:  "none meets the reputation floor",
			req:   req,
			facts: noMatchFacts{shunned: quotes(quote(sa, "h100-sxm", "", 1_000_000, 0), quote(sb, "h100-sxm", "", 1_000_000, 0))},
			want:  []string{"2 suppliers have h100-sxm; 2 are below your reputation requirements (floor 0.50)"},
		},
		{
			name: "an unproven supplier that did not answer is left out, not silent",
			req: RentRequest{Filter: filter("model=h100-sxm"), Count: 2, Duration: time.Hour, MaxPrice: 2_000_000,
				Wait: 2 * time.Second, MinReputation: 0.5, Proven: func(p peer.ID) bool { return p == sa }},
			facts: noMatchFacts{asks: []*Ask{ask(sa, "h100-sxm", 2_500_000), ask(sb, "h100-sxm", 1_000_000), ask(sc, "h100-sxm", 1_500_000)},
				declines: quotes(quote(sa, "h100-sxm", "", 2_500_000, 0))},
			want: []string{"3 suppliers have h100-sxm; the cheapest free one asks 2.50 > your max 2.00; 2 are unproven (no trusted challenger has passed them yet) and left out by default; " +
				"allow unproven suppliers to lease from them"},
		},
		{
			name:  "unproven",
			req:   req,
			facts: noMatchFacts{unproven: quotes(quote(sa, "h100-sxm", "", 1_000_000, 0))},
			want: []string{"1 supplier has h100-sxm; 1 is unproven (no trusted challenger has passed it yet) and left out by default; " +
				"allow unproven suppliers to lease from it"},
		},
		{
			name:  "other terms of the filter",
			req:   req,
			facts: noMatchFacts{declines: quotes(quote(sa, "h100-sxm", DeclineMismatch, 0, 0), quote(sb, "h100-sxm", DeclineMismatch, 0, 0))},
			want:  []string{"2 suppliers have h100-sxm; 2 fail other terms of the filter"},
		},
		{
			name: "only simulated suppliers, one of which got the bid and declined it",
			req:  realReq,
			facts: noMatchFacts{asks: []*Ask{simAsk(sa), simAsk(sb)},
				declines: quotes(quote(sa, "h100-sxm", DeclineMismatch, 0, 0))},
			want: []string{"no supplier has real h100-sxm GPUs: 2 offer only simulated ones, left out by default (add simulated=true to the filter, or --allow-simulated, to rent simulated GPUs)"},
		},
		{
			name: "a real supplier beside a simulated one",
			req:  realReq,
			facts: noMatchFacts{asks: []*Ask{simAsk(sa), ask(sc, "h100-sxm", 1_000_000)},
				declines: quotes(quote(sc, "h100-sxm", DeclineBusy, 0, 0))},
			want: []string{"1 supplier has h100-sxm; 1 more offers only simulated GPUs, left out by default (simulated=true or --allow-simulated to rent them); 1 is fully booked (fewer than 2 free)"},
		},
		{
			name: "proposal refused",
			req:  req,
			facts: noMatchFacts{offers: quotes(quote(sa, "h100-sxm", "", 1_500_000, 0)),
				tried: []attempt{{q: quote(sa, "h100-sxm", "", 1_500_000, 0), reason: "gpus taken"}}},
			want: []string{"1 supplier has h100-sxm", sa.String() + " (h100-sxm at 1.50) refused the proposal: gpus taken"},
		},
		{
			name: "every reason, one line per model in order",
			req:  RentRequest{Filter: filter("region=eu"), Count: 1, Duration: time.Minute, MaxPrice: 1_000_000, Wait: time.Second},
			facts: noMatchFacts{
				asks:     []*Ask{ask(sc, "t4", 2_000_000), ask(sa, "h100-sxm", 3_000_000)},
				declines: quotes(quote(sa, "h100-sxm", DeclineBusy, 0, 0), quote(sb, "h100-sxm", DeclinePrice, 4_000_000, 0)),
			},
			want: []string{
				"2 suppliers have h100-sxm; 1 is fully booked (fewer than 1 free); the cheapest free one asks 4.00 > your max 1.00",
				"1 supplier has t4; 1 asks 2.00 > your max 1.00",
			},
		},
	} {
		got := explainNoMatch(tc.req, tc.facts).Reasons
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestScreenAsksReach: before its bid, a renter leaves out the asks of
// suppliers its lease's use cannot reach, once per supplier and model
// with the reason, and keeps the rest; without the screen it keeps all.
func TestScreenAsksReach(t *testing.T) {
	far, near := peer.ID("far"), peer.ID("near")
	ask := func(s peer.ID, model string) *Ask {
		return &Ask{Ask: &pb.Ask{Model: model, PriceMicros: 1_120_000}, Supplier: s}
	}
	asks := []*Ask{ask(far, "a100-80gb"), ask(near, "a100-80gb"), ask(far, "a100-80gb"), ask(far, "l40s")}
	req := RentRequest{Unreachable: func(p peer.ID) string {
		if p == far {
			return "its profile says relay-only"
		}
		return ""
	}}
	kept, out := screenAsksReach(asks, req)
	if len(kept) != 1 || kept[0].Supplier != near {
		t.Fatalf("kept %d asks, want only near's", len(kept))
	}
	if len(out) != 2 {
		t.Fatalf("%d unreachable attempts, want one per model of far: %+v", len(out), out)
	}
	for _, u := range out {
		if u.q.Supplier != far || u.reason != "its profile says relay-only" || u.q.PriceMicros != 1_120_000 {
			t.Errorf("attempt %+v %q", u.q, u.reason)
		}
	}
	if kept, out := screenAsksReach(asks, RentRequest{}); len(kept) != len(asks) || out != nil {
		t.Fatalf("without a screen: kept %d of %d, %d left out", len(kept), len(asks), len(out))
	}
}
