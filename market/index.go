package market

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Bounds of a PriceIndex.
const (
	// DefaultIndexWindow is how far back a PriceIndex looks by default.
	DefaultIndexWindow = 24 * time.Hour
	// MaxPrintsPerModel is how many trade prints a PriceIndex keeps per
	// model; beyond it the oldest are dropped.
	MaxPrintsPerModel = 1000
	// MaxPendingPrintsPerModel is how many prints not (yet) believed a
	// PriceIndex keeps aside per model, to re-check when the supplier's
	// profile arrives; beyond it the oldest are dropped. They never
	// crowd out believed prints.
	MaxPendingPrintsPerModel = 200
	// MaxPendingPrints bounds the prints not (yet) believed across all
	// models, whose slugs are free to make up: beyond it the oldest,
	// whatever its model, is dropped.
	MaxPendingPrints = 2000
	// PairWindow is how far apart two prints of one supplier–renter pair
	// for a model must be for both to count: within it only the first
	// counts, so a pair that trades with itself over and over is one
	// trade per hour.
	PairWindow = time.Hour
	// DefaultTrustFloor is the reputation below which a supplier's prints
	// are not believed: that of reputation.DefaultFloor, the renters'
	// default floor. An unknown supplier scores exactly 0.5, but its
	// prints are never believed: only a known reputation counts.
	DefaultTrustFloor = 0.5
)

// Trust answers what the market cannot judge by itself: whether a
// supplier's GPUs exist as far as the node knows (its valid, signed,
// unexpired profile) and what its reputation is. The node implements it
// from the profiles it keeps and its reputation book (market does not
// import verify).
type Trust interface {
	// ProfileHas reports whether supplier's valid profile lists at
	// least count GPUs of model and, among them, every UUID in uuids.
	ProfileHas(supplier peer.ID, model string, uuids []string, count int) bool
	// Reputation returns supplier's reputation (0..1) and whether any
	// trusted attestation of it is known; unknown suppliers score 0.5.
	Reputation(supplier peer.ID) (score float64, known bool)
}

// Believes reports whether t believes a trade by supplier of the GPUs
// uuids (count of them) of model: its profile lists them and its
// reputation is known (attested) and not below floor. An unknown
// supplier's 0.5 is no evidence: anyone can make a key, a profile and a
// renter to trade with.
func Believes(t Trust, floor float64, supplier peer.ID, model string, uuids []string, count int) bool {
	if t == nil || supplier == "" {
		return false
	}
	if rep, known := t.Reputation(supplier); !known || rep < floor {
		return false
	}
	return t.ProfileHas(supplier, model, uuids, count)
}

// PricePoint summarises one model's recent trades that count (see
// PriceIndex). Prices are micro-units per GPU-hour. The JSON names are a
// public contract.
type PricePoint struct {
	Model        string    `json:"model"`
	Trades       int       `json:"trades"`
	LastMicros   int64     `json:"last_micros"`   // the most recent trade's price
	MedianMicros int64     `json:"median_micros"` // the median of the suppliers' medians (mean of the middle two for an even count, rounded down)
	MinMicros    int64     `json:"min_micros"`
	MaxMicros    int64     `json:"max_micros"`
	VWAPMicros   int64     `json:"vwap_micros"` // mean price weighted by GPU-hours, rounded
	Since        time.Time `json:"since"`       // the oldest trade counted
}

// tradeEntry is one trade print as the index keeps it.
type tradeEntry struct {
	id       ID
	price    int64
	weight   float64 // GPU-hours
	at       time.Time
	supplier peer.ID  // "" for an unattributed print (Add)
	renter   peer.ID  //
	gpus     []string // the lease's GPU UUIDs
	count    int
	raw      []byte // the signed print (AddPrint)
}

