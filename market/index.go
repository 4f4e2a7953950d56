package market

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// Bounds of a PriceIndex.
const (
	// DefaultIndexWindow is how far back a PriceIndex looks by default.
	DefaultIndexWindow = 24 * time.Hour
	// MaxPrintsPerModel is how many trade prints a PriceIndex keeps per
	// model; beyond it the oldest are dropped.
	MaxPrintsPerModel = 1000
)

// PricePoint summarises one model's recent trades. Prices are micro-units
// per GPU-hour. The JSON names are a public contract.
type PricePoint struct {
	Model        string    `json:"model"`
	Trades       int       `json:"trades"`
	LastMicros   int64     `json:"last_micros"`   // the most recent trade's price
	MedianMicros int64     `json:"median_micros"` // the mean of the middle two for an even count, rounded down
	MinMicros    int64     `json:"min_micros"`
	MaxMicros    int64     `json:"max_micros"`
	VWAPMicros   int64     `json:"vwap_micros"` // mean price weighted by GPU-hours, rounded
	Since        time.Time `json:"since"`       // the oldest trade counted
}

// tradeEntry is one trade print as the index keeps it.
type tradeEntry struct {
	id     ID
	price  int64
	weight float64 // GPU-hours
	at     time.Time
}

// PriceIndex is the price index per model, built from the trade prints a
// node hears: the trades of the last window (24 h by default), at most
// MaxPrintsPerModel per model. It is safe for concurrent use.
type PriceIndex struct {
	now    func() time.Time
	window time.Duration

	mu     sync.Mutex
	models map[string][]tradeEntry // oldest first
	seen   map[ID]struct{}         // IDs of the prints held
}

// NewPriceIndex returns an empty index that reads the time from now
// (time.Now when nil) and counts trades of the last window
// (DefaultIndexWindow when not positive).
func NewPriceIndex(now func() time.Time, window time.Duration) *PriceIndex {
	if now == nil {
		now = time.Now
	}
	if window <= 0 {
		window = DefaultIndexWindow
	}
	return &PriceIndex{
		now:    now,
		window: window,
		models: make(map[string][]tradeEntry),
		seen:   make(map[ID]struct{}),
	}
}

// Add records a trade of count GPUs of model for durationS seconds at
// priceMicros per GPU-hour, made at at, and reports whether the index took
// it. A print already held (by id), older than the window, crowded out by
// MaxPrintsPerModel newer ones, or with a non-positive price, count or
// duration is not taken.
func (x *PriceIndex) Add(model string, priceMicros int64, count int, durationS uint32, at time.Time, id ID) bool {
	if model == "" || priceMicros <= 0 || count <= 0 || durationS == 0 {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	if !at.After(now.Add(-x.window)) {
		return false
	}
	if _, dup := x.seen[id]; dup {
		return false
	}
	x.prune(model, now)
	prints := x.models[model]
	p := tradeEntry{id: id, price: priceMicros, weight: float64(count) * float64(durationS) / 3600, at: at}
	// Keep prints ordered by time; a late one goes in its place.
	i, _ := slices.BinarySearchFunc(prints, at, func(e tradeEntry, t time.Time) int {
		if e.at.After(t) {
			return 1
		}
		return -1
	})
	if len(prints) >= MaxPrintsPerModel && i == 0 {
		return false // older than every print held, and no room
	}
	prints = slices.Insert(prints, i, p)
	if len(prints) > MaxPrintsPerModel {
		delete(x.seen, prints[0].id)
		prints = slices.Delete(prints, 0, 1)
	}
	x.models[model] = prints
	x.seen[id] = struct{}{}
	return true
}

// prune drops model's prints older than the window; the caller holds x.mu.
func (x *PriceIndex) prune(model string, now time.Time) {
	prints := x.models[model]
	cutoff := now.Add(-x.window)
	n := 0
	for n < len(prints) && !prints[n].at.After(cutoff) {
		delete(x.seen, prints[n].id)
		n++
	}
	switch {
	case n == len(prints):
		delete(x.models, model)
	case n > 0:
		x.models[model] = slices.Delete(prints, 0, n)
	}
}

// Get returns the model's price point; false when no trade of it is in
// the window.
func (x *PriceIndex) Get(model string) (PricePoint, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.prune(model, x.now())
	prints := x.models[model]
	if len(prints) == 0 {
		return PricePoint{}, false
	}
	return summarise(model, prints), true
}

// All returns the price point of every model with a trade in the window,
// sorted by model.
func (x *PriceIndex) All() []PricePoint {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	for model := range x.models {
		x.prune(model, now)
	}
	out := make([]PricePoint, 0, len(x.models))
	for model, prints := range x.models {
		out = append(out, summarise(model, prints))
	}
	slices.SortFunc(out, func(a, b PricePoint) int { return cmp.Compare(a.Model, b.Model) })
	return out
}

// Median returns the model's median trade price in the window, 0 if none.
func (x *PriceIndex) Median(model string) int64 {
	pp, _ := x.Get(model)
	return pp.MedianMicros
}

// summarise computes a price point from a model's prints, oldest first.
func summarise(model string, prints []tradeEntry) PricePoint {
	prices := make([]int64, len(prints))
	var weighted, weights float64
	for i, p := range prints {
		prices[i] = p.price
		weighted += float64(p.price) * p.weight
		weights += p.weight
	}
	slices.Sort(prices)
	n := len(prices)
	median := prices[n/2]
	if n%2 == 0 {
		lo, hi := prices[n/2-1], prices[n/2]
		median = lo + (hi-lo)/2
	}
	return PricePoint{
		Model:        model,
		Trades:       n,
		LastMicros:   prints[n-1].price,
		MedianMicros: median,
		MinMicros:    prices[0],
		MaxMicros:    prices[n-1],
		VWAPMicros:   int64(math.Round(weighted / weights)),
		Since:        prints[0].at,
	}
}
