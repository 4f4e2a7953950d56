package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Result is what one run measured.
type Result struct {
	Nodes, Slots int
	Seed         uint64
	Slot         time.Duration
	Requests     int // distinct requests
	Filled       int // filled by the market
	Central      int // filled by the central matcher
	// ImpostorLeases are leases made with impostors (not counted as
	// fills); DoubleBooked, leases that overlap another on one GPU.
	ImpostorLeases, DoubleBooked int
	// Faults are broken rules: leases not countersigned, not kept by
	// both sides, or outside their request's terms.
	Faults []string
	// Messages is gossip messages handed to a node's validator (each
	// message once per node), per node per simulated second, and per
	// node per real second of the run; Streams, streams opened or
	// accepted per node per simulated second.
	Messages, MessagesReal, Streams float64
	// GossipP50, GossipP99: delays from publish to each node's receipt;
	// Reach, the mean share of nodes each message reached.
	GossipP50, GossipP99 time.Duration
	Reach                float64
	Prices               []ModelPrices
	Wall                 time.Duration
	// Missed says why the market left unfilled requests that the central
	// matcher filled: each one's last renter error. MissedInTime counts
	// those whose last rent ran out of time (a supplier that did not
	// answer within the wait, a publish or a rent past its deadline)
	// rather than finding no supplier able and willing to serve it.
	Missed       []string
	MissedInTime int
	// Released counts leases their supplier released unclaimed before
	// the simulation started their job: the real time between lease and
	// job start passed the lease's claim window.
	Released int
	// OffGrid counts slots whose renting ran past their end (less the
	// time a rent may take) and leases that could not be sized to end on
	// their slot's boundary: what would let a lease hold its GPU for
	// other slots than the central matcher counts. 0 in a valid run.
	OffGrid int
	// Warm counts the leases running before the first slot (Config.Warm);
	// WarmFailed, those drawn that could not be made (dropped from the
	// central matcher's start too).
	Warm, WarmFailed int
	// Utilisation and CentralUtilisation are the shares of the honest
	// GPUs' slots (of the suppliers present in each slot) that leases
	// held, warm ones included: the market's and the central matcher's.
	Utilisation, CentralUtilisation float64
}

// ModelPrices is one model's price convergence: the median and relative
// spread ((p90 - p10) / median) of its trade prices in the first and the
// last third of the slots, and the spread of the nodes' price indexes
// (their medians) at the end.
type ModelPrices struct {
	Model                   string
	Trades                  int
	FirstMedian, LastMedian int64
	FirstSpread, LastSpread float64
	IndexMedian             int64
	IndexSpread             float64
	FirstTrades, LastTrades int
}

// FillRatio is the market's fills over the central matcher's.
func (r *Result) FillRatio() float64 {
	if r.Central == 0 {
		return 0
	}
	return float64(r.Filled) / float64(r.Central)
}

// result summarises the run, wall long in real time and simulated
// long by the simulated clock.
func (s *Sim) result(wall, simulated time.Duration) *Result {
	central := RunCentral(s.w)
	s.mu.Lock()
	leases := slices.Clone(s.leases)
	faults := slices.Clone(s.faults)
	released, offGrid := s.released, s.offGrid
	s.mu.Unlock()
	r := &Result{Nodes: s.cfg.Nodes, Slots: s.w.Slots, Seed: s.cfg.Seed, Slot: s.w.Slot, Requests: len(s.w.Requests),
		Central: central.Filled, Faults: faults, Released: released, OffGrid: offGrid, Wall: wall}
	var honest []leaseRecord
	for _, l := range leases {
		if s.w.Suppliers[l.supplier].Impostor {
			r.ImpostorLeases++
			continue
		}
		honest = append(honest, l)
	}
	r.Filled = len(honest)
	s.mu.Lock()
	warm := slices.Clone(s.warmLeases)
	s.mu.Unlock()
	r.Warm, r.WarmFailed = len(warm), s.warmFailed
	r.DoubleBooked = doubleBooked(append(slices.Clone(honest), warm...))
	var held, centralHeld []span
	for _, l := range append(slices.Clone(honest), warm...) {
		held = append(held, span{l.supplier, l.slot, l.slots})
	}
	for _, wl := range s.w.Warm {
		centralHeld = append(centralHeld, span{wl.Supplier, 0, wl.Slots})
	}
	for _, q := range s.w.Requests {
		if sup, ok := central.Assigned[q.ID]; ok {
			centralHeld = append(centralHeld, span{sup, central.At[q.ID], q.Slots})
		}
	}
	r.Utilisation, r.CentralUtilisation = utilisation(s.w, held), utilisation(s.w, centralHeld)
	simSeconds := simulated.Seconds()
	deliveries, _ := s.meter.messages()
	perNode := float64(deliveries) / float64(s.cfg.Nodes)
	r.Messages, r.MessagesReal = perNode/simSeconds, perNode/wall.Seconds()
	var streams int64
	for _, n := range s.nodes {
		streams += n.host.streams.Load()
	}
	r.Streams = float64(streams) / float64(s.cfg.Nodes) / simSeconds
	r.GossipP50, r.GossipP99 = s.meter.quantile(0.5), s.meter.quantile(0.99)
	r.Reach = s.meter.meanReach(s.cfg.Nodes)
	r.Prices = s.prices(honest)
	filled := map[int]bool{}
	for _, l := range honest {
		filled[l.request] = true
	}
	for _, q := range s.w.Requests {
		if _, ok := central.Assigned[q.ID]; ok && !filled[q.ID] {
			s.mu.Lock()
			why := s.why[q.ID]
			s.mu.Unlock()
			r.Missed = append(r.Missed, fmt.Sprintf("request %d (%s, max %d, %d slots): %s", q.ID, q.Filter(), q.MaxPrice, q.Slots, why))
			if outOfTime(why) {
				r.MissedInTime++
			}
		}
	}
	return r
}

