package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
)

// modelSpec is one GPU model of the simulated market: its catalog slug,
// a reference price per GPU-hour, and its share of supply and demand.
type modelSpec struct {
	slug  string
	ref   money.Micros // per GPU-hour
	share float64
}

// The market's models and regions (read-only tables).
var (
	models = []modelSpec{
		{"h100-sxm", 2_400_000, 0.25},
		{"a100-80gb", 1_500_000, 0.25},
		{"l40s", 900_000, 0.2},
		{"rtx4090", 450_000, 0.3},
	}
	regions      = []string{"eu-west", "us-east", "ap-south"}
	regionShares = []float64{0.4, 0.4, 0.2}
	// gpuCounts and their shares: how many GPUs an honest supplier has.
	gpuCounts      = []int{1, 2, 4, 8}
	gpuCountShares = []float64{0.35, 0.3, 0.2, 0.15}
	pricingModes   = []market.PricingMode{market.Fixed, market.Auction, market.Dynamic}
)

// Job lengths are Pareto distributed, in whole slots: shape paretoAlpha,
// scale paretoMin slots, at most maxJobSlots.
const (
	paretoAlpha = 1.5
	paretoMin   = 3.0
	maxJobSlots = 240
	// impostorGPUs is how many GPUs an impostor claims.
	impostorGPUs = 8
)

// SupplierSpec is one selling node.
type SupplierSpec struct {
	Node   int
	Model  string
	Region string
	GPUs   int
	Pricer market.Pricer
	// Impostor: it claims GPUs it does not have. Attested impostors have
	// failed the auditors' challenges; the others are fresh keys nobody
	// has challenged.
	Impostor, Attested bool
	// Leaves is the slot at whose start the supplier leaves (-1: never);
	// Abrupt ones do not withdraw their asks.
	Leaves int
	Abrupt bool
}

// Request is one renter's need: one GPU of Model (in Region, unless
// empty) for Slots slots at no more than MaxPrice per GPU-hour. It
// arrives at slot Arrive (at fraction Offset of the slot) and tries
// again in each of the next Patience slots until it is filled.
type Request struct {
	ID       int
	Renter   int
	Arrive   int
	Offset   float64
	Slots    int
	Model    string
	Region   string
	MaxPrice money.Micros
	Patience int
}

// Filter is the request's rent filter.
func (r Request) Filter() string {
	if r.Region == "" {
		return "model=" + r.Model
	}
	return fmt.Sprintf("model=%s region=%s", r.Model, r.Region)
}

// Workload is the seeded order flow of one simulation: who sells what,
// who rents, and every request, the same for the market and for the
// central matcher.
type Workload struct {
	Nodes     int
	Slots     int
	Slot      time.Duration // simulated length of a slot
	Regions   []string      // each node's region
	Suppliers []SupplierSpec
	Renters   []int // nodes that rent
	Requests  []Request
	// Warm are the leases already running when the first slot begins
	// (Config.Warm), the same for the market and the central matcher.
	Warm []WarmLease
	// Rate is the mean arrivals per slot.
	Rate float64
}

// WarmLease is one GPU of Supplier (an index in Workload.Suppliers)
// leased before the first slot, for Slots more slots: what a market that
// had run long before the measurement began would hold.
type WarmLease struct {
	Supplier int
	Slots    int
}

// NewWorkload draws the order flow of cfg from a PCG seeded with
// cfg.Seed: Poisson arrivals (exponential gaps) at a rate that offers
// cfg.Load of the honest GPUs, Pareto job lengths, models and regions by
// their shares, prices around each model's reference, impostors and
// suppliers leaving.
func NewWorkload(cfg Config) *Workload {
	cfg = cfg.fill()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	w := &Workload{Nodes: cfg.Nodes, Slots: cfg.Slots, Slot: cfg.Slot, Regions: make([]string, cfg.Nodes)}
	for i := range w.Regions {
		w.Regions[i] = regions[pick(rng, regionShares)]
	}
	order := rng.Perm(cfg.Nodes)
	honest := max(1, int(math.Round(cfg.SupplierShare*float64(cfg.Nodes))))
	impostors := max(1, int(math.Round(cfg.ImpostorShare*float64(cfg.Nodes))))
	gpus := 0
	for k, node := range order {
		switch {
		case k < honest:
			s := honestSupplier(rng, node, w.Regions[node])
			gpus += s.GPUs
			w.Suppliers = append(w.Suppliers, s)
		case k < honest+impostors:
			w.Suppliers = append(w.Suppliers, impostor(rng, node, w.Regions[node], k%2 == 0))
		default:
			w.Renters = append(w.Renters, node)
		}
	}
	leaving := max(1, int(math.Round(cfg.LeaveShare*float64(honest))))
	for k, i := range rng.Perm(honest)[:min(leaving, honest)] {
		w.Suppliers[i].Leaves = cfg.Slots/4 + rng.IntN(max(1, cfg.Slots/2))
		w.Suppliers[i].Abrupt = k%2 == 1
	}
	w.Rate = cfg.Load * float64(gpus) / meanJobSlots()
	for t := rng.ExpFloat64() / w.Rate; t < float64(cfg.Slots); t += rng.ExpFloat64() / w.Rate {
		w.Requests = append(w.Requests, request(rng, len(w.Requests), t, w, cfg.Patience))
	}
	if cfg.Warm > 0 {
		// A stream of its own, so that the rest of the workload is the
		// same with or without a warm start.
		w.Warm = warmLeases(rand.New(rand.NewPCG(cfg.Seed, 0x5851f42d4c957f2d)), w.Suppliers, cfg.Warm)
	}
	return w
}

