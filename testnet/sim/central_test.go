package sim

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
)

func fixedSupplier(node int, model, region string, gpus int, price int64) SupplierSpec {
	return SupplierSpec{Node: node, Model: model, Region: region, GPUs: gpus, Leaves: -1,
		Pricer: market.Pricer{Mode: market.Fixed, List: map[string]money.Micros{model: money.Micros(price)}}}
}

func req(id, arrive, slots int, model, region string, maxPrice money.Micros, patience int) Request {
	return Request{ID: id, Arrive: arrive, Slots: slots, Model: model, Region: region, MaxPrice: maxPrice, Patience: patience}
}

func TestCentralKnownCases(t *testing.T) {
	const h, a = "h100-sxm", "a100-80gb"
	leaving := fixedSupplier(0, h, "eu", 1, 100)
	leaving.Leaves = 1
	fake := fixedSupplier(0, h, "eu", 8, 1)
	fake.Impostor = true
	for _, c := range []struct {
		name      string
		suppliers []SupplierSpec
		requests  []Request
		slots     int
		filled    int
	}{
		{"one GPU, two at once, no patience", []SupplierSpec{fixedSupplier(0, h, "eu", 1, 100)},
			[]Request{req(0, 0, 2, h, "", 200, 0), req(1, 0, 2, h, "", 200, 0)}, 4, 1},
		{"the second waits for the GPU", []SupplierSpec{fixedSupplier(0, h, "eu", 1, 100)},
			[]Request{req(0, 0, 2, h, "", 200, 0), req(1, 0, 2, h, "", 200, 2)}, 4, 2},
		{"not patient enough", []SupplierSpec{fixedSupplier(0, h, "eu", 1, 100)},
			[]Request{req(0, 0, 3, h, "", 200, 0), req(1, 0, 2, h, "", 200, 2)}, 6, 1},
		{"price above the maximum", []SupplierSpec{fixedSupplier(0, h, "eu", 4, 300)},
			[]Request{req(0, 0, 1, h, "", 200, 0)}, 2, 0},
		{"wrong model or region", []SupplierSpec{fixedSupplier(0, h, "eu", 4, 100)},
			[]Request{req(0, 0, 1, a, "", 200, 0), req(1, 0, 1, h, "us", 200, 0), req(2, 0, 1, h, "eu", 200, 0)}, 2, 1},
		// Greedy by arrival would give the only eu GPU to the request
		// that could go anywhere; the maximum sends it to us.
		{"exact, not greedy", []SupplierSpec{fixedSupplier(0, h, "eu", 1, 100), fixedSupplier(1, h, "us", 1, 150)},
			[]Request{req(0, 0, 1, h, "", 200, 0), req(1, 0, 1, h, "eu", 200, 0)}, 1, 2},
		{"impostors give nothing", []SupplierSpec{fake}, []Request{req(0, 0, 1, h, "", 200, 0)}, 1, 0},
		{"a supplier that left", []SupplierSpec{leaving},
			[]Request{req(0, 0, 1, h, "", 200, 0), req(1, 1, 1, h, "", 200, 0)}, 3, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &Workload{Slots: c.slots, Slot: time.Minute, Suppliers: c.suppliers, Requests: c.requests}
			got := RunCentral(w)
			if got.Filled != c.filled {
				t.Errorf("filled %d, want %d (assigned %v)", got.Filled, c.filled, got.Assigned)
			}
		})
	}
}

// TestCentralCheapestAmongMaximum: of two suppliers that could serve
// one request, the cheaper gets it.
func TestCentralCheapestAmongMaximum(t *testing.T) {
	w := &Workload{Slots: 1, Slot: time.Minute, Suppliers: []SupplierSpec{
		fixedSupplier(0, "l40s", "eu", 1, 180), fixedSupplier(1, "l40s", "eu", 1, 120)},
		Requests: []Request{req(7, 0, 1, "l40s", "", 200, 0)}}
	if got := RunCentral(w).Assigned[7]; got != 1 {
		t.Errorf("request went to supplier %d, want 1 (the cheaper)", got)
	}
}

