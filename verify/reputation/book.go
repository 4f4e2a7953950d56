package reputation

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/store"
)

// DefaultFloor is the reputation below which renters do not rent by
// default. An unknown supplier scores exactly 0.5 and so passes it; a
// supplier whose latest verdict from a trusted attester is a failure
// always scores below it.
const DefaultFloor = 0.5

// Defaults of Config, filled in by Open.
const (
	DefaultHalfLife        = 24 * time.Hour
	DefaultAlpha           = 0.15
	DefaultMinAttesters    = 3
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultMaxAttestations = 100_000
	DefaultRefresh         = time.Minute
)

// ksAttestations is the store keyspace attestations are kept in: key the
// attestation's ID, value its signed envelope, with a TTL that ends
// Config.Retention after its creation.
var ksAttestations = store.MustKeyspace("attestations")

// Config configures a Book. The zero value of each field picks its
// default.
type Config struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// HalfLife is the age at which an attestation weighs half as much as
	// a fresh one (DefaultHalfLife).
	HalfLife time.Duration
	// PreTrusted are the seed peers whose opinions anchor the trust
	// computation; when empty, the book's own peer alone. Include self
	// for the node's own verdicts to count whatever others think of it.
	PreTrusted []peer.ID
	// Alpha is the weight of pre-trust in each trust iteration, in (0, 1]
	// (DefaultAlpha).
	Alpha float64
	// MinAttesters is how many distinct trusted attesters must have
	// passed a supplier in their latest challenge for it to be verified
	// (DefaultMinAttesters).
	MinAttesters int
	// Retention is how long an attestation is kept, in memory and in the
	// store (DefaultRetention).
	Retention time.Duration
	// MaxAttestations bounds the attestations kept; beyond it the oldest
	// are dropped (DefaultMaxAttestations).
	MaxAttestations int
	// Refresh is how long computed scores serve, absent new attestations,
	// before decay is applied afresh (DefaultRefresh).
	Refresh time.Duration
	// Log receives store failures; slog.Default() when nil.
	Log *slog.Logger
}

