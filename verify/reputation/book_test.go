package reputation

import (
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/store"
)

// world is a small network seen by the pre-trusted node P (the book's
// own peer): two more challengers C2 and C3 that P has passed (so they
// have standing), and a clock.
type world struct {
	t    *testing.T
	clk  *clock
	p    node
	cs   []node // P, C2, C3: the trusted challengers
	book *Book
}

func newWorld(t *testing.T) *world { t.Helper(); return newWorldIn(t, store.NewMemory()) }

// newWorldIn is newWorld with the book kept in s.
func newWorldIn(t *testing.T, s store.Store) *world {
	t.Helper()
	w := &world{t: t, clk: newClock(), p: newNode(t)}
	w.cs = append([]node{w.p}, newNodes(t, 2)...)
	w.book = w.open(s)
	// P passes C2 and C3; they pass each other.
	w.add(w.p, w.cs[1].id, true)
	w.add(w.p, w.cs[2].id, true)
	w.add(w.cs[1], w.cs[2].id, true)
	w.add(w.cs[2], w.cs[1].id, true)
	return w
}

// newBare is a world with the pre-trusted node P alone, so that P has the
// most trust (τ_P = 1) and formulas can be checked exactly.
func newBare(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, clk: newClock(), p: newNode(t)}
	w.cs = []node{w.p}
	w.book = w.open(store.NewMemory())
	return w
}

func (w *world) open(s store.Store) *Book {
	w.t.Helper()
	b, err := Open(s, w.p.id, Config{Now: w.clk.Now, Log: quietLog()})
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}

// add has by attest a challenge of subject now, and adds it to the book.
func (w *world) add(by node, subject peer.ID, passed bool, uuids ...string) *Attestation {
	w.t.Helper()
	a := attest(w.t, by, subject, KindChallenge, passed, w.clk.Now(), uuids...)
	if !w.book.Add(a) {
		w.t.Fatalf("Add(%s) = false for a new attestation", a.ID.Short())
	}
	return a
}

