package market_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

func TestPriceIndexMedianAndStats(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, 0)
	if _, ok := x.Get("h100-sxm"); ok {
		t.Errorf("Get on an empty index found a price point")
	}
	if m := x.Median("h100-sxm"); m != 0 {
		t.Errorf("Median on an empty index = %d, want 0", m)
	}
	// Added out of time order: Last is the most recent by time.
	for i, p := range []struct {
		price int64
		ago   time.Duration
	}{
		{3_000_000, 3 * time.Hour},
		{1_000_000, 1 * time.Hour},
		{2_000_000, 2 * time.Hour},
	} {
		if !x.Add("h100-sxm", p.price, 1, 3600, now.Add(-p.ago), testID("odd", i)) {
			t.Fatalf("Add(%d) = false", p.price)
		}
	}
	want := market.PricePoint{
		Model: "h100-sxm", Trades: 3, LastMicros: 1_000_000, MedianMicros: 2_000_000,
		MinMicros: 1_000_000, MaxMicros: 3_000_000, VWAPMicros: 2_000_000, Since: now.Add(-3 * time.Hour),
	}
	if got, ok := x.Get("h100-sxm"); !ok || got != want {
		t.Errorf("Get (odd count) = %+v, %v; want %+v", got, ok, want)
	}
	// An even count takes the mean of the middle two, rounded down.
	x.Add("h100-sxm", 2_000_001, 1, 3600, now, testID("even"))
	if m := x.Median("h100-sxm"); m != 2_000_000 {
		t.Errorf("Median (even count: 1, 2, 2.000001, 3) = %d, want 2000000", m)
	}
	x.Add("h100-sxm", 5_000_000, 1, 3600, now, testID("even", 2))
	x.Add("h100-sxm", 5_000_000, 1, 3600, now, testID("even", 3))
	if m := x.Median("h100-sxm"); m != 2_500_000 {
		t.Errorf("Median (1, 2, 2.000001, 3, 5, 5) = %d, want 2500000", m)
	}
}

func TestPriceIndexVWAP(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, time.Hour)
	// 8 GPUs × 2 h = 16 GPU-hours at 1.00; 1 GPU × 0.5 h at 4.00;
	// 2 GPUs × 1.5 h = 3 GPU-hours at 2.00.
	x.Add("a100-80gb", 1_000_000, 8, 7200, now, testID("v", 1))
	x.Add("a100-80gb", 4_000_000, 1, 1800, now, testID("v", 2))
	x.Add("a100-80gb", 2_000_000, 2, 5400, now, testID("v", 3))
	// (16×1 + 0.5×4 + 3×2) / 19.5 = 24 / 19.5 = 1.230769...
	pp, _ := x.Get("a100-80gb")
	if pp.VWAPMicros != 1_230_769 {
		t.Errorf("VWAP = %d, want 1230769", pp.VWAPMicros)
	}
	if pp.MedianMicros != 2_000_000 {
		t.Errorf("Median = %d, want 2000000 (unweighted)", pp.MedianMicros)
	}
}

func TestPriceIndexWindow(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, 24*time.Hour)
	if x.Add("l4", 1_000_000, 1, 3600, now.Add(-24*time.Hour), testID("w", 0)) {
		t.Errorf("Add of a print exactly a window old = true, want false")
	}
	x.Add("l4", 1_000_000, 1, 3600, now.Add(-23*time.Hour), testID("w", 1))
	x.Add("l4", 3_000_000, 1, 3600, now.Add(-time.Hour), testID("w", 2))
	x.Add("h100-sxm", 2_000_000, 1, 3600, now.Add(-12*time.Hour), testID("w", 3))
	if pp, _ := x.Get("l4"); pp.Trades != 2 || pp.MedianMicros != 2_000_000 {
		t.Errorf("Get(l4) = %+v, want 2 trades, median 2000000", pp)
	}
	clk.Advance(time.Hour) // the 23 h old print leaves the window
	if pp, _ := x.Get("l4"); pp.Trades != 1 || pp.MedianMicros != 3_000_000 || !pp.Since.Equal(now.Add(-time.Hour)) {
		t.Errorf("Get(l4) an hour later = %+v, want 1 trade at 3000000", pp)
	}
	if all := x.All(); len(all) != 2 || all[0].Model != "h100-sxm" || all[1].Model != "l4" {
		t.Errorf("All = %+v, want h100-sxm then l4", all)
	}
	clk.Advance(12 * time.Hour)
	if all := x.All(); len(all) != 1 || all[0].Model != "l4" {
		t.Errorf("All after h100-sxm's print aged out = %+v, want only l4", all)
	}
	clk.Advance(12 * time.Hour)
	if all := x.All(); len(all) != 0 {
		t.Errorf("All after every print aged out = %+v, want none", all)
	}
	if _, ok := x.Get("l4"); ok {
		t.Errorf("Get(l4) after every print aged out found one")
	}
}