// withDefaults returns c with its zero fields set to their defaults, or an
// error naming a field that is out of range.
func (c Config) withDefaults(self peer.ID) (Config, error) {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HalfLife == 0 {
		c.HalfLife = DefaultHalfLife
	}
	if c.Alpha == 0 {
		c.Alpha = DefaultAlpha
	}
	if c.MinAttesters == 0 {
		c.MinAttesters = DefaultMinAttesters
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MaxAttestations == 0 {
		c.MaxAttestations = DefaultMaxAttestations
	}
	if c.Refresh == 0 {
		c.Refresh = DefaultRefresh
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	pre := make([]peer.ID, 0, len(c.PreTrusted)+1)
	for _, p := range c.PreTrusted {
		if p != "" && !slices.Contains(pre, p) {
			pre = append(pre, p)
		}
	}
	if len(pre) == 0 {
		pre = append(pre, self)
	}
	c.PreTrusted = pre
	switch {
	case c.HalfLife < 0:
		return c, fmt.Errorf("half-life %s is negative", c.HalfLife)
	case math.IsNaN(c.Alpha) || c.Alpha < 0 || c.Alpha > 1:
		return c, fmt.Errorf("alpha %g is not in (0, 1]", c.Alpha)
	case c.MinAttesters < 0:
		return c, fmt.Errorf("min attesters %d is negative", c.MinAttesters)
	case c.Retention < 0 || c.Refresh < 0:
		return c, fmt.Errorf("retention %s or refresh %s is negative", c.Retention, c.Refresh)
	case c.MaxAttestations < 0:
		return c, fmt.Errorf("max attestations %d is negative", c.MaxAttestations)
	}
	return c, nil
}

// Score is what a node believes of one supplier. See the package comment
// for how each field is computed.
type Score struct {
	// Reputation is in [0, 1]; 0.5 for a supplier nobody trusted has
	// judged.
	Reputation float64 `json:"reputation"`
	// Verified: enough trusted challengers passed it in their latest
	// challenge, none failed it since, no GPU UUID conflict, and unless
	// its profile is known to claim simulated GPUs only, the latest pass
	// was not on simulated ones (SimulatedOnly).
	Verified bool `json:"verified"`
	// SimulatedOnly: the latest pass of a trusted challenger was of
	// simulated GPUs (challenged at simulated sizes). Such a pass proves
	// nothing about hardware: it makes a supplier neither verified nor
	// proven unless the book has seen its profile claim simulated GPUs
	// only. A supplier that collects passes on simulated GPUs and then
	// claims real ones, or one whose profile the book has not seen, must
	// be proven again on real hardware.
	SimulatedOnly bool `json:"simulated_only,omitempty"`
	// simForReal is SimulatedOnly without a profile known to claim
	// simulated GPUs only; Proven is then false.
	simForReal bool
	// Passes and Fails count the challenges trusted attesters passed and
	// failed it in (not decayed).
	Passes int `json:"passes"`
	Fails  int `json:"fails"`
	// Challengers is how many distinct trusted attesters challenged it.
	Challengers int `json:"challengers"`
	// Uptime is the trust-weighted, decayed share of uptime pings it
	// answered; 0 when Pings is 0.
	Uptime float64 `json:"uptime"`
	// Pings counts the uptime pings of trusted attesters (not decayed).
	Pings int `json:"pings"`
	// LastChallenge is when a trusted attester last challenged it.
	LastChallenge time.Time `json:"last_challenge,omitzero"`
	// Conflict: one of its GPU UUIDs is claimed by another supplier too.
	Conflict bool `json:"conflict"`
	// Trust is its global trust as an attester, scaled so the most
	// trusted peer has 1.
	Trust float64 `json:"trust"`
}

// neutral is the score of a supplier nothing is known about.
var neutral = Score{Reputation: 0.5}

// Book keeps attestations, durably, and computes each supplier's score
// from them. Scores are computed lazily: Add and ObserveGPUs invalidate
// them, and they are recomputed on the next read, or when Config.Refresh
// has passed since the last computation. It is safe for concurrent use.
type Book struct {
	s    store.Store
	self peer.ID
	cfg  Config

	mu       sync.Mutex
	entries  map[ID]*entry
	observed map[peer.ID][]string // GPU UUIDs each supplier's profile claims
	simOnly  map[peer.ID]bool     // suppliers whose profile claims simulated GPUs only
	snap     *snapshot            // nil when stale

	lmu    sync.Mutex
	listed map[ID]*Attestation // checked by List, by the ID of their envelope
}

// entry is the part of an attestation scoring needs.
type entry struct {
	attester, subject peer.ID
	createdMs         int64
	uptime            bool // kind: uptime ping, else challenge
	passed            bool
	uuids             []string // of a passed challenge
	simulated         bool     // a challenge of simulated GPUs
}

// snapshot is the result of one computation.
type snapshot struct {
	at        time.Time
	scores    map[peer.ID]Score
	conflicts map[string][]peer.ID
}

// Open returns the book of self, loading the attestations kept in s. Kept
// attestations are checked again (signature and fields, with an age limit
// of cfg.Retention); those that fail are deleted.
func Open(s store.Store, self peer.ID, cfg Config) (*Book, error) {
	if self == "" {
		return nil, errors.New("reputation: open: empty self peer ID")
	}
	cfg, err := cfg.withDefaults(self)
	if err != nil {
		return nil, fmt.Errorf("reputation: open: config: %w", err)
	}
	b := &Book{s: s, self: self, cfg: cfg, entries: make(map[ID]*entry), observed: make(map[peer.ID][]string), simOnly: make(map[peer.ID]bool)}
	now := cfg.Now()
	var bad [][]byte
	err = s.Iterate(ksAttestations, nil, func(key, raw []byte) error {
		a, err := openAttestation(raw, now, cfg.Retention)
		if err == nil && string(key) != string(a.ID[:]) {
			err = fmt.Errorf("stored under %x, not its ID", key)
		}
		if err != nil {
			cfg.Log.Warn("reputation: dropping stored attestation", "key", fmt.Sprintf("%x", key), "err", err)
			bad = append(bad, slices.Clone(key))
			return nil
		}
		b.entries[a.ID] = newEntry(a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reputation: open: load attestations: %w", err)
	}
	for _, k := range bad {
		if err := s.Delete(ksAttestations, k); err != nil {
			return nil, fmt.Errorf("reputation: open: delete bad attestation %x: %w", k, err)
		}
	}
	b.evict(now)
	return b, nil
}

func newEntry(a *Attestation) *entry {
	e := &entry{attester: a.Attester, subject: a.Subject, createdMs: a.CreatedMs, uptime: a.Kind == KindUptime, passed: a.Passed, simulated: a.Simulated}
	if !e.uptime && e.passed && len(a.GpuUuids) > 0 {
		e.uuids = slices.Clone(a.GpuUuids)
	}
	return e
}

// Add keeps a, in memory and in the store, and reports whether it was new:
// false for one already kept (by ID), nil, or older than Config.Retention.
// The caller validates it first (OpenAttestation, or the topic validator);
// the node's own attestations are added the same way. A store failure is
// logged and a is still kept in memory.
func (b *Book) Add(a *Attestation) bool {
	if a == nil || a.Attestation == nil || a.Attester == "" || a.Subject == "" {
		return false
	}
	now := b.cfg.Now()
	ttl := b.cfg.Retention - now.Sub(a.Created())
	if ttl <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.entries[a.ID]; ok {
		return false
	}
	if len(a.Raw) > 0 {
		if err := b.s.PutTTL(ksAttestations, a.ID[:], a.Raw, ttl); err != nil {
			b.cfg.Log.Error("reputation: store attestation", "id", a.ID.Short(), "attester", a.Attester, "err", err)
		}
	}
	b.entries[a.ID] = newEntry(a)
	b.snap = nil
	if len(b.entries) > b.cfg.MaxAttestations {
		b.evict(now)
	}
	return true
}

// ObserveGPUs records the GPU UUIDs subject's profile claims, replacing
// what it claimed before; nil clears them. A UUID claimed by two
// suppliers, here or in their latest passed challenges, is a conflict.
// onlySimulated says that every GPU the profile claims is simulated: only
// then do passes on simulated GPUs make subject verified or proven (see
// Score.SimulatedOnly).
func (b *Book) ObserveGPUs(subject peer.ID, uuids []string, onlySimulated bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(uuids) == 0 {
		if _, ok := b.observed[subject]; !ok {
			return
		}
		delete(b.observed, subject)
		delete(b.simOnly, subject)
	} else {
		b.observed[subject] = slices.Clone(uuids)
		if onlySimulated {
			b.simOnly[subject] = true
		} else {
			delete(b.simOnly, subject)
		}
	}
	b.snap = nil
}

// Score returns what the book believes of subject; a supplier it knows
// nothing about has reputation 0.5 and is not verified.
func (b *Book) Score(subject peer.ID) Score {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.current().scores[subject]; ok {
		return s
	}
	return neutral
}

// Standing is what a renter weighs of subject: its reputation, whether
// it is verified, and its uptime in percent (nil when no trusted attester
// pinged it). Its shape is market's score function (RentRequest.Score,
// OfferInputs.Score), so b.Standing can be passed as one.
func (b *Book) Standing(subject peer.ID) (reputation float64, verified bool, uptimePct *float64) {
	s := b.Score(subject)
	return s.Reputation, s.Verified, s.UptimePct()
}

// Proven reports whether subject has earned a renter's trust (see
// Score.Proven). With Standing, it makes b market's screen of a renter's
// suppliers (market.Standings).
func (b *Book) Proven(subject peer.ID) bool { return b.Score(subject).Proven() }

// UptimePct is s's uptime in percent, nil when no trusted attester
// pinged it.
func (s Score) UptimePct() *float64 {
	if s.Pings == 0 {
		return nil
	}
	u := s.Uptime * 100
	return &u
}

// Proven reports whether a supplier has earned a renter's trust rather
// than merely exist: verified, or passed by a trusted challenger, not
// failing (its reputation above DefaultFloor), and in no UUID conflict.
func (s Score) Proven() bool {
	if s.Conflict || s.simForReal {
		return false
	}
	return s.Verified || s.Passes > 0 && s.Reputation > DefaultFloor
}

// Scores returns the score of every supplier the book has an attestation
// about or has observed GPUs of.
func (b *Book) Scores() map[peer.ID]Score {
	b.mu.Lock()
	defer b.mu.Unlock()
	snap := b.current()
	m := make(map[peer.ID]Score, len(snap.scores))
	for id, s := range snap.scores {
		m[id] = s
	}
	return m
}

// Conflicts returns each GPU UUID claimed by two or more suppliers, with
// the suppliers in ascending order.
func (b *Book) Conflicts() map[string][]peer.ID {
	b.mu.Lock()
	defer b.mu.Unlock()
	snap := b.current()
	m := make(map[string][]peer.ID, len(snap.conflicts))
	for u, ids := range snap.conflicts {
		m[u] = slices.Clone(ids)
	}
	return m
}

// Len is how many attestations the book keeps.
func (b *Book) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.entries)
}

// current returns a fresh snapshot, computing it if need be. b.mu is held.
func (b *Book) current() *snapshot {
	now := b.cfg.Now()
	if s := b.snap; s != nil && !now.Before(s.at) && now.Sub(s.at) < b.cfg.Refresh {
		return s
	}
	b.dropExpired(now)
	b.snap = compute(b.entries, b.observed, b.simOnly, b.cfg, now)
	return b.snap
}

// dropExpired forgets attestations older than the retention; the store
// forgets them by their TTL. b.mu is held.
func (b *Book) dropExpired(now time.Time) {
	oldest := now.Add(-b.cfg.Retention).UnixMilli()
	for id, e := range b.entries {
		if e.createdMs < oldest {
			delete(b.entries, id)
		}
	}
}

// evict drops expired attestations and then, while over
// Config.MaxAttestations, the oldest, down to 90% of it so that eviction
// is rare; evicted ones are deleted from the store too. b.mu is held (or b
// is not yet shared).
func (b *Book) evict(now time.Time) {
	b.dropExpired(now)
	if len(b.entries) <= b.cfg.MaxAttestations {
		return
	}
	type aged struct {
		id ID
		ms int64
	}
	all := make([]aged, 0, len(b.entries))
	for id, e := range b.entries {
		all = append(all, aged{id, e.createdMs})
	}
	slices.SortFunc(all, func(x, y aged) int { return cmp.Compare(x.ms, y.ms) })
	drop := all[:len(all)-b.cfg.MaxAttestations*9/10]
	err := b.s.Batch(func(batch store.Batch) error {
		for _, a := range drop {
			delete(b.entries, a.id)
			if err := batch.Delete(ksAttestations, a.id[:]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.cfg.Log.Error("reputation: delete evicted attestations", "count", len(drop), "err", err)
	}
	b.snap = nil
}
