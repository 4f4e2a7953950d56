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

	// Uptime pings.
	upPass, upAll float64 // decayed weights
	pings         int
}

// compute scores every subject of entries and observed as of now; see the
// package comment for the formulas.
func compute(entries map[ID]*entry, observed map[peer.ID][]string, cfg Config, now time.Time) *snapshot {
	nowMs := now.UnixMilli()
	halfLifeMs := float64(max(cfg.HalfLife.Milliseconds(), 1))

	// Index peers: the pre-trusted first, then everyone named.
	index := make(map[peer.ID]int)
	var peers []peer.ID
	idx := func(id peer.ID) int {
		i, ok := index[id]
		if !ok {
			i = len(peers)
			index[id] = i
			peers = append(peers, id)
		}
		return i
	}
	for _, p := range cfg.PreTrusted {
		idx(p)
	}

	// Aggregate per (attester, subject).
	pairs := make(map[[2]int]*pair)
	for _, e := range entries {
		i, j := idx(e.attester), idx(e.subject)
		pr := pairs[[2]int{i, j}]
		if pr == nil {
			pr = &pair{attester: i, subject: j}
			pairs[[2]int{i, j}] = pr
		}
		w := math.Exp2(-float64(max(nowMs-e.createdMs, 0)) / halfLifeMs)
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
				pr.lastPassMs, pr.lastPassUUIDs = e.createdMs, e.uuids
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
	for s := range observed {
		idx(s)
	}
	// Iterate pairs in a fixed order, so sums come out the same each time.
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

	trust := globalTrust(len(peers), len(cfg.PreTrusted), ordered, cfg.Alpha)

	// Per subject, what trusted attesters said.
	type acc struct {
		s, f, upPass, upAll    float64
		lastPassMs, lastFailMs int64
		provenMs               int64
		proven                 []string
		latestPasses           int
		score                  Score
	}
	accs := make(map[int]*acc)
	get := func(j int) *acc {
		a := accs[j]
		if a == nil {
			a = &acc{}
			accs[j] = a
		}
		return a
	}
	for _, pr := range ordered {
		a := get(pr.subject)
		t := trust[pr.attester]
		if t <= trustEpsilon {
			continue
		}
		a.upPass += t * pr.upPass
		a.upAll += t * pr.upAll
		a.score.Pings += pr.pings
		if pr.passes+pr.fails == 0 {
			continue
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
			a.provenMs, a.proven = pr.lastPassMs, pr.lastPassUUIDs
		}
	}
	for s := range observed {
		get(index[s])
	}

	// GPU UUID claims: each subject's observed profile and its latest
	// passed challenge by a trusted attester.
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
	for j, a := range accs {
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

	scores := make(map[peer.ID]Score, len(accs))
	for j, a := range accs {
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
		sc.Conflict = inConflict[peers[j]]
		sc.Verified = a.latestPasses >= cfg.MinAttesters && !failing && !sc.Conflict
		sc.Trust = trust[j]
		scores[peers[j]] = sc
	}
	return &snapshot{at: now, scores: scores, conflicts: conflicts}
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
