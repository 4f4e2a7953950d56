package sim

import (
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// CentralResult is what the central matcher filled of a workload.
type CentralResult struct {
	Filled  int            // requests filled
	ByModel map[string]int // requests filled, per model
	// Assigned maps each filled request to the index (in
	// Workload.Suppliers) of the supplier it went to, At to the slot.
	Assigned, At map[int]int
}

// RunCentral runs the optimal central matcher over w: an exchange that
// sees every order as it arrives and knows every honest supplier's free
// GPUs and pricing rules, and clears each slot with an exact maximum
// matching of that slot's open requests (new and retrying) to free GPUs;
// among maximum ones, it fills the requests about to give up first, then
// the cheapest (a min-cost max flow: source → request, capacity 1, cost
// the slots of patience left → supplier, capacity 1 and cost the price,
// if the supplier's Pricer quotes the request within its maximum → sink,
// capacity the free GPUs).
// A filled request holds its GPU for its length in slots. It sees the
// same orders as the market and no future ones: it is optimal slot by
// slot, not in hindsight, and it cannot be fooled by impostors, which
// have no GPUs to give.
func RunCentral(w *Workload) CentralResult {
	res := CentralResult{ByModel: map[string]int{}, Assigned: map[int]int{}, At: map[int]int{}}
	busyUntil := make([][]int, len(w.Suppliers)) // per supplier, the end slot of each GPU in use
	for _, l := range w.Warm {
		busyUntil[l.Supplier] = append(busyUntil[l.Supplier], l.Slots)
	}
	byArrival := append([]Request(nil), w.Requests...)
	sort.SliceStable(byArrival, func(i, j int) bool { return byArrival[i].Arrive < byArrival[j].Arrive })
	var open []Request
	next := 0
	for slot := range w.Slots {
		for s := range busyUntil {
			busyUntil[s] = dropEnded(busyUntil[s], slot)
		}
		for ; next < len(byArrival) && byArrival[next].Arrive == slot; next++ {
			open = append(open, byArrival[next])
		}
		open = keepPatient(open, slot)
		matched := clearSlot(w, open, busyUntil, slot)
		var still []Request
		for i, r := range open {
			s, ok := matched[i]
			if !ok {
				still = append(still, r)
				continue
			}
			busyUntil[s] = append(busyUntil[s], slot+r.Slots)
			res.Filled++
			res.ByModel[r.Model]++
			res.Assigned[r.ID], res.At[r.ID] = s, slot
		}
		open = still
	}
	return res
}

// clearSlot is one slot's min-cost max flow; it maps the index in open
// of each matched request to its supplier.
func clearSlot(w *Workload, open []Request, busyUntil [][]int, slot int) map[int]int {
	live := make([]int, 0, len(w.Suppliers)) // supplier indices present at slot with a free GPU
	for s, sp := range w.Suppliers {
		if !sp.Impostor && (sp.Leaves < 0 || slot < sp.Leaves) && len(busyUntil[s]) < sp.GPUs {
			live = append(live, s)
		}
	}
	src, sink := len(open)+len(live), len(open)+len(live)+1
	f := newFlowNet(sink + 1)
	type edge struct{ e, req, sup int }
	var edges []edge
	for i, r := range open {
		// Among maximum matchings, those that fill the requests closest
		// to giving up first, then the cheapest: a slot of patience
		// outweighs any sum of prices.
		f.addEdge(src, i, 1, int64(r.Arrive+r.Patience-slot)<<patienceShift)
		for k, s := range live {
			sp := w.Suppliers[s]
			if price, ok := centralQuote(w, sp, r, busyUntil, s, live); ok {
				edges = append(edges, edge{f.addEdge(i, len(open)+k, 1, price), i, s})
			}
		}
	}
	for k, s := range live {
		f.addEdge(len(open)+k, sink, int64(w.Suppliers[s].GPUs-len(busyUntil[s])), 0)
	}
	f.maxFlow(src, sink)
	matched := map[int]int{}
	for _, e := range edges {
		if f.flowOn(e.e) > 0 {
			matched[e.req] = e.sup
		}
	}
	return matched
}

// centralQuote is the price supplier sp would quote r at the start of
// the slot, by its own Pricer, and whether it would serve r at all:
// the model and region fit and the price is within r's maximum. The
// competing asks are the other live suppliers' ask prices; there is no
// price index.
func centralQuote(w *Workload, sp SupplierSpec, r Request, busyUntil [][]int, s int, live []int) (int64, bool) {
	if sp.Model != r.Model || r.Region != "" && sp.Region != r.Region {
		return 0, false
	}
	var competing []int64
	for _, o := range live {
		if o != s && w.Suppliers[o].Model == r.Model {
			op := w.Suppliers[o]
			p, _ := op.Pricer.AskPrice(op.Model, float64(len(busyUntil[o]))/float64(op.GPUs), 0)
			competing = append(competing, p)
		}
	}
	price, decline := sp.Pricer.Quote(market.PriceInput{
		Model: r.Model, Count: 1, DurationS: uint32(time.Duration(r.Slots) * w.Slot / time.Second), MaxPrice: int64(r.MaxPrice),
		Utilization: float64(len(busyUntil[s])) / float64(sp.GPUs), Competing: competing,
	})
	return price, decline == ""
}

// patienceShift scales the slots of patience a request has left into
// the flow's costs above every price: 2^32 micros is over 4000 currency
// units per GPU-hour.
const patienceShift = 32

// dropEnded keeps the end slots after slot.
func dropEnded(ends []int, slot int) []int {
	out := ends[:0]
	for _, e := range ends {
		if e > slot {
			out = append(out, e)
		}
	}
	return out
}

// keepPatient keeps the requests still waiting at slot.
func keepPatient(open []Request, slot int) []Request {
	out := open[:0]
	for _, r := range open {
		if slot <= r.Arrive+r.Patience {
			out = append(out, r)
		}
	}
	return out
}
