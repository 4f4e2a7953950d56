package sim

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"
)

// TestWarmLeases: a warm start busies about its share of the honest
// GPUs, never an impostor's, for remaining lengths whose mean is the
// job lengths' residual life, and leaves the rest of the workload as it
// is without one.
func TestWarmLeases(t *testing.T) {
	cold := NewWorkload(Config{Nodes: 1000, Seed: 7, Load: 1.2})
	warm := NewWorkload(Config{Nodes: 1000, Seed: 7, Load: 1.2, Warm: 0.9})
	if !slices.Equal(cold.Requests, warm.Requests) || len(cold.Suppliers) != len(warm.Suppliers) {
		t.Fatal("a warm start changed the requests or the suppliers")
	}
	if len(cold.Warm) != 0 {
		t.Fatalf("%d warm leases without a warm start", len(cold.Warm))
	}
	gpus, busy := 0, map[int]int{}
	for _, sp := range warm.Suppliers {
		if !sp.Impostor {
			gpus += sp.GPUs
		}
	}
	total := 0.0
	for _, l := range warm.Warm {
		sp := warm.Suppliers[l.Supplier]
		if sp.Impostor {
			t.Fatalf("a warm lease on impostor %d", sp.Node)
		}
		busy[l.Supplier]++
		if busy[l.Supplier] > sp.GPUs {
			t.Fatalf("supplier %d has %d warm leases on %d GPUs", sp.Node, busy[l.Supplier], sp.GPUs)
		}
		if l.Slots < 1 || l.Slots > maxJobSlots {
			t.Fatalf("a warm lease of %d slots", l.Slots)
		}
		total += float64(l.Slots)
	}
	if share := float64(len(warm.Warm)) / float64(gpus); math.Abs(share-0.9) > 0.05 {
		t.Errorf("%d of %d honest GPUs warm (%.3f), want about 0.9", len(warm.Warm), gpus, share)
	}
	// The residual life's mean, Σ r P(L ≥ r) / E[L], against the draws'.
	want := 0.0
	cdf := residualCDF()
	for r := range cdf {
		p := cdf[r]
		if r > 0 {
			p -= cdf[r-1]
		}
		want += float64(r+1) * p
	}
	if math.Abs(cdf[len(cdf)-1]-1) > 1e-9 {
		t.Fatalf("the residual CDF ends at %f", cdf[len(cdf)-1])
	}
	if got := total / float64(len(warm.Warm)); math.Abs(got-want)/want > 0.15 {
		t.Errorf("mean warm length %.2f slots, want about %.2f", got, want)
	}
}

// TestCentralStartsWarm: the central matcher counts warm leases as busy
// GPUs: with every GPU warm for longer than the run, it fills nothing.
func TestCentralStartsWarm(t *testing.T) {
	w := NewWorkload(Config{Nodes: 100, Seed: 3, Slots: 5})
	if RunCentral(w).Filled == 0 {
		t.Fatal("the central matcher filled nothing of a cold workload")
	}
	for k, sp := range w.Suppliers {
		if !sp.Impostor {
			for range sp.GPUs {
				w.Warm = append(w.Warm, WarmLease{Supplier: k, Slots: 10})
			}
		}
	}
	if got := RunCentral(w).Filled; got != 0 {
		t.Fatalf("the central matcher filled %d with every GPU leased for the whole run", got)
	}
}

func TestUtilisation(t *testing.T) {
	w := &Workload{Slots: 4, Suppliers: []SupplierSpec{
		{GPUs: 2, Leaves: -1},
		{GPUs: 2, Leaves: 2},                  // present in slots 0 and 1 only
		{GPUs: 8, Leaves: -1, Impostor: true}, // not honest capacity
	}}
	// Capacity: 2×4 + 2×2 = 12 GPU-slots. Held: supplier 0 one GPU for
	// slots 0–3 (4), supplier 1 one GPU from slot 1 for 3 slots, of which
	// slot 1 counts (1); beyond the run does not count.
	got := utilisation(w, []span{{0, 0, 4}, {1, 1, 3}, {0, 3, 5}})
	if want := 6.0 / 12; math.Abs(got-want) > 1e-9 {
		t.Fatalf("utilisation %f, want %f", got, want)
	}
}

// TestLeasesOnGrid: every lease, warm or made in a slot, ends within
// leaseMargin (and the second its duration is rounded down to) before
// the boundary of the slot its length names, by the
// simulated clock, so it holds its GPU for the slots the central
// matcher counts, and nothing ran off the grid.
func TestLeasesOnGrid(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a network")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Start(ctx, Config{Nodes: 16, Slots: 4, Seed: 3, Load: 1.2, Warm: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, r)
	if r.Warm == 0 || r.Filled == 0 {
		t.Fatalf("%d warm leases, %d filled: nothing to check", r.Warm, r.Filled)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range append(slices.Clone(s.warmLeases), s.leases...) {
		b := s.boundary(l.slot + l.slots)
		if end := time.UnixMilli(l.end); end.After(b) || end.Before(b.Add(-leaseMargin-time.Second)) {
			t.Errorf("lease of request %d for slots %d..%d ends at %s, %s before the boundary; want within %s",
				l.request, l.slot, l.slot+l.slots-1, end.Format(time.TimeOnly), b.Sub(end), leaseMargin+time.Second)
		}
	}
}

// TestLargeRunSlot: a large run's slot holds its real renting and a
// rent's time limit twice over in simulated time (at 1000 nodes, 3 min
// of renting and settling, a 7 min slot).
func TestLargeRunSlot(t *testing.T) {
	for n, want := range map[int]time.Duration{100: 2 * time.Minute, 1000: 7 * time.Minute} {
		c := largeRun(n, 6, 1).fill()
		if c.Slot != want {
			t.Errorf("%d nodes: slot %s, want %s", n, c.Slot, want)
		}
		if c.Slot < 2*(c.RealSlot+c.Settle+leaseMargin) {
			t.Errorf("%d nodes: slot %s does not hold twice %s of renting, settling and a rent", n, c.Slot, c.RealSlot+c.Settle+leaseMargin)
		}
	}
}
