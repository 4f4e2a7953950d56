package node

import (
	"fmt"
	"sort"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// OffersFromProfile turns a validated profile into one offer per GPU model.
func OffersFromProfile(p *p2p.Profile) []market.Offer {
	byModel := map[string]*market.Offer{}
	var order []string
	addrs := make([]string, 0, len(p.Addrs))
	for _, a := range p.Addrs {
		addrs = append(addrs, a.String())
	}
	limits := offerLimits(p)
	for _, g := range p.Gpus {
		o := byModel[g.Model]
		if o == nil {
			o = &market.Offer{
				PeerID: p.ID.String(), Addrs: addrs, Model: g.Model, Name: g.Name,
				VRAMGiB:           int((g.MemoryBytes + 1<<29) >> 30),
				ComputeCapability: fmt.Sprintf("%d.%d", g.CcMajor, g.CcMinor),
				Region:            p.Region, Simulated: g.Simulated,
				Version: p.Software, SeenAt: p.Issued().UTC(), JobLimits: limits,
				TFLOPS: catalog.TFLOPS(g.Model),
			}
			byModel[g.Model] = o
			order = append(order, g.Model)
		}
		o.Count++
		o.Free++
		// A profile mixing real and simulated GPUs of one model is shown
		// as simulated: renters filtering them out must not get either.
		o.Simulated = o.Simulated || g.Simulated
	}
	out := make([]market.Offer, 0, len(order))
	for _, m := range order {
		out = append(out, *byModel[m])
	}
	return out
}

// offerLimits are the job limits a profile states, nil when none.
func offerLimits(p *p2p.Profile) *market.JobLimits {
	if p.JobLimitsDefault == nil && p.JobLimitsMax == nil {
		return nil
	}
	set := func(l *pb.JobLimits) market.JobLimitSet {
		return market.JobLimitSet{MemoryBytes: l.GetMemoryBytes(), Procs: l.GetProcs(), DiskBytes: l.GetDiskBytes(), OpenFiles: l.GetOpenFiles()}
	}
	return &market.JobLimits{Default: set(p.JobLimitsDefault), Max: set(p.JobLimitsMax)}
}

// addScore sets an offer's reputation, uptime and verified status.
func addScore(o *market.Offer, s reputation.Score) {
	r := s.Reputation
	o.Reputation, o.Verified = &r, s.Verified
	if s.Pings > 0 {
		u := s.Uptime * 100
		o.UptimePct = &u
	}
}

// MatchOffers returns the offers of profiles that f accepts, sorted by
// model, then region, then peer ID. asks, from an order book, add what
// profiles do not carry: the price of each supplier's live ask for a
// model and how many GPUs it has free. With a book (asks not nil), an
// offer without a live ask has none free. rep, when not nil, adds each
// supplier's reputation, uptime and verified status.
func MatchOffers(ps []*p2p.Profile, f market.Filter, asks []*market.Ask, rep *reputation.Book) []market.Offer {
	type key struct{ peer, model string }
	live := map[key]*market.Ask{}
	for _, a := range asks {
		live[key{a.Supplier.String(), a.Model}] = a
	}
	var out []market.Offer
	for _, p := range ps {
		for _, o := range OffersFromProfile(p) {
			if a := live[key{o.PeerID, o.Model}]; a != nil {
				o.PriceMicros, o.Free = money.Micros(a.PriceMicros), min(int(a.Count), o.Count)
			} else if asks != nil {
				o.Free = 0 // sold out, or not for sale: no live ask
			}
			if rep != nil {
				addScore(&o, rep.Score(p.ID))
			}
			if ok, _ := f.Match(o); ok {
				out = append(out, o)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Model != b.Model {
			return a.Model < b.Model
		}
		if a.Region != b.Region {
			return a.Region < b.Region
		}
		return a.PeerID < b.PeerID
	})
	return out
}