// PriceIndex is the price index per model, built from the trade prints a
// node hears: the trades of the last window (24 h by default), at most
// MaxPrintsPerModel per model.
//
// With a Trust (WithTrust), only believed prints count: the supplier's
// valid profile lists the lease's GPUs of the model and its reputation is
// not below the floor. A print not believed when it arrives is kept
// aside (at most MaxPendingPrintsPerModel per model) and counts once it
// is, e.g. when the supplier's profile arrives; a believed print whose
// supplier falls below the floor stops counting. Of the prints of one
// supplier–renter pair for a model, only one per PairWindow counts, and
// the median is the median of the suppliers' own medians, so one
// supplier, however many trades it prints, moves it as one voice. It is
// safe for concurrent use.
type PriceIndex struct {
	now    func() time.Time
	window time.Duration
	trust  Trust // nil: every print counts
	floor  float64

	mu      sync.Mutex
	models  map[string][]tradeEntry // believed when added, oldest first
	pending map[string][]tradeEntry // not believed when added, oldest first
	seen    map[ID]struct{}         // IDs of the prints held, in either
}

// IndexOption configures a PriceIndex.
type IndexOption func(*PriceIndex)

// WithTrust makes the index count only the prints t believes (see
// Believes) with floor as the reputation floor (DefaultTrustFloor when
// not positive). Without it every valid print counts: for tests and
// tools, never for a node that hears prints over gossip.
func WithTrust(t Trust, floor float64) IndexOption {
	return func(x *PriceIndex) {
		if floor <= 0 {
			floor = DefaultTrustFloor
		}
		x.trust, x.floor = t, floor
	}
}

// NewPriceIndex returns an empty index that reads the time from now
// (time.Now when nil) and counts trades of the last window
// (DefaultIndexWindow when not positive).
func NewPriceIndex(now func() time.Time, window time.Duration, opts ...IndexOption) *PriceIndex {
	if now == nil {
		now = time.Now
	}
	if window <= 0 {
		window = DefaultIndexWindow
	}
	x := &PriceIndex{
		now:     now,
		window:  window,
		models:  make(map[string][]tradeEntry),
		pending: make(map[string][]tradeEntry),
		seen:    make(map[ID]struct{}),
	}
	for _, o := range opts {
		o(x)
	}
	return x
}

// Add records an unattributed trade of count GPUs of model for durationS
// seconds at priceMicros per GPU-hour, made at at, and reports whether
// the index took it. A print already held (by id), older than the window,
// crowded out by MaxPrintsPerModel newer ones, or with a non-positive
// price, count or duration is not taken. An unattributed print names no
// supplier, so an index with a Trust never believes it: nodes use
// AddPrint.
func (x *PriceIndex) Add(model string, priceMicros int64, count int, durationS uint32, at time.Time, id ID) bool {
	return x.add(model, tradeEntry{id: id, price: priceMicros, count: count, at: at,
		weight: float64(count) * float64(durationS) / 3600}, durationS)
}

// AddPrint records a validated trade print; see Add for what is not
// taken. A print the index's Trust does not believe yet is kept aside.
func (x *PriceIndex) AddPrint(tp *TradePrint) bool {
	l := tp.Lease
	durationS := uint32((l.EndMs - l.StartMs) / 1000)
	return x.add(l.Model, tradeEntry{
		id: l.ID, price: l.PriceMicros, count: int(l.Count), at: time.UnixMilli(l.StartMs),
		weight:   float64(l.Count) * float64(durationS) / 3600,
		supplier: l.Supplier, renter: l.Renter, gpus: l.GpuUuids, raw: tp.Raw,
	}, durationS)
}

// Print is one trade print that counts in a PriceIndex.
type Print struct {
	Model       string
	LeaseID     ID
	Supplier    peer.ID // "" for an unattributed print (Add)
	Count       int
	PriceMicros int64
	GPUHours    float64
	At          time.Time // when its lease started
	Raw         []byte    // the signed print; nil for an unattributed one
}

// Prints lists the prints of model (of every model when "") that count
// in the window, oldest first.
func (x *PriceIndex) Prints(model string) []Print {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	var models []string
	if model != "" {
		models = []string{model}
	} else {
		for m := range x.models {
			models = append(models, m)
		}
		for m := range x.pending {
			if _, ok := x.models[m]; !ok {
				models = append(models, m)
			}
		}
	}
	var out []Print
	for _, m := range models {
		x.prune(m, now)
		for _, p := range x.counted(m) {
			out = append(out, Print{Model: m, LeaseID: p.id, Supplier: p.supplier, Count: p.count,
				PriceMicros: p.price, GPUHours: p.weight, At: p.at, Raw: p.raw})
		}
	}
	slices.SortStableFunc(out, func(a, b Print) int { return a.At.Compare(b.At) })
	return out
}

