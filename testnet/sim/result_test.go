package sim

import (
	"strings"
	"testing"
	"time"
)

func TestLatencyQuantiles(t *testing.T) {
	var h latencyHist
	if got := h.quantile(0.99); got != 0 {
		t.Errorf("empty: %s, want 0", got)
	}
	for ms := range 100 {
		h.add(time.Duration(ms)*time.Millisecond + 300*time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := h.quantile(c.q); got != c.want {
			t.Errorf("q%.2f = %s, want %s", c.q, got, c.want)
		}
	}
	h.add(time.Hour)
	if got := h.quantile(1); got != histMax*time.Millisecond+time.Millisecond {
		t.Errorf("beyond the histogram: %s", got)
	}
}

func TestDoubleBooked(t *testing.T) {
	l := func(sup int, uuid string, start, end int64) leaseRecord {
		return leaseRecord{supplier: sup, uuids: []string{uuid}, start: start, end: end}
	}
	for _, c := range []struct {
		name   string
		leases []leaseRecord
		want   int
	}{
		{"back to back", []leaseRecord{l(0, "a", 0, 10), l(0, "a", 10, 20)}, 0},
		{"overlap", []leaseRecord{l(0, "a", 0, 10), l(0, "a", 5, 20)}, 1},
		{"other GPU", []leaseRecord{l(0, "a", 0, 10), l(0, "b", 5, 20)}, 0},
		{"other supplier", []leaseRecord{l(0, "a", 0, 10), l(1, "a", 5, 20)}, 0},
	} {
		if got := doubleBooked(c.leases); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSpread(t *testing.T) {
	if m, s := spread(nil); m != 0 || s != 0 {
		t.Errorf("empty: %d, %f", m, s)
	}
	xs := make([]int64, 0, 10)
	for i := range 10 {
		xs = append(xs, int64(100+10*i))
	}
	if m, s := spread(xs); m != 150 || s != float64(190-110)/150 {
		t.Errorf("median %d spread %f, want 150 and %f", m, s, float64(190-110)/150)
	}
}

func TestTableVerdicts(t *testing.T) {
	r := &Result{Nodes: 100, Requests: 10, Filled: 9, Central: 10, Prices: make([]ModelPrices, len(models))}
	short := &Result{Nodes: 1000, Requests: 10, Filled: 8, Central: 10, ImpostorLeases: 1, Prices: make([]ModelPrices, len(models))}
	table := Table(r, short)
	for _, want := range []string{
		"| figure | 100 nodes | 1000 nodes | goal | pass/short |",
		"| fill ratio, market / central | 0.900 | 0.800 | ≥ 0.95 | short |",
		"| leases from impostors | 0 | 1 | 0 | short |",
		"| double-booked GPUs | 0 | 0 | 0 | pass |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestMarketTiny is the plumbing end to end on a few nodes: leases are
// made, by the rules, and everything started is stopped (TestMain's
// leak check).
func TestMarketTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a network")
	}
	r := runSim(t, Config{Nodes: 16, Slots: 3, Seed: 5})
	checkRun(t, r)
}

// TestOutOfTime: the misses counted as out of time are those whose rent
// ran out of time, not those no supplier could serve.
func TestOutOfTime(t *testing.T) {
	for why, want := range map[string]bool{
		"no lease: 21 suppliers have rtx4090; 2 are unproven ...; 19 did not answer within 1s": true,
		"rent: publish bid: topic /gpumesh/orders/2.0.0: publish: context deadline exceeded":   true,
		"lease 0d4dabf2766a released before its job started (41s after the lease began)":       true,
		"no lease: 1 supplier has a100-80gb; 1 is fully booked (fewer than 1 free)":            false,
		"no lease: 2 suppliers have a100-80gb; the cheapest ask is 1.685 > your max 1.416":     false,
		"": false,
	} {
		if got := outOfTime(why); got != want {
			t.Errorf("outOfTime(%q) = %v, want %v", why, got, want)
		}
	}
}
