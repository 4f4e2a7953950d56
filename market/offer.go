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
	// What decides whether the hardware suits a job, from the profile:
	// the least over the supplier's GPUs of the model; 0, "" or nil when
	// unknown (older suppliers, simulated GPUs).
	PCIeGen       int    `json:"pcie_gen,omitempty"`
	PCIeWidth     int    `json:"pcie_width,omitempty"`
	NVLinks       *int   `json:"nvlink_links,omitempty"`
	DriverVersion string `json:"driver_version,omitempty"`
	CUDAVersion   string `json:"cuda_version,omitempty"`
	// MemBandwidthGBps is the model's spec: the memory proof holds the
	// supplier to it.
	MemBandwidthGBps int `json:"mem_bandwidth_gbps,omitempty"`
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
			o.hardwareOf(g)
		} else {
			o.leastHardware(g)
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

// SetHardware sets o's hardware fields (PCIe, NVLink, driver, CUDA,
// memory bandwidth) from gpus, the supplier's GPUs of o's model, as
// OffersFromProfile does: the least of them.
func (o *Offer) SetHardware(gpus []*pb.GPU) {
	for i, g := range gpus {
		if i == 0 {
			o.hardwareOf(g)
		} else {
			o.leastHardware(g)
		}
	}
}

// hardwareOf sets o's hardware fields from GPU g.
func (o *Offer) hardwareOf(g *pb.GPU) {
	o.PCIeGen, o.PCIeWidth = int(g.PcieGen), int(g.PcieWidth)
	if g.NvlinkLinks != nil {
		n := int(*g.NvlinkLinks)
		o.NVLinks = &n
	}
	o.DriverVersion, o.CUDAVersion = g.DriverVersion, g.CudaVersion
	o.MemBandwidthGBps = int(g.MemBandwidthGbps)
}

// leastHardware lowers o's hardware fields to GPU g's where g has less,
// so that a filter term holds for every GPU a lease may get; a field g
// does not know makes it unknown.
func (o *Offer) leastHardware(g *pb.GPU) {
	var h Offer
	h.hardwareOf(g)
	least := func(a, b int) int {
		if a == 0 || b == 0 {
			return 0
		}
		return min(a, b)
	}
	o.PCIeGen, o.PCIeWidth = least(o.PCIeGen, h.PCIeGen), least(o.PCIeWidth, h.PCIeWidth)
	o.MemBandwidthGBps = least(o.MemBandwidthGBps, h.MemBandwidthGBps)
	switch {
	case o.NVLinks == nil || h.NVLinks == nil:
		o.NVLinks = nil
	case *h.NVLinks < *o.NVLinks:
		o.NVLinks = h.NVLinks
	}
	if h.DriverVersion != o.DriverVersion {
		o.DriverVersion = ""
	}
	if oc, err := parseCC(o.CUDAVersion); err == nil {
		if hc, err := parseCC(h.CUDAVersion); err != nil || hc.compare(oc) < 0 {
			o.CUDAVersion = h.CUDAVersion
		}
	}
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