func TestPriceIndexDedupeAndInvalid(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, time.Hour)
	id := testID("trade")
	if !x.Add("l4", 1_000_000, 1, 3600, now, id) {
		t.Fatalf("Add = false")
	}
	if x.Add("l4", 1_000_000, 1, 3600, now, id) {
		t.Errorf("Add of the same print again = true, want false")
	}
	if x.Add("h100-sxm", 9_000_000, 1, 3600, now, id) {
		t.Errorf("Add of the same ID under another model = true, want false")
	}
	for _, tc := range []struct {
		name     string
		model    string
		price    int64
		count    int
		duration uint32
	}{
		{"no model", "", 1, 1, 1},
		{"zero price", "l4", 0, 1, 1},
		{"negative price", "l4", -1, 1, 1},
		{"zero count", "l4", 1, 0, 1},
		{"zero duration", "l4", 1, 1, 0},
	} {
		if x.Add(tc.model, tc.price, tc.count, tc.duration, now, testID(tc.name)) {
			t.Errorf("Add with %s = true, want false", tc.name)
		}
	}
	if pp, _ := x.Get("l4"); pp.Trades != 1 {
		t.Errorf("Trades = %d, want 1", pp.Trades)
	}
}

func TestPriceIndexCap(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, 24*time.Hour)
	start := now.Add(-20 * time.Hour)
	n := market.MaxPrintsPerModel + 50
	for i := range n {
		// Prices 1..n micros, one print a second.
		if !x.Add("l4", int64(i+1), 1, 3600, start.Add(time.Duration(i)*time.Second), testID("cap", i)) {
			t.Fatalf("Add(%d) = false", i)
		}
	}
	pp, _ := x.Get("l4")
	if pp.Trades != market.MaxPrintsPerModel {
		t.Fatalf("Trades = %d, want the cap %d", pp.Trades, market.MaxPrintsPerModel)
	}
	if pp.MinMicros != 51 || pp.MaxMicros != int64(n) || !pp.Since.Equal(start.Add(50*time.Second)) {
		t.Errorf("after the cap: min %d, max %d, since %v; want the newest %d (51..%d)", pp.MinMicros, pp.MaxMicros, pp.Since, market.MaxPrintsPerModel, n)
	}
	// A print older than all those held has no room; a dropped one is not
	// taken back.
	if x.Add("l4", 7, 1, 3600, start.Add(-time.Second), testID("old")) {
		t.Errorf("Add of a print older than a full model's prints = true, want false")
	}
	if x.Add("l4", 1, 1, 3600, start, testID("cap", 0)) {
		t.Errorf("Add of a print the cap dropped = true, want false")
	}
	// A newer one displaces the oldest.
	if !x.Add("l4", 1_000_000, 1, 3600, now, testID("new")) {
		t.Errorf("Add of a new print to a full model = false, want true")
	}
	if pp, _ := x.Get("l4"); pp.Trades != market.MaxPrintsPerModel || pp.MinMicros != 52 || pp.LastMicros != 1_000_000 {
		t.Errorf("after a new print: %+v; want %d trades, min 52, last 1000000", pp, market.MaxPrintsPerModel)
	}
}

func TestPricePointJSON(t *testing.T) {
	b, err := json.Marshal(market.PricePoint{Model: "l4", Trades: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"model"`, `"trades"`, `"last_micros"`, `"median_micros"`, `"min_micros"`, `"max_micros"`, `"vwap_micros"`, `"since"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("PricePoint JSON %s lacks %s", b, key)
		}
	}
}

func TestPriceIndexConcurrent(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	x := market.NewPriceIndex(clk.Now, time.Hour)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				x.Add("l4", int64(i+1), 1, 60, now.Add(-time.Duration(i)*time.Millisecond), testID("c", g, i))
				x.Median("l4")
				x.All()
			}
		})
	}
	wg.Wait()
	if pp, _ := x.Get("l4"); pp.Trades != market.MaxPrintsPerModel {
		t.Errorf("Trades = %d, want %d", pp.Trades, market.MaxPrintsPerModel)
	}
}
