package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// trustView is the node's market.Trust: what it knows of each supplier's
// GPUs from the valid profiles it keeps, and its reputation book. The
// price index and the order book ask it on every read, so it answers
// from memory: the profiles are indexed as they are kept.
type trustView struct {
	now  func() time.Time
	self peer.ID                         // the node's own trades are believed: it made them
	rep  atomic.Pointer[reputation.Book] // set once verification starts

	// refused reports the peers the node's connection gater refuses
	// (banned, or cut off for flooding): their asks are not listed, so
	// that renters are not sent to a peer the node will not talk to.
	refused func(peer.ID) bool

	mu       sync.RWMutex
	profiles map[peer.ID]claimedGPUs
	sweepAt  int // forget expired profiles when there are this many
}

var _ market.Trust = (*trustView)(nil)

// claimedGPUs is what one profile claims: its GPUs' UUIDs per model.
type claimedGPUs struct {
	seq     uint64
	expires time.Time
	models  map[string]map[string]bool // model -> UUIDs
}

func newTrustView(self peer.ID, now func() time.Time, refused func(peer.ID) bool) *trustView {
	if refused == nil {
		refused = func(peer.ID) bool { return false }
	}
	return &trustView{now: now, self: self, refused: refused, profiles: map[peer.ID]claimedGPUs{}, sweepAt: 1024}
}

// observe indexes a validated profile, unless a newer one of the same
// peer is held.
func (t *trustView) observe(p *p2p.Profile) {
	g := claimedGPUs{seq: p.Seq, expires: p.Expires(), models: map[string]map[string]bool{}}
	for _, gpu := range p.Gpus {
		if g.models[gpu.Model] == nil {
			g.models[gpu.Model] = map[string]bool{}
		}
		g.models[gpu.Model][gpu.Uuid] = true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.profiles[p.ID]; ok && old.seq > p.Seq {
		return
	}
	t.profiles[p.ID] = g
	if len(t.profiles) >= t.sweepAt {
		t.forgetExpired()
	}
}

// forgetExpired drops expired profiles, so that keys that once published
// one do not pile up; the caller holds t.mu. The next sweep waits until
// the map has doubled, so sweeps cost O(1) per profile observed.
func (t *trustView) forgetExpired() {
	now := t.now()
	for id, g := range t.profiles {
		if !now.Before(g.expires) {
			delete(t.profiles, id)
		}
	}
	t.sweepAt = max(2*len(t.profiles), 1024)
}

// ProfileHas implements market.Trust: supplier's profile is unexpired and
// lists at least count GPUs of model, uuids among them.
func (t *trustView) ProfileHas(supplier peer.ID, model string, uuids []string, count int) bool {
	if t.refused(supplier) {
		return false
	}
	t.mu.RLock()
	g, ok := t.profiles[supplier]
	t.mu.RUnlock()
	if !ok || !t.now().Before(g.expires) {
		return false
	}
	have := g.models[model]
	if len(have) < count || len(have) == 0 {
		return false
	}
	for _, u := range uuids {
		if !have[u] {
			return false
		}
	}
	return true
}

// Reputation implements market.Trust from the reputation book; a supplier
// in a UUID conflict scores 0, so that its prints do not count. The node
// itself is known and trusted: its own trades happened.
func (t *trustView) Reputation(supplier peer.ID) (float64, bool) {
	if supplier == t.self {
		return 1, true
	}
	book := t.rep.Load()
	if book == nil {
		return 0.5, false
	}
	s := book.Score(supplier)
	if s.Conflict {
		return 0, true
	}
	return s.Reputation, s.Passes+s.Fails > 0
}