// passAll has each trusted challenger pass subject.
func (w *world) passAll(subject peer.ID, uuids ...string) {
	w.t.Helper()
	for _, c := range w.cs {
		w.add(c, subject, true, uuids...)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestHonestSupplierVerified(t *testing.T) {
	w := newWorld(t)
	h := newNode(t)
	w.passAll(h.id, "GPU-H-0", "GPU-H-1")
	s := w.book.Score(h.id)
	if !s.Verified {
		t.Errorf("Verified = false, want true: %+v", s)
	}
	if s.Reputation <= DefaultFloor {
		t.Errorf("Reputation = %.3f, want > %.1f", s.Reputation, DefaultFloor)
	}
	if s.Passes != 3 || s.Fails != 0 || s.Challengers != 3 || s.Conflict {
		t.Errorf("got %+v, want 3 passes by 3 challengers, no conflict", s)
	}
	if !s.LastChallenge.Equal(testNow) {
		t.Errorf("LastChallenge = %s, want %s", s.LastChallenge, testNow)
	}
	// Two trusted challengers are not enough.
	h2 := newNode(t)
	w.add(w.cs[0], h2.id, true)
	w.add(w.cs[1], h2.id, true)
	if s := w.book.Score(h2.id); s.Verified {
		t.Errorf("passed by 2 of MinAttesters 3: Verified = true")
	}
}

func TestUnknownSupplierIsNeutral(t *testing.T) {
	w := newWorld(t)
	s := w.book.Score(newNode(t).id)
	if s.Reputation != 0.5 || s.Verified || s.Passes != 0 {
		t.Errorf("unknown supplier: %+v, want reputation 0.5, unverified", s)
	}
}

func TestFailedSupplierDropsBelowFloor(t *testing.T) {
	w := newWorld(t)
	h := newNode(t)
	// A long, good history: ten rounds of passes by all three.
	for range 10 {
		w.passAll(h.id)
		w.clk.Advance(time.Hour)
	}
	if s := w.book.Score(h.id); !s.Verified || s.Reputation < 0.9 {
		t.Fatalf("before the failure: %+v, want verified, reputation ≥ 0.9", s)
	}
	w.add(w.cs[1], h.id, false) // C2, trusted, fails it
	s := w.book.Score(h.id)
	if s.Verified {
		t.Errorf("Verified = true after a failed challenge")
	}
	if s.Reputation >= DefaultFloor {
		t.Errorf("Reputation = %.3f after a failed challenge, want < %.1f", s.Reputation, DefaultFloor)
	}
	if s.Fails != 1 || s.Passes != 30 {
		t.Errorf("Passes %d, Fails %d, want 30 and 1", s.Passes, s.Fails)
	}
	// It recovers once trusted challengers pass it again.
	w.clk.Advance(time.Hour)
	w.passAll(h.id)
	if s := w.book.Score(h.id); !s.Verified || s.Reputation <= DefaultFloor {
		t.Errorf("after passing again: %+v, want verified above the floor", s)
	}
}

func TestSybilRingDoesNotLiftImpostor(t *testing.T) {
	w := newWorld(t)
	honest, impostor := newNode(t), newNode(t)
	w.passAll(honest.id)
	w.add(w.p, impostor.id, false) // the pre-trusted node caught it

	// Five sybils praise each other and the impostor, many times over,
	// and the impostor praises them back.
	sybils := newNodes(t, 5)
	for range 4 {
		for _, s := range sybils {
			w.add(s, impostor.id, true)
			w.add(impostor, s.id, true)
			for _, o := range sybils {
				if o.id != s.id {
					w.add(s, o.id, true)
				}
			}
			// They also slander the honest supplier.
			w.add(s, honest.id, false)
		}
		w.clk.Advance(time.Minute)
	}

	hs, is := w.book.Score(honest.id), w.book.Score(impostor.id)
	t.Logf("honest: reputation %.3f, verified %v; impostor: reputation %.3f, verified %v", hs.Reputation, hs.Verified, is.Reputation, is.Verified)
	if is.Reputation >= hs.Reputation {
		t.Errorf("impostor %.3f not below honest %.3f", is.Reputation, hs.Reputation)
	}
	if is.Reputation >= DefaultFloor {
		t.Errorf("impostor reputation %.3f, want < %.1f", is.Reputation, DefaultFloor)
	}
	if is.Verified {
		t.Errorf("impostor verified")
	}
	if !hs.Verified || hs.Reputation <= DefaultFloor {
		t.Errorf("honest supplier slandered by the ring: %+v", hs)
	}
	for i, s := range sybils {
		if sc := w.book.Score(s.id); sc.Trust != 0 || sc.Verified {
			t.Errorf("sybil %d: trust %g, verified %v; want 0, false", i, sc.Trust, sc.Verified)
		}
	}
	if is.Passes != 0 || is.Challengers != 1 {
		t.Errorf("impostor counts sybil passes: %+v", is)
	}

	// An impostor the ring praises but no trusted node has judged stays
	// at the neutral prior, below the honest supplier and unverified.
	other := newNode(t)
	for _, s := range sybils {
		w.add(s, other.id, true)
	}
	if os := w.book.Score(other.id); os.Reputation != 0.5 || os.Verified {
		t.Errorf("ring-praised unknown: %+v, want neutral 0.5, unverified", os)
	}
}

func TestDecay(t *testing.T) {
	// An old failure then a new pass, against an old pass then a new
	// failure, by the same trusted attester three half-lives apart.
	const gap = 3 * DefaultHalfLife
	recovered, relapsed := newBare(t), newBare(t)
	x, y := newNode(t), newNode(t)
	recovered.add(recovered.p, x.id, false)
	relapsed.add(relapsed.p, y.id, true)
	recovered.clk.Advance(gap)
	relapsed.clk.Advance(gap)
	recovered.add(recovered.p, x.id, true)
	relapsed.add(relapsed.p, y.id, false)

	rx, ry := recovered.book.Score(x.id), relapsed.book.Score(y.id)
	if rx.Reputation <= DefaultFloor || rx.Reputation <= ry.Reputation {
		t.Errorf("old failure, new pass: %.4f; old pass, new failure: %.4f; want the first above the floor and above the second", rx.Reputation, ry.Reputation)
	}
	// The formulas exactly: P has the most trust (τ = 1); S = 1, F = 2⁻³.
	want := (1 + 1.0) / (2 + 1 + 0.125)
	if math.Abs(rx.Reputation-want) > 1e-9 {
		t.Errorf("old failure, new pass: reputation %.6f, want (1+1)/(2+1+1/8) = %.6f", rx.Reputation, want)
	}
	want = (1 + 0.125) / (2 + 0.125 + 1) / 2
	if math.Abs(ry.Reputation-want) > 1e-9 {
		t.Errorf("old pass, new failure: reputation %.6f, want (1+1/8)/(2+1/8+1)/2 = %.6f", ry.Reputation, want)
	}
}

func TestScoresDecayWithTime(t *testing.T) {
	w := newBare(t)
	x := newNode(t)
	w.add(w.p, x.id, true)
	if got, want := w.book.Score(x.id).Reputation, 2.0/3; math.Abs(got-want) > 1e-9 {
		t.Fatalf("fresh pass: %.6f, want %.6f", got, want)
	}
	// Within Refresh the cached score serves; after it, decay shows.
	w.clk.Advance(DefaultRefresh / 2)
	if got, want := w.book.Score(x.id).Reputation, 2.0/3; got != want {
		t.Errorf("within refresh: %.6f, want cached %.6f", got, want)
	}
	w.clk.Advance(DefaultHalfLife - DefaultRefresh/2)
	if got, want := w.book.Score(x.id).Reputation, 1.5/2.5; math.Abs(got-want) > 1e-9 {
		t.Errorf("one half-life later: %.6f, want %.6f", got, want)
	}
	// Past the retention the attestation is forgotten.
	w.clk.Advance(DefaultRetention)
	if s := w.book.Score(x.id); s.Reputation != 0.5 || s.Passes != 0 {
		t.Errorf("past retention: %+v, want neutral", s)
	}
}

func TestUUIDConflict(t *testing.T) {
	t.Run("two proven claims", func(t *testing.T) {
		w := newWorld(t)
		a, b := newNode(t), newNode(t)
		w.passAll(a.id, "GPU-A", "GPU-B")
		w.passAll(b.id, "GPU-C")
		if !w.book.Score(a.id).Verified || !w.book.Score(b.id).Verified {
			t.Fatal("both should be verified before the conflict")
		}
		w.clk.Advance(time.Minute)
		w.passAll(b.id, "GPU-C", "GPU-A") // b now proves a's GPU too
		for _, id := range []peer.ID{a.id, b.id} {
			if s := w.book.Score(id); s.Verified || !s.Conflict {
				t.Errorf("%s: verified %v, conflict %v; want unverified, in conflict", id, s.Verified, s.Conflict)
			}
		}
		want := []peer.ID{a.id, b.id}
		slices.Sort(want)
		c := w.book.Conflicts()
		if len(c) != 1 || !slices.Equal(c["GPU-A"], want) {
			t.Errorf("Conflicts() = %v, want GPU-A: %v", c, want)
		}
		// Resolved when b's latest proof no longer lists it.
		w.clk.Advance(time.Minute)
		w.passAll(b.id, "GPU-C")
		if len(w.book.Conflicts()) != 0 || !w.book.Score(a.id).Verified || !w.book.Score(b.id).Verified {
			t.Errorf("after b's new proof: conflicts %v, want none and both verified", w.book.Conflicts())
		}
	})
	t.Run("profile claim", func(t *testing.T) {
		w := newWorld(t)
		a, c := newNode(t), newNode(t)
		w.passAll(a.id, "GPU-A")
		w.book.ObserveGPUs(c.id, []string{"GPU-Z", "GPU-A"}, false)
		if s := w.book.Score(a.id); s.Verified || !s.Conflict {
			t.Errorf("a: %+v, want unverified in conflict", s)
		}
		if s := w.book.Score(c.id); s.Verified || !s.Conflict {
			t.Errorf("c: %+v, want unverified in conflict", s)
		}
		if _, ok := w.book.Scores()[c.id]; !ok {
			t.Errorf("Scores() lacks the observed supplier")
		}
		w.book.ObserveGPUs(c.id, nil, false)
		if s := w.book.Score(a.id); !s.Verified || s.Conflict {
			t.Errorf("after the claim is withdrawn: %+v, want verified", s)
		}
	})
	t.Run("untrusted proofs do not conflict", func(t *testing.T) {
		w := newWorld(t)
		a, sybil, victim := newNode(t), newNode(t), newNode(t)
		w.passAll(victim.id, "GPU-V")
		w.add(sybil, a.id, true, "GPU-V")
		if s := w.book.Score(victim.id); !s.Verified || s.Conflict {
			t.Errorf("victim: %+v; an untrusted attester's proof must not make a conflict", s)
		}
	})
}

func TestUptime(t *testing.T) {
	w := newBare(t)
	x, sybil := newNode(t), newNode(t)
	for i, up := range []bool{true, true, true, false} {
		w.book.Add(attest(t, w.p, x.id, KindUptime, up, w.clk.Now().Add(time.Duration(i)*time.Millisecond)))
	}
	w.book.Add(attest(t, sybil, x.id, KindUptime, false, w.clk.Now()))
	s := w.book.Score(x.id)
	if s.Pings != 4 {
		t.Errorf("Pings = %d, want 4 (the sybil's ping does not count)", s.Pings)
	}
	if math.Abs(s.Uptime-0.75) > 1e-6 {
		t.Errorf("Uptime = %.6f, want 0.75", s.Uptime)
	}
	if s.Reputation != 0.5 || s.Passes != 0 {
		t.Errorf("uptime pings changed the challenge record: %+v", s)
	}
	// A day later, an answered ping weighs twice the old ones.
	w.clk.Advance(DefaultHalfLife)
	w.book.Add(attest(t, w.p, x.id, KindUptime, true, w.clk.Now()))
	if got, want := w.book.Score(x.id).Uptime, (1.5+1)/(2+1.0); math.Abs(got-want) > 1e-6 {
		t.Errorf("Uptime = %.6f, want %.6f", got, want)
	}
}

func TestAddDedupAndRetention(t *testing.T) {
	w := newWorld(t)
	x := newNode(t)
	a := w.add(w.p, x.id, true)
	if w.book.Add(a) {
		t.Errorf("Add of a kept attestation = true")
	}
	if w.book.Add(nil) {
		t.Errorf("Add(nil) = true")
	}
	n := w.book.Len()
	w.clk.Advance(DefaultRetention + time.Hour)
	if w.book.Add(a) {
		t.Errorf("Add of an attestation past retention = true")
	}
	w.book.Score(x.id)
	if w.book.Len() != 0 {
		t.Errorf("Len = %d past retention (was %d), want 0", w.book.Len(), n)
	}
}

func TestMaxAttestations(t *testing.T) {
	clk := newClock()
	self, x := newNode(t), newNode(t)
	s := store.NewMemory(store.WithClock(clk.Now))
	b, err := Open(s, self.id, Config{Now: clk.Now, MaxAttestations: 10, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	var first *Attestation
	for i := range 11 {
		a := attest(t, self, x.id, KindChallenge, true, clk.Now())
		if i == 0 {
			first = a
		}
		b.Add(a)
		clk.Advance(time.Second)
	}
	if b.Len() != 9 {
		t.Errorf("Len = %d after 11 adds with a cap of 10, want 9 (90%%)", b.Len())
	}
	if _, err := s.Get(ksAttestations, first.ID[:]); err == nil {
		t.Errorf("the oldest attestation is still in the store")
	}
}

func TestOwnAttestationsCount(t *testing.T) {
	clk := newClock()
	self, x := newNode(t), newNode(t)
	b, err := Open(store.NewMemory(), self.id, Config{Now: clk.Now, MinAttesters: 1, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	b.Add(attest(t, self, x.id, KindChallenge, true, clk.Now()))
	if s := b.Score(x.id); !s.Verified || s.Reputation <= DefaultFloor {
		t.Errorf("own pass with MinAttesters 1: %+v, want verified", s)
	}
}

func TestOpenConfigErrors(t *testing.T) {
	id := newNode(t).id
	tests := []struct {
		name string
		self peer.ID
		cfg  Config
	}{
		{"empty self", "", Config{}},
		{"alpha over 1", id, Config{Alpha: 1.5}},
		{"alpha negative", id, Config{Alpha: -0.1}},
		{"alpha NaN", id, Config{Alpha: math.NaN()}},
		{"negative half-life", id, Config{HalfLife: -time.Hour}},
		{"negative min attesters", id, Config{MinAttesters: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(store.NewMemory(), tt.self, tt.cfg); err == nil {
				t.Errorf("Open accepted %+v", tt.cfg)
			}
		})
	}
}

func TestPersistenceAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	bs, err := store.OpenBadger(dir, store.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorldIn(t, bs)
	h, bad := newNode(t), newNode(t)
	w.passAll(h.id, "GPU-H")
	w.add(w.p, bad.id, false)
	before := w.book.Scores()
	n := w.book.Len()
	if err := bs.Close(); err != nil {
		t.Fatal(err)
	}

	bs, err = store.OpenBadger(dir, store.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	// A record that does not open is dropped on load.
	if err := bs.Put(ksAttestations, []byte("junk"), []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	b, err := Open(bs, w.p.id, Config{Now: w.clk.Now, Log: quietLog()})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if b.Len() != n {
		t.Errorf("reopened book holds %d attestations, want %d", b.Len(), n)
	}
	if _, err := bs.Get(ksAttestations, []byte("junk")); err == nil {
		t.Errorf("a bad stored record was kept")
	}
	after := b.Scores()
	for _, id := range []peer.ID{h.id, bad.id} {
		x, y := before[id], after[id]
		if x != y {
			t.Errorf("%s: before %+v, after reopen %+v", id, x, y)
		}
	}
	if !after[h.id].Verified || after[bad.id].Reputation >= DefaultFloor {
		t.Errorf("after reopen: honest %+v, failed %+v", after[h.id], after[bad.id])
	}
	// Past the retention, reopening forgets them (Badger's TTL runs on
	// the wall clock, so the book checks the age itself).
	w.clk.Advance(DefaultRetention + time.Minute)
	b, err = Open(bs, w.p.id, Config{Now: w.clk.Now, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("past retention: %d attestations loaded, want 0", b.Len())
	}
}

func TestConcurrentUse(t *testing.T) {
	w := newWorld(t)
	subjects := newNodes(t, 4)
	atts := make([]*Attestation, 0, 40)
	for i := range 40 {
		atts = append(atts, attest(t, w.cs[i%3], subjects[i%4].id, KindChallenge, i%5 != 0, w.clk.Now()))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(atts); i += 4 {
				w.book.Add(atts[i])
				w.book.Score(subjects[i%4].id)
				w.book.ObserveGPUs(subjects[g].id, []string{"GPU-" + subjects[g].id.String()}, false)
				_ = w.book.Scores()
				_ = w.book.Conflicts()
			}
		})
	}
	wg.Wait()
	if got := w.book.Len(); got != 4+len(atts) {
		t.Errorf("Len = %d, want %d", got, 4+len(atts))
	}
}

func TestScoreProvenAndUptime(t *testing.T) {
	for _, tt := range []struct {
		name   string
		s      Score
		proven bool
	}{
		{"unknown", neutral, false},
		{"verified", Score{Reputation: 0.9, Verified: true}, true},
		{"passed, above the floor", Score{Reputation: DefaultFloor + 0.1, Passes: 1}, true},
		{"passed, at the floor", Score{Reputation: DefaultFloor, Passes: 1}, false},
		{"above the floor, never challenged", Score{Reputation: 0.9}, false},
		{"verified, in a UUID conflict", Score{Reputation: 0.9, Verified: true, Conflict: true}, false},
	} {
		if got := tt.s.Proven(); got != tt.proven {
			t.Errorf("%s: Proven() = %v, want %v", tt.name, got, tt.proven)
		}
	}
	if u := (Score{Uptime: 1}).UptimePct(); u != nil {
		t.Errorf("UptimePct without pings = %v, want nil", *u)
	}
	if u := (Score{Uptime: 0.25, Pings: 4}).UptimePct(); u == nil || *u != 25 {
		t.Errorf("UptimePct of 0.25 = %v, want 25", u)
	}
}

// TestSimulatedPassesProveNothingReal: passes of simulated GPUs make a
// supplier verified and proven only while its profile claims simulated
// GPUs only; claiming real GPUs (or an unseen profile) takes both away
// until it passes on real ones.
func TestSimulatedPassesProveNothingReal(t *testing.T) {
	w := newWorld(t)
	s := newNode(t)
	for _, c := range w.cs {
		m := challengeMsg(s.id, true, w.clk.Now())
		m.GpuUuids, m.Simulated = []string{"GPU-sim-00"}, true
		a, err := OpenAttestation(seal(t, m, c), w.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		w.book.Add(a)
	}
	check := func(when string, wantVerified bool) {
		t.Helper()
		sc := w.book.Score(s.id)
		if !sc.SimulatedOnly || sc.Verified != wantVerified || sc.Proven() != wantVerified {
			t.Errorf("%s: SimulatedOnly %v, Verified %v, Proven %v; want true, %v, %v", when, sc.SimulatedOnly, sc.Verified, sc.Proven(), wantVerified, wantVerified)
		}
		if w.book.Proven(s.id) != sc.Proven() {
			t.Errorf("%s: Book.Proven %v, Score.Proven %v", when, w.book.Proven(s.id), sc.Proven())
		}
	}
	check("profile not seen", false)
	w.book.ObserveGPUs(s.id, []string{"GPU-sim-00"}, true)
	check("profile of simulated GPUs", true)
	w.book.ObserveGPUs(s.id, []string{"GPU-sim-00"}, false)
	check("the same UUID now claimed as a real GPU", false)
	// A pass on real hardware proves it again.
	w.clk.Advance(time.Minute)
	w.passAll(s.id, "GPU-sim-00")
	if sc := w.book.Score(s.id); sc.SimulatedOnly || !sc.Verified || !sc.Proven() {
		t.Errorf("after passes on real GPUs: %+v, want verified and proven", sc)
	}
}