func (x *PriceIndex) add(model string, p tradeEntry, durationS uint32) bool {
	if model == "" || p.price <= 0 || p.count <= 0 || durationS == 0 {
		return false
	}
	believed := x.believes(model, p)
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	if !p.at.After(now.Add(-x.window)) {
		return false
	}
	if _, dup := x.seen[p.id]; dup {
		return false
	}
	x.prune(model, now)
	if believed {
		return x.insert(x.models, model, p, MaxPrintsPerModel)
	}
	if !x.insert(x.pending, model, p, MaxPendingPrintsPerModel) {
		return false
	}
	n := 0
	for _, prints := range x.pending {
		n += len(prints)
	}
	for ; n > MaxPendingPrints; n-- {
		x.dropOldestPending()
	}
	_, kept := x.seen[p.id]
	return kept
}

// dropOldestPending drops the oldest print not believed, of any model;
// the caller holds x.mu.
func (x *PriceIndex) dropOldestPending() {
	var oldest string
	for m, prints := range x.pending {
		if oldest == "" || prints[0].at.Before(x.pending[oldest][0].at) {
			oldest = m
		}
	}
	prints := x.pending[oldest]
	delete(x.seen, prints[0].id)
	if len(prints) == 1 {
		delete(x.pending, oldest)
	} else {
		x.pending[oldest] = slices.Delete(prints, 0, 1)
	}
}

// Prune drops every model's prints older than the window, believed or
// not: a node calls it now and then, so that prints of models nobody
// reads go too.
func (x *PriceIndex) Prune() {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	models := make([]string, 0, len(x.models)+len(x.pending))
	for m := range x.models {
		models = append(models, m)
	}
	for m := range x.pending {
		models = append(models, m)
	}
	for _, m := range models {
		x.prune(m, now)
	}
}

// believes reports whether p counts; without a Trust every print does.
func (x *PriceIndex) believes(model string, p tradeEntry) bool {
	if x.trust == nil {
		return true
	}
	return Believes(x.trust, x.floor, p.supplier, model, p.gpus, p.count)
}

// insert puts p in its place by time in set[model], dropping the oldest
// beyond limit, and reports whether p was kept; the caller holds x.mu.
func (x *PriceIndex) insert(set map[string][]tradeEntry, model string, p tradeEntry, limit int) bool {
	prints := set[model]
	i, _ := slices.BinarySearchFunc(prints, p.at, func(e tradeEntry, t time.Time) int {
		if e.at.After(t) {
			return 1
		}
		return -1
	})
	if len(prints) >= limit && i == 0 {
		return false // older than every print held, and no room
	}
	prints = slices.Insert(prints, i, p)
	if len(prints) > limit {
		delete(x.seen, prints[0].id)
		prints = slices.Delete(prints, 0, 1)
	}
	set[model] = prints
	x.seen[p.id] = struct{}{}
	return true
}

// prune drops model's prints older than the window; the caller holds x.mu.
func (x *PriceIndex) prune(model string, now time.Time) {
	cutoff := now.Add(-x.window)
	for _, set := range []map[string][]tradeEntry{x.models, x.pending} {
		prints := set[model]
		n := 0
		for n < len(prints) && !prints[n].at.After(cutoff) {
			delete(x.seen, prints[n].id)
			n++
		}
		switch {
		case n == len(prints):
			delete(set, model)
		case n > 0:
			set[model] = slices.Delete(prints, 0, n)
		}
	}
}

