package reputation

import (
	"math"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

const (
	// trustEpsilon is the scaled trust (see Score.Trust) above which an
	// attester counts as trusted. Peers no trusted peer vouches for get
	// exactly 0; the threshold only absorbs rounding.
	trustEpsilon = 1e-9
	// convergence is the L1 change in global trust below which power
	// iteration stops; maxIterations bounds it regardless.
	convergence   = 1e-9
	maxIterations = 200
)

// pair accumulates what one attester said about one subject.
type pair struct {
	attester, subject int

	// Challenges.
	pass, fail             float64 // decayed weights
	passes, fails          int
	latestMs               int64 // the attester's latest challenge of the subject
	latestPassed           bool
	lastPassMs, lastFailMs int64
	lastPassUUIDs          []string // of the pass at lastPassMs
	lastPassSimulated      bool     // the pass at lastPassMs was of simulated GPUs

	// Uptime pings.
	upPass, upAll float64 // decayed weights
	pings         int
}

// compute scores every subject of entries and observed as of now; see the
// package comment for the formulas. Its phases: index the peers,
// aggregate the entries per (attester, subject), run EigenTrust over
// them, total per subject what trusted attesters said, find the GPU UUIDs
// that two peers claim, and score.
func compute(entries map[ID]*entry, observed map[peer.ID][]string, simOnly map[peer.ID]bool, cfg Config, now time.Time) *snapshot {
	var ix peerIndex
	for _, p := range cfg.PreTrusted {
		ix.of(p)
	}
	ordered := aggregate(entries, &ix, now, cfg.HalfLife)
	for s := range observed {
		ix.of(s)
	}
	trust := globalTrust(len(ix.peers), len(cfg.PreTrusted), ordered, cfg.Alpha)
	subjects := totals(ordered, trust)
	for s := range observed {
		if _, ok := subjects[ix.index[s]]; !ok {
			subjects[ix.index[s]] = &subjectTotal{}
		}
	}
	conflicts, inConflict := uuidConflicts(observed, subjects, ix.peers)
	scores := make(map[peer.ID]Score, len(subjects))
	for j, a := range subjects {
		id := ix.peers[j]
		scores[id] = a.scoreOf(trust[j], inConflict[id], simOnly[id], cfg.MinAttesters)
	}
	return &snapshot{at: now, scores: scores, conflicts: conflicts}
}

// peerIndex numbers peers in the order they are first named.
type peerIndex struct {
	index map[peer.ID]int
	peers []peer.ID
}

// of is id's number, given it now if it has none.
func (x *peerIndex) of(id peer.ID) int {
	if x.index == nil {
		x.index = make(map[peer.ID]int)
	}
	i, ok := x.index[id]
	if !ok {
		i = len(x.peers)
		x.index[id] = i
		x.peers = append(x.peers, id)
	}
	return i
}

// aggregate sums the entries per (attester, subject), each weighted by its
// age (halving every halfLife), and returns the pairs in a fixed order
// (by attester, then subject), so that sums over them come out the same
// each time.
func aggregate(entries map[ID]*entry, ix *peerIndex, now time.Time, halfLife time.Duration) []*pair {
	nowMs := now.UnixMilli()
	halfLifeMs := float64(max(halfLife.Milliseconds(), 1))
	pairs := make(map[[2]int]*pair)
	for _, e := range entries {
		i, j := ix.of(e.attester), ix.of(e.subject)
		pr := pairs[[2]int{i, j}]
		if pr == nil {
			pr = &pair{attester: i, subject: j}
			pairs[[2]int{i, j}] = pr
		}
		pr.add(e, math.Exp2(-float64(max(nowMs-e.createdMs, 0))/halfLifeMs))
	}
	ordered := make([]*pair, 0, len(pairs))
	for _, pr := range pairs {
		ordered = append(ordered, pr)
	}
	slices.SortFunc(ordered, func(a, b *pair) int {
		if a.attester != b.attester {
			return a.attester - b.attester
		}
		return a.subject - b.subject
	})
	return ordered
}

// add counts entry e, of weight w.
func (pr *pair) add(e *entry, w float64) {
	switch {
	case e.uptime:
		pr.upAll += w
		pr.pings++
		if e.passed {
			pr.upPass += w
		}
	case e.passed:
		pr.pass += w
		pr.passes++
		if e.createdMs > pr.lastPassMs {
			pr.lastPassMs, pr.lastPassUUIDs, pr.lastPassSimulated = e.createdMs, e.uuids, e.simulated
		}
	default:
		pr.fail += w
		pr.fails++
		pr.lastFailMs = max(pr.lastFailMs, e.createdMs)
	}
	if !e.uptime && (e.createdMs > pr.latestMs || e.createdMs == pr.latestMs && !e.passed) {
		pr.latestMs, pr.latestPassed = e.createdMs, e.passed
	}
}

// subjectTotal is what trusted attesters said of one subject, each
// weighted by its trust.
type subjectTotal struct {
	s, f, upPass, upAll    float64
	lastPassMs, lastFailMs int64
	provenMs               int64
	proven                 []string // the GPU UUIDs of the latest pass
	provenSimulated        bool     // the latest pass was of simulated GPUs
	latestPasses           int      // attesters whose latest challenge passed
	score                  Score    // the counts
}

// totals sums the pairs per subject, over the attesters whose trust is
// above trustEpsilon.
func totals(ordered []*pair, trust []float64) map[int]*subjectTotal {
	subjects := make(map[int]*subjectTotal)
	for _, pr := range ordered {
		a := subjects[pr.subject]
		if a == nil {
			a = &subjectTotal{}
			subjects[pr.subject] = a
		}
		if t := trust[pr.attester]; t > trustEpsilon {
			a.add(pr, t)
		}
	}
	return subjects
}

// add counts pair pr, from an attester of trust t.
func (a *subjectTotal) add(pr *pair, t float64) {
	a.upPass += t * pr.upPass
	a.upAll += t * pr.upAll
	a.score.Pings += pr.pings
	if pr.passes+pr.fails == 0 {
		return
	}
	a.s += t * pr.pass
	a.f += t * pr.fail
	a.score.Passes += pr.passes
	a.score.Fails += pr.fails
	a.score.Challengers++
	if pr.latestPassed {
		a.latestPasses++
	}
	a.lastPassMs = max(a.lastPassMs, pr.lastPassMs)
	a.lastFailMs = max(a.lastFailMs, pr.lastFailMs)
	if pr.lastPassMs > a.provenMs {
		a.provenMs, a.proven, a.provenSimulated = pr.lastPassMs, pr.lastPassUUIDs, pr.lastPassSimulated
	}
}

// uuidConflicts finds the GPU UUIDs that more than one peer claims, in
// its observed profile or by its latest pass of a trusted attester's
// challenge, and the peers in any such conflict.
func uuidConflicts(observed map[peer.ID][]string, subjects map[int]*subjectTotal, peers []peer.ID) (map[string][]peer.ID, map[peer.ID]bool) {
	claims := make(map[string][]peer.ID)
	claim := func(u string, id peer.ID) {
		if !slices.Contains(claims[u], id) {
			claims[u] = append(claims[u], id)
		}
	}
	for id, uuids := range observed {
		for _, u := range uuids {
			claim(u, id)
		}
	}
	for j, a := range subjects {
		for _, u := range a.proven {
			claim(u, peers[j])
		}
	}
	conflicts := make(map[string][]peer.ID)
	inConflict := make(map[peer.ID]bool)
	for u, ids := range claims {
		if len(ids) < 2 {
			continue
		}
		slices.Sort(ids)
		conflicts[u] = ids
		for _, id := range ids {
			inConflict[id] = true
		}
	}
	return conflicts, inConflict
}

// scoreOf is the subject's score: its beta reputation (halved while its
// latest challenge failed), uptime, last challenge, and whether it is
// verified (minAttesters trusted attesters' latest challenges passed, not
// failing, no conflict, and no pass on simulated GPUs alone unless
// claimsSimOnly: the profile claims simulated GPUs only).
func (a *subjectTotal) scoreOf(trust float64, conflict, claimsSimOnly bool, minAttesters int) Score {
	sc := a.score
	beta := (1 + a.s) / (2 + a.s + a.f)
	failing := a.lastFailMs > 0 && a.lastFailMs >= a.lastPassMs
	if failing {
		beta /= 2
	}
	sc.Reputation = beta
	if a.upAll > 0 {
		sc.Uptime = a.upPass / a.upAll
	}
	if last := max(a.lastPassMs, a.lastFailMs); last > 0 {
		sc.LastChallenge = time.UnixMilli(last)
	}
	sc.Conflict = conflict
	sc.SimulatedOnly = a.provenMs > 0 && a.provenSimulated
	sc.simForReal = sc.SimulatedOnly && !claimsSimOnly
	sc.Verified = a.latestPasses >= minAttesters && !failing && !sc.Conflict && !sc.simForReal
	sc.Trust = trust
	return sc
}

// globalTrust runs EigenTrust's power iteration over n peers, of which
// the first nPre are pre-trusted, with local trust from pairs (sorted by
// attester), and returns each peer's trust scaled so that the largest is
// 1.
func globalTrust(n, nPre int, pairs []*pair, alpha float64) []float64 {
	p := make([]float64, n)
	for i := range nPre {
		p[i] = 1 / float64(nPre)
	}
	// Local trust rows: c_ij = max(0, pass − fail) / Σ_k max(0, pass − fail).
	type edge struct {
		to int
		c  float64
	}
	rows := make([][]edge, n)
	sums := make([]float64, n)
	for _, pr := range pairs {
		if l := pr.pass - pr.fail; l > 0 {
			rows[pr.attester] = append(rows[pr.attester], edge{pr.subject, l})
			sums[pr.attester] += l
		}
	}
	for i, row := range rows {
		for k := range row {
			row[k].c /= sums[i]
		}
	}

	t := slices.Clone(p)
	next := make([]float64, n)
	for range maxIterations {
		// Mass of peers that trust nobody goes to the pre-trusted.
		dangling := 0.0
		for i, ti := range t {
			if len(rows[i]) == 0 {
				dangling += ti
			}
		}
		for j := range next {
			next[j] = (alpha + (1-alpha)*dangling) * p[j]
		}
		for i, row := range rows {
			if t[i] == 0 {
				continue
			}
			for _, e := range row {
				next[e.to] += (1 - alpha) * t[i] * e.c
			}
		}
		delta := 0.0
		for j := range t {
			delta += math.Abs(next[j] - t[j])
		}
		t, next = next, t
		if delta < convergence {
			break
		}
	}
	top := 0.0
	for _, v := range t {
		top = max(top, v)
	}
	if top > 0 {
		for i := range t {
			t[i] /= top
		}
	}
	return t
}