// warmLeases draws the leases running at the start of a market in its
// steady state: each honest supplier's GPU is busy with probability
// share, for a remaining length drawn from the residual life of the job
// lengths (residualSlots).
func warmLeases(rng *rand.Rand, sups []SupplierSpec, share float64) []WarmLease {
	var out []WarmLease
	cdf := residualCDF()
	for k, sp := range sups {
		if sp.Impostor {
			continue
		}
		for range sp.GPUs {
			if rng.Float64() < share {
				u := rng.Float64()
				out = append(out, WarmLease{Supplier: k, Slots: min(maxJobSlots, 1+sort.SearchFloat64s(cdf, u))})
			}
		}
	}
	return out
}

// residualCDF is the distribution of the slots left of a job running at
// a random moment (renewal theory's residual life: P(R = r) is
// P(L ≥ r) / E[L] for the job length L of jobSlots), as a CDF over
// r = 1 … maxJobSlots for inverse sampling.
func residualCDF() []float64 {
	surv := func(k int) float64 { // P(L >= k) of jobSlots: ceil of the Pareto
		if float64(k-1) < paretoMin {
			return 1
		}
		if k > maxJobSlots {
			return 0
		}
		return math.Pow(paretoMin/float64(k-1), paretoAlpha)
	}
	mean := meanJobSlots()
	cdf := make([]float64, maxJobSlots)
	acc := 0.0
	for r := 1; r <= maxJobSlots; r++ {
		acc += surv(r) / mean
		cdf[r-1] = acc
	}
	return cdf
}

func honestSupplier(rng *rand.Rand, node int, region string) SupplierSpec {
	m := models[pick(rng, modelShares())]
	list := roundPrice(float64(m.ref) * (0.85 + 0.4*rng.Float64()))
	return SupplierSpec{
		Node: node, Model: m.slug, Region: region, GPUs: gpuCounts[pick(rng, gpuCountShares)], Leaves: -1,
		Pricer: market.Pricer{
			Mode:  pricingModes[rng.IntN(len(pricingModes))],
			List:  map[string]money.Micros{m.slug: list},
			Floor: map[string]money.Micros{m.slug: roundPrice(0.7 * float64(list))},
		},
	}
}

// impostor undercuts the market to lure renters.
func impostor(rng *rand.Rand, node int, region string, attested bool) SupplierSpec {
	m := models[pick(rng, modelShares())]
	return SupplierSpec{
		Node: node, Model: m.slug, Region: region, GPUs: impostorGPUs, Leaves: -1,
		Impostor: true, Attested: attested,
		Pricer: market.Pricer{Mode: market.Fixed, List: map[string]money.Micros{m.slug: roundPrice(0.6 * float64(m.ref))}},
	}
}

func request(rng *rand.Rand, id int, t float64, w *Workload, patience int) Request {
	m := models[pick(rng, modelShares())]
	renter := w.Renters[rng.IntN(len(w.Renters))]
	r := Request{
		ID: id, Renter: renter, Arrive: int(t), Offset: t - math.Floor(t), Slots: jobSlots(rng),
		Model: m.slug, MaxPrice: roundPrice(float64(m.ref) * (0.8 + 0.8*rng.Float64())), Patience: patience,
	}
	if rng.IntN(2) == 0 {
		r.Region = w.Regions[renter]
	}
	return r
}

// jobSlots draws a Pareto job length in whole slots (at least 1).
func jobSlots(rng *rand.Rand) int {
	x := paretoMin / math.Pow(1-rng.Float64(), 1/paretoAlpha)
	return min(maxJobSlots, max(1, int(math.Ceil(x))))
}

// meanJobSlots is the mean of jobSlots, summed exactly over its support.
func meanJobSlots() float64 {
	cdf := func(x float64) float64 { // P(X <= x) of the continuous Pareto
		if x < paretoMin {
			return 0
		}
		return 1 - math.Pow(paretoMin/x, paretoAlpha)
	}
	mean := 0.0
	for k := 1; k < maxJobSlots; k++ {
		mean += float64(k) * (cdf(float64(k)) - cdf(float64(k-1)))
	}
	return mean + maxJobSlots*(1-cdf(maxJobSlots-1))
}

func modelShares() []float64 {
	s := make([]float64, len(models))
	for i, m := range models {
		s[i] = m.share
	}
	return s
}

// pick draws an index with probability proportional to shares.
func pick(rng *rand.Rand, shares []float64) int {
	total := 0.0
	for _, s := range shares {
		total += s
	}
	x := rng.Float64() * total
	for i, s := range shares {
		if x < s {
			return i
		}
		x -= s
	}
	return len(shares) - 1
}

// roundPrice rounds micros to whole thousandths of the currency.
func roundPrice(micros float64) money.Micros {
	return money.Micros(math.Round(micros/1000)) * 1000
}