// outOfTime tells whether a rent's error says it ran out of time: a
// supplier that did not answer within the wait (market.NoMatch's
// reason), or a deadline.
func outOfTime(why string) bool {
	return strings.Contains(why, "did not answer within") || strings.Contains(why, "deadline exceeded") ||
		strings.Contains(why, "released before its job started")
}

// span is one lease's hold in slots: one GPU of a supplier (an index in
// Workload.Suppliers) from slot from for slots slots.
type span struct{ supplier, from, slots int }

// utilisation is the share of the honest suppliers' GPU-slots, counting
// each slot's present suppliers only, that the spans hold.
func utilisation(w *Workload, held []span) float64 {
	present := func(sp SupplierSpec, k int) bool { return !sp.Impostor && (sp.Leaves < 0 || k < sp.Leaves) }
	capacity, busy := 0, 0
	for k := range w.Slots {
		for _, sp := range w.Suppliers {
			if present(sp, k) {
				capacity += sp.GPUs
			}
		}
	}
	for _, h := range held {
		sp := w.Suppliers[h.supplier]
		for k := h.from; k < min(h.from+h.slots, w.Slots); k++ {
			if present(sp, k) {
				busy++
			}
		}
	}
	if capacity == 0 {
		return 0
	}
	return float64(busy) / float64(capacity)
}

// doubleBooked counts leases that overlap an earlier one on a GPU.
func doubleBooked(leases []leaseRecord) int {
	type span struct{ start, end int64 }
	byGPU := map[[2]any][]span{}
	for _, l := range leases {
		for _, u := range l.uuids {
			k := [2]any{l.supplier, u}
			byGPU[k] = append(byGPU[k], span{l.start, l.end})
		}
	}
	n := 0
	for _, spans := range byGPU {
		sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
		for i := 1; i < len(spans); i++ {
			if spans[i].start < spans[i-1].end {
				n++
			}
		}
	}
	return n
}

// prices is each model's price convergence.
func (s *Sim) prices(leases []leaseRecord) []ModelPrices {
	third := max(1, s.w.Slots/3)
	var out []ModelPrices
	for _, m := range models {
		var first, last []int64
		p := ModelPrices{Model: m.slug}
		for _, l := range leases {
			if l.model != m.slug {
				continue
			}
			p.Trades++
			switch {
			case l.slot < third:
				first = append(first, l.price)
			case l.slot >= s.w.Slots-third:
				last = append(last, l.price)
			}
		}
		p.FirstTrades, p.LastTrades = len(first), len(last)
		p.FirstMedian, p.FirstSpread = spread(first)
		p.LastMedian, p.LastSpread = spread(last)
		var idx []int64
		for i, n := range s.nodes {
			if s.fab.isGone(s.ids[i]) {
				continue
			}
			if v := n.priceIdx.Median(m.slug); v > 0 {
				idx = append(idx, v)
			}
		}
		p.IndexMedian, p.IndexSpread = spread(idx)
		out = append(out, p)
	}
	return out
}

// spread is the median of xs and (p90 - p10) / median; zeros when empty.
func spread(xs []int64) (int64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	q := func(f float64) int64 { return xs[min(len(xs)-1, int(f*float64(len(xs))))] }
	med := q(0.5)
	if med == 0 {
		return 0, 0
	}
	return med, float64(q(0.9)-q(0.1)) / float64(med)
}