// TestCentralKeepsTheRules checks every assignment on a generated
// workload: within the request's patience, to an honest supplier still
// there, of its model and region, and never more at once than its GPUs.
func TestCentralKeepsTheRules(t *testing.T) {
	w := NewWorkload(Config{Nodes: 60, Slots: 40, Seed: 7})
	res := RunCentral(w)
	if res.Filled == 0 || res.Filled != len(res.Assigned) {
		t.Fatalf("filled %d, assigned %d", res.Filled, len(res.Assigned))
	}
	use := map[[2]int]int{} // (supplier, slot) -> GPUs in use
	for _, r := range w.Requests {
		s, ok := res.Assigned[r.ID]
		if !ok {
			continue
		}
		at, sp := res.At[r.ID], w.Suppliers[s]
		switch {
		case at < r.Arrive || at > r.Arrive+r.Patience:
			t.Errorf("request %d arrived at %d (patience %d), filled at %d", r.ID, r.Arrive, r.Patience, at)
		case sp.Impostor || sp.Leaves >= 0 && at >= sp.Leaves:
			t.Errorf("request %d filled by supplier %d (impostor %v, leaves %d) at %d", r.ID, s, sp.Impostor, sp.Leaves, at)
		case sp.Model != r.Model || r.Region != "" && r.Region != sp.Region:
			t.Errorf("request %d for %s in %q went to %s in %s", r.ID, r.Model, r.Region, sp.Model, sp.Region)
		}
		for slot := at; slot < at+r.Slots; slot++ {
			use[[2]int{s, slot}]++
			if use[[2]int{s, slot}] > sp.GPUs {
				t.Errorf("supplier %d overbooked at slot %d", s, slot)
			}
		}
	}
}

// TestWorkloadIsSeeded: the same seed gives the same flow, another seed
// another one.
func TestWorkloadIsSeeded(t *testing.T) {
	a, b, c := NewWorkload(Config{Seed: 3}), NewWorkload(Config{Seed: 3}), NewWorkload(Config{Seed: 4})
	if len(a.Requests) != len(b.Requests) || a.Requests[len(a.Requests)-1] != b.Requests[len(b.Requests)-1] {
		t.Error("the same seed gave different requests")
	}
	if len(a.Requests) == len(c.Requests) && a.Requests[0] == c.Requests[0] {
		t.Error("another seed gave the same requests")
	}
}

// TestWorkloadShape checks the flow's statistics on a large draw: the
// arrival count is Poisson's (within 4 standard deviations), job
// lengths are heavy-tailed (mean well above median, some 10x the
// median), every model and region appears, and there are impostors and
// leavers.
func TestWorkloadShape(t *testing.T) {
	w := NewWorkload(Config{Nodes: 1000, Slots: 60, Seed: 11})
	want := w.Rate * float64(w.Slots)
	if n := float64(len(w.Requests)); n < want-4*math.Sqrt(want) || n > want+4*math.Sqrt(want) {
		t.Errorf("%.0f arrivals, want about %.0f", n, want)
	}
	lengths := make([]int, len(w.Requests))
	modelsSeen, regionsSeen := map[string]bool{}, map[string]bool{}
	sum := 0
	for i, r := range w.Requests {
		lengths[i], sum = r.Slots, sum+r.Slots
		modelsSeen[r.Model], regionsSeen[r.Region] = true, true
	}
	slices.Sort(lengths)
	median, mean := float64(lengths[len(lengths)/2]), float64(sum)/float64(len(lengths))
	if mean < 1.3*median || float64(lengths[len(lengths)-1]) < 10*median {
		t.Errorf("job lengths median %.0f, mean %.1f, max %d: not heavy-tailed", median, mean, lengths[len(lengths)-1])
	}
	if len(modelsSeen) != len(models) || len(regionsSeen) != len(regions)+1 {
		t.Errorf("models %v, regions %v", modelsSeen, regionsSeen)
	}
	var impostors, leavers int
	for _, s := range w.Suppliers {
		if s.Impostor {
			impostors++
		}
		if s.Leaves >= 0 {
			leavers++
		}
	}
	if impostors == 0 || leavers == 0 {
		t.Errorf("%d impostors, %d leavers", impostors, leavers)
	}
}
