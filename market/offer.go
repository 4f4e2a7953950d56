package market

import (
	"fmt"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
)

// Offer is one supplier's GPUs of one model, as search shows it.
// The JSON names are a public contract.
type Offer struct {
	PeerID            string   `json:"peer_id"`
	Addrs             []string `json:"addrs"`
	Model             string   `json:"model"`              // canonical slug
	Name              string   `json:"name"`               // device name
	Count             int      `json:"count"`              // GPUs of this model at this supplier
	Free              int      `json:"free"`               // of which free, if known (else == Count)
	VRAMGiB           int      `json:"vram_gib"`           // memory per GPU
	ComputeCapability string   `json:"compute_capability"` // "major.minor", e.g. "9.0"
	// TFLOPS is dense BF16 TFLOPS from the device profile, rounded down.
	TFLOPS int    `json:"tflops"`
	Region string `json:"region"`
	// Reach is how the supplier can be reached, as its profile states it:
	// "public", "punchable", "relay-only" or "unknown" (see p2p.Reach).
	Reach     string `json:"reach"`
	Simulated bool   `json:"simulated"`
	Verified  bool   `json:"verified"`
	// PriceMicros is the price per GPU-hour; 0 = not advertised. In JSON
	// it is a plain integer of micro-units.
	PriceMicros money.Micros `json:"price_micros,omitempty"`
	// Reputation is 0..1; nil = unknown.
	Reputation *float64 `json:"reputation,omitempty"`
	// UptimePct is 0..100; nil = unknown.
	UptimePct *float64  `json:"uptime_pct,omitempty"`
	Version   string    `json:"version"`
	SeenAt    time.Time `json:"seen_at"`
	// JobLimits are the per-job limits from the supplier's profile; nil
	// when it states none (older suppliers).
	JobLimits *JobLimits `json:"job_limits,omitempty"`
}

// JobLimits are a supplier's per-job limits: what a job gets for a limit
// its spec leaves at 0, and the most a spec may ask.
type JobLimits struct {
	Default JobLimitSet `json:"default"`
	Max     JobLimitSet `json:"max"`
}

// JobLimitSet is one set of per-job limits; 0 means not set.
type JobLimitSet struct {
	MemoryBytes uint64 `json:"memory_bytes"`
	Procs       uint64 `json:"procs"`
	DiskBytes   uint64 `json:"disk_bytes"`
	OpenFiles   uint64 `json:"open_files"`
}

// ScoreFunc gives a supplier's reputation (0..1), whether it is verified,
// and its uptime in percent (nil when unknown). The node's reputation book
// provides one (reputation.Book.Standing); market does not read
// attestations itself.
type ScoreFunc func(supplier peer.ID) (reputation float64, verified bool, uptimePct *float64)

// OfferInputs add to profiles what they do not carry. Every field is
// optional.
type OfferInputs struct {
	// Asks are the live asks of an order book: the price of each
	// supplier's ask for a model and how many GPUs it has free. With a
	// book (Asks not nil), an offer without a live ask has none free.
	Asks []*Ask
	// Score adds each supplier's reputation, uptime and verified status.
	Score ScoreFunc
}

// OffersFromProfile turns a validated profile into one offer per GPU
// model, in the order the profile lists them, with each model's TFLOPS
// from the catalog.
func OffersFromProfile(p *p2p.Profile) []Offer {
	byModel := map[string]*Offer{}
	var order []string
	addrs := make([]string, 0, len(p.Addrs))
	for _, a := range p.Addrs {
		addrs = append(addrs, a.String())
	}
	limits := offerLimits(p)
	for _, g := range p.Gpus {
		o := byModel[g.Model]
		if o == nil {
			o = &Offer{
				PeerID: p.ID.String(), Addrs: addrs, Model: g.Model, Name: g.Name,
				VRAMGiB:           int((g.MemoryBytes + 1<<29) >> 30),
				ComputeCapability: fmt.Sprintf("%d.%d", g.CcMajor, g.CcMinor),
				Region:            p.Region, Reach: string(p.ReachOf()), Simulated: g.Simulated,
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
	out := make([]Offer, 0, len(order))
	for _, m := range order {
		out = append(out, *byModel[m])
	}
	return out
}

// offerLimits are the job limits a profile states, nil when none.
func offerLimits(p *p2p.Profile) *JobLimits {
	if p.JobLimitsDefault == nil && p.JobLimitsMax == nil {
		return nil
	}
	set := func(l *pb.JobLimits) JobLimitSet {
		return JobLimitSet{MemoryBytes: l.GetMemoryBytes(), Procs: l.GetProcs(), DiskBytes: l.GetDiskBytes(), OpenFiles: l.GetOpenFiles()}
	}
	return &JobLimits{Default: set(p.JobLimitsDefault), Max: set(p.JobLimitsMax)}
}

// MatchOffers returns the offers of profiles that f accepts, sorted by
// model, then region, then peer ID, with what in adds: each supplier's
// price and free count from an order book's live asks, and its
// reputation.
func MatchOffers(ps []*p2p.Profile, f Filter, in OfferInputs) []Offer {
	type key struct{ peer, model string }
	live := map[key]*Ask{}
	for _, a := range in.Asks {
		live[key{a.Supplier.String(), a.Model}] = a
	}
	var out []Offer
	for _, p := range ps {
		for _, o := range OffersFromProfile(p) {
			if a := live[key{o.PeerID, o.Model}]; a != nil {
				o.PriceMicros, o.Free = money.Micros(a.PriceMicros), min(int(a.Count), o.Count)
			} else if in.Asks != nil {
				o.Free = 0 // sold out, or not for sale: no live ask
			}
			if in.Score != nil {
				r, verified, up := in.Score(p.ID)
				o.Reputation, o.Verified, o.UptimePct = &r, verified, up
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