// promote moves model's pending prints that are now believed among the
// believed ones; the caller holds x.mu.
func (x *PriceIndex) promote(model string) {
	pending := x.pending[model]
	kept := pending[:0]
	for _, p := range pending {
		if x.believes(model, p) {
			delete(x.seen, p.id) // insert records it again
			x.insert(x.models, model, p, MaxPrintsPerModel)
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		delete(x.pending, model)
	} else {
		x.pending[model] = kept
	}
}

// counted returns model's prints that count now, oldest first: believed
// (again: a reputation can fall) and the first of their supplier–renter
// pair within PairWindow; the caller holds x.mu.
func (x *PriceIndex) counted(model string) []tradeEntry {
	x.promote(model)
	type pair struct{ supplier, renter peer.ID }
	last := map[pair]time.Time{}
	var out []tradeEntry
	for _, p := range x.models[model] {
		if x.trust != nil && !x.believes(model, p) {
			continue
		}
		if p.supplier != "" {
			k := pair{p.supplier, p.renter}
			if t, ok := last[k]; ok && p.at.Sub(t) < PairWindow {
				continue
			}
			last[k] = p.at
		}
		out = append(out, p)
	}
	return out
}

// point is the model's price point, if any print counts; the caller
// holds x.mu.
func (x *PriceIndex) point(model string, now time.Time) (PricePoint, bool) {
	x.prune(model, now)
	prints := x.counted(model)
	if len(prints) == 0 {
		return PricePoint{}, false
	}
	return summarise(model, prints), true
}

// Get returns the model's price point; false when no trade of it that
// counts is in the window.
func (x *PriceIndex) Get(model string) (PricePoint, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.point(model, x.now())
}

// All returns the price point of every model with a trade that counts in
// the window, sorted by model.
func (x *PriceIndex) All() []PricePoint {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	models := make(map[string]bool, len(x.models)+len(x.pending))
	for m := range x.models {
		models[m] = true
	}
	for m := range x.pending {
		models[m] = true
	}
	out := make([]PricePoint, 0, len(models))
	for model := range models {
		if pp, ok := x.point(model, now); ok {
			out = append(out, pp)
		}
	}
	slices.SortFunc(out, func(a, b PricePoint) int { return cmp.Compare(a.Model, b.Model) })
	return out
}

// Median returns the model's median trade price in the window, 0 if none.
func (x *PriceIndex) Median(model string) int64 {
	pp, _ := x.Get(model)
	return pp.MedianMicros
}

// summarise computes a price point from a model's counted prints, oldest
// first. The median is the median of each supplier's own median (an
// unattributed print is a supplier of its own).
func summarise(model string, prints []tradeEntry) PricePoint {
	prices := make([]int64, len(prints))
	bySupplier := map[string][]int64{}
	var weighted, weights float64
	for i, p := range prints {
		prices[i] = p.price
		weighted += float64(p.price) * p.weight
		weights += p.weight
		key := string(p.supplier)
		if p.supplier == "" {
			key = "#" + p.id.String()
		}
		bySupplier[key] = append(bySupplier[key], p.price)
	}
	medians := make([]int64, 0, len(bySupplier))
	for _, ps := range bySupplier {
		medians = append(medians, median(ps))
	}
	n := len(prices)
	slices.Sort(prices)
	return PricePoint{
		Model:        model,
		Trades:       n,
		LastMicros:   prints[n-1].price,
		MedianMicros: median(medians),
		MinMicros:    prices[0],
		MaxMicros:    prices[n-1],
		VWAPMicros:   int64(math.Round(weighted / weights)),
		Since:        prints[0].at,
	}
}

// median is the middle of prices (the mean of the middle two for an even
// count, rounded down); it sorts prices in place.
func median(prices []int64) int64 {
	slices.Sort(prices)
	n := len(prices)
	if n%2 == 0 {
		lo, hi := prices[n/2-1], prices[n/2]
		return lo + (hi-lo)/2
	}
	return prices[n/2]
}

// Held returns how many of model's prints the index holds in the window,
// counted or not (not yet believed, or a pair's repeat): what its caps
// bound.
func (x *PriceIndex) Held(model string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.prune(model, x.now())
	return len(x.models[model]) + len(x.pending[model])
}

// HeldAll returns how many prints the index holds in all, of every model,
// counted or not, as they stand: stale ones go at the next read of their
// model or the next Prune.
func (x *PriceIndex) HeldAll() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, set := range []map[string][]tradeEntry{x.models, x.pending} {
		for _, prints := range set {
			n += len(prints)
		}
	}
	return n
}
