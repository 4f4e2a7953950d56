package challenge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"testing"

	"github.com/gpumesh/gpumesh/catalog"
)

// small are quick sizes with the real K: detection depends on N, K and
// the cheat's fraction, not on T.
var small = Params{N: 136, T: 2, K: RealK}

func seedOf(parts ...any) [32]byte {
	h := sha256.New()
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			h.Write([]byte(v))
		case int:
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(v)))
		}
		h.Write([]byte{0})
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// challengeOutcome runs one full challenge of one GPU against pr and
// returns the verifier's verdict (nil: passed).
func challengeOutcome(t testing.TB, pr Prover, seed [32]byte, p Params) error {
	t.Helper()
	ctx := context.Background()
	roots, err := pr.Commit(ctx, [][32]byte{seed}, p)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	r := DrawVector(seedOf("sweep", seed[:4]), p.N)
	s, err := pr.Sweep(ctx, 0, r)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	rows, err := DrawRows(seedOf("open", string(seed[:8])), p.N, p.K)
	if err != nil {
		t.Fatal(err)
	}
	open, err := pr.Open(ctx, 0, rows)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	v, err := NewVerifier(ctx, seed, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v.VerifyOpenings(ctx, roots[0], r, s, rows, open)
}

func TestHonestProverPasses(t *testing.T) {
	ctx := context.Background()
	pr := NewCPUProver(CPUOptions{Workers: 2})
	seeds := [][32]byte{seedOf("gpu", 0), seedOf("gpu", 1), seedOf("gpu", 2)}
	p := Params{N: 64, T: 3, K: 16}
	roots, err := pr.Commit(ctx, seeds, p)
	if err != nil {
		t.Fatal(err)
	}
	if roots[0] == roots[1] {
		t.Fatal("two gpus with different seeds have the same root")
	}
	for g, seed := range seeds {
		r := DrawVector(seedOf("r", g), p.N)
		s, err := pr.Sweep(ctx, g, r)
		if err != nil {
			t.Fatal(err)
		}
		rows, _ := DrawRows(seedOf("rows", g), p.N, p.K)
		open, err := pr.Open(ctx, g, rows)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range open {
			if err := VerifyRow(seed, p, roots[g], r, s, o); err != nil {
				t.Errorf("gpu %d: honest row %d: %v", g, o.Index, err)
			}
		}
	}
}

func TestEveryWrongRowIsCaught(t *testing.T) {
	ctx := context.Background()
	p := Params{N: 64, T: 2, K: 64}
	seed := seedOf("wrong")
	honest := NewCPUProver(CPUOptions{})
	want, err := honest.compute(ctx, seed, p)
	if err != nil {
		t.Fatal(err)
	}
	cheat, _ := ParseCheat("wrong=0.1")
	pr := NewCheatProver(cheat, CPUOptions{})
	roots, err := pr.Commit(ctx, [][32]byte{seed}, p)
	if err != nil {
		t.Fatal(err)
	}
	r := DrawVector(seedOf("r"), p.N)
	s, _ := pr.Sweep(ctx, 0, r)
	all := make([]int, p.N)
	for i := range all {
		all[i] = i
	}
	open, _ := pr.Open(ctx, 0, all)
	bad := 0
	for _, o := range open {
		err := VerifyRow(seed, p, roots[0], r, s, o)
		isWrong := !bytes.Equal(o.Row, want.Row(o.Index))
		if isWrong {
			bad++
		}
		switch {
		case isWrong && !errors.Is(err, ErrWrongRow):
			t.Errorf("corrupted row %d: got %v, want ErrWrongRow", o.Index, err)
		case !isWrong && err != nil:
			t.Errorf("intact row %d of a cheater: %v", o.Index, err)
		}
	}
	if bad != 6 { // round(0.1·64)
		t.Errorf("%d corrupted rows, want 6", bad)
	}
}

func TestTamperedProofAndSweep(t *testing.T) {
	ctx := context.Background()
	p := Params{N: 40, T: 2, K: 5} // 40 leaves: promoted nodes on the path
	seed := seedOf("tamper")
	pr := NewCPUProver(CPUOptions{})
	roots, _ := pr.Commit(ctx, [][32]byte{seed}, p)
	r := DrawVector(seedOf("r"), p.N)
	s, _ := pr.Sweep(ctx, 0, r)
	open, _ := pr.Open(ctx, 0, []int{0, 7, 31, 32, 39})
	for _, o := range open {
		if err := VerifyRow(seed, p, roots[0], r, s, o); err != nil {
			t.Fatalf("honest row %d: %v", o.Index, err)
		}
		clone := func() Opening {
			return Opening{Index: o.Index, Row: bytes.Clone(o.Row), Proof: append([][32]byte(nil), o.Proof...)}
		}
		cases := map[string]struct {
			o    Opening
			s    []uint64
			want error
		}{}
		c := clone()
		c.Proof[0][5] ^= 1
		cases["proof hash flipped"] = struct {
			o    Opening
			s    []uint64
			want error
		}{c, s, ErrBadProof}
		c = clone()
		c.Proof = append(c.Proof, [32]byte{})
		cases["proof too long"] = struct {
			o    Opening
			s    []uint64
			want error
		}{c, s, ErrBadProof}
		c = clone()
		c.Proof = c.Proof[:len(c.Proof)-1]
		cases["proof too short"] = struct {
			o    Opening
			s    []uint64
			want error
		}{c, s, ErrBadProof}
		c = clone()
		c.Row[3] ^= 0x80
		cases["row flipped"] = struct {
			o    Opening
			s    []uint64
			want error
		}{c, s, ErrBadProof}
		c = clone()
		c.Index = (c.Index + 1) % p.N
		cases["index moved"] = struct {
			o    Opening
			s    []uint64
			want error
		}{c, s, ErrBadProof}
		ts := append([]uint64(nil), s...)
		ts[o.Index] = (ts[o.Index] + 1) % P
		cases["sweep value changed"] = struct {
			o    Opening
			s    []uint64
			want error
		}{clone(), ts, ErrSweepMismatch}
		c = clone()
		c.Row = c.Row[1:]
		cases["short row"] = struct {
			o    Opening
			s    []uint64
			want error
		}{c, s, ErrMalformed}
		for name, tc := range cases {
			if err := VerifyRow(seed, p, roots[0], r, tc.s, tc.o); !errors.Is(err, tc.want) {
				t.Errorf("row %d, %s: got %v, want %v", o.Index, name, err, tc.want)
			}
		}
	}
	// Openings for rows not asked.
	v, _ := NewVerifier(ctx, seed, p, 0)
	if err := v.VerifyOpenings(ctx, roots[0], r, s, []int{0, 7, 31, 32, 38}, open); !errors.Is(err, ErrWrongIndex) {
		t.Errorf("openings for other rows: got %v, want ErrWrongIndex", err)
	}
	if err := v.VerifyOpenings(ctx, roots[0], r, s, []int{0, 7}, open); !errors.Is(err, ErrWrongIndex) {
		t.Errorf("more openings than rows: got %v, want ErrWrongIndex", err)
	}
}

// TestCommitmentTree checks the commitment's tree as PROTOCOL §19.3 gives
// it: leaf(i) = SHA-256(0x00 || uint32 BE i || row), node = SHA-256(0x01
// || left || right), an odd last node promoted; and that each row's proof
// opens it at its index only. (Package merkle tests the tree itself.)
func TestCommitmentTree(t *testing.T) {
	if got, want := leafHash(258, []byte("row")), sha256.Sum256([]byte("\x00\x00\x00\x01\x02row")); got != want {
		t.Errorf("leaf(258, row) = %x, want %x", got, want)
	}
	node := func(l, r [32]byte) [32]byte { return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...)) }
	m := Matrix{N: 3, Data: []byte("abcdefghi")}
	tree, err := buildTree(context.Background(), m, 2)
	if err != nil {
		t.Fatal(err)
	}
	l := [][32]byte{leafHash(0, []byte("abc")), leafHash(1, []byte("def")), leafHash(2, []byte("ghi"))}
	if got, want := tree.Root(), node(node(l[0], l[1]), l[2]); got != want {
		t.Errorf("3-row root = %x, want %x", got, want)
	}
	v := &Verifier{p: Params{N: 3}}
	r, s := []uint64{1, 2, 3}, make([]uint64, 3)
	for i := range 3 {
		s[i] = dotRow(m.Row(i), r)
	}
	for i := range 3 {
		o := Opening{Index: i, Row: m.Row(i), Proof: tree.Proof(i)}
		if err := v.cheapChecks(tree.Root(), r, s, o); err != nil {
			t.Errorf("row %d: %v", i, err)
		}
		o.Index = (i + 1) % 3
		if err := v.cheapChecks(tree.Root(), r, s, o); !errors.Is(err, ErrBadProof) {
			t.Errorf("row %d opened at %d: got %v, want ErrBadProof", i, o.Index, err)
		}
	}
}

func TestDotRowMatchesBigInt(t *testing.T) {
	for _, n := range []int{1, 8, 255, 4096, MaxN} {
		row := make([]byte, n)
		fillStream(row, seedOf("row", n))
		for i := range min(n, 64) {
			row[i] = 255
		}
		r := DrawVector(seedOf("vec", n), n)
		for i := range min(n, 64) {
			r[i] = P - 1
		}
		sum, bp := new(big.Int), new(big.Int).SetUint64(P)
		for j := range row {
			sum.Add(sum, new(big.Int).Mul(big.NewInt(int64(row[j])), new(big.Int).SetUint64(r[j])))
		}
		if got, want := dotRow(row, r), sum.Mod(sum, bp).Uint64(); got != want {
			t.Errorf("n=%d: dotRow = %d, want %d", n, got, want)
		}
	}
	if got := reduce128(1<<60, math.MaxUint64); got != new(big.Int).Mod(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1<<60), 64), new(big.Int).SetUint64(math.MaxUint64)), big.NewInt(P)).Uint64() {
		t.Errorf("reduce128 wrong: %d", got)
	}
}

func TestDraws(t *testing.T) {
	r1, r2 := DrawVector(seedOf("x"), 1000), DrawVector(seedOf("x"), 1000)
	for i := range r1 {
		if r1[i] != r2[i] || r1[i] >= P {
			t.Fatalf("r[%d] = %d, %d", i, r1[i], r2[i])
		}
	}
	rows, err := DrawRows(seedOf("y"), 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, i := range rows {
		if i < 0 || i >= 100 || seen[i] {
			t.Fatalf("bad or repeated row %d", i)
		}
		seen[i] = true
	}
	if _, err := DrawRows(seedOf("y"), 10, 11); !errors.Is(err, ErrParams) {
		t.Errorf("11 of 10 rows: %v", err)
	}
}

func TestReplayIsCaught(t *testing.T) {
	c, _ := ParseCheat("replay")
	pr := NewCheatProver(c, CPUOptions{})
	ctx := context.Background()
	first, _ := pr.Commit(ctx, [][32]byte{seedOf("first")}, small)
	if err := challengeOutcome(t, pr, seedOf("second"), small); !errors.Is(err, ErrWrongRow) {
		t.Errorf("replayed answer: got %v, want ErrWrongRow", err)
	}
	again, _ := pr.Commit(ctx, [][32]byte{seedOf("third")}, small)
	fresh, _ := NewCPUProver(CPUOptions{}).Commit(ctx, [][32]byte{seedOf("third")}, small)
	if again[0] != first[0] || again[0] == fresh[0] {
		t.Errorf("replay roots: first %x, again %x, fresh %x", first[0][:4], again[0][:4], fresh[0][:4])
	}
}

// TestDetectionRates runs 200 challenges per cheat at the simulated N
// with the real K (T = 2: detection does not depend on T) and reports the
// detection and false-alarm rates.
func TestDetectionRates(t *testing.T) {
	const trials = 200
	p := Params{N: simH100(t).N, T: 2, K: RealK}
	for _, tc := range []struct {
		cheat   string
		minRate float64 // least detection rate; 0 for honest (max false alarms 0)
	}{
		{"", 0},
		{"skip=0.1", 0.999},
		{"wrong=0.1", 0.999},
		{"skip=0.02", 0}, // reported only: 1−0.98^66 ≈ 74%
		{"replay", 1},
	} {
		c, err := ParseCheat(tc.cheat)
		if err != nil {
			t.Fatal(err)
		}
		pr := NewCheatProver(c, CPUOptions{})
		if c.Replay { // the challenge a replayer answers with
			if _, err := pr.Commit(context.Background(), [][32]byte{seedOf("first")}, p); err != nil {
				t.Fatal(err)
			}
		}
		caught := 0
		for i := range trials {
			if err := challengeOutcome(t, pr, seedOf("trial", tc.cheat, i), p); err != nil {
				caught++
			}
		}
		rate := float64(caught) / trials
		t.Logf("cheat %-10q n=%d k=%d: caught %d of %d (%.1f%%)", tc.cheat, p.N, p.K, caught, trials, 100*rate)
		if c.Honest() && caught != 0 {
			t.Errorf("honest prover failed %d of %d challenges", caught, trials)
		}
		if rate < tc.minRate {
			t.Errorf("cheat %q caught in %.1f%%, want ≥ %.1f%%", tc.cheat, 100*rate, 100*tc.minRate)
		}
	}
	// At real sizes (N = 32768, 3277 rows skipped), the chance that all
	// 66 opened rows avoid them.
	miss := 1.0
	for i := range RealK {
		miss *= float64(RealN-3277-i) / float64(RealN-i)
	}
	t.Logf("skip=0.1 at n=%d k=%d: missed with probability %.5f", RealN, RealK, miss)
	if miss > 0.001 {
		t.Errorf("skip=0.1 at real size missed with probability %v > 0.001", miss)
	}
}

func TestParamsAndCosts(t *testing.T) {
	for _, prof := range catalog.Profiles() {
		rp := RealParams(prof)
		if err := rp.Validate(); err != nil {
			t.Errorf("%s: real params %+v: %v", prof.Slug, rp, err)
		}
		if sec := ExpectedSeconds(prof, rp); sec < 5 || sec > 15 {
			t.Errorf("%s: real challenge expected %.1f s, want 5–15", prof.Slug, sec)
		}
		if r := CostRatio(rp); r >= 0.01 {
			t.Errorf("%s: real cost ratio %.4f ≥ 1%%", prof.Slug, r)
		}
		sp := SimParams(prof, 0)
		if err := sp.Validate(); err != nil {
			t.Errorf("%s: sim params %+v: %v", prof.Slug, sp, err)
		}
		if sp.N != RealN/DefaultSimScale || sp.K != rp.K {
			t.Errorf("%s: sim params %+v from real %+v", prof.Slug, sp, rp)
		}
		b := RealTimeBound(prof, rp)
		t.Logf("%-10s real n=%d T=%3d k=%d expect %.1fs bound [%v, %v] ratio %.4f%% | sim n=%d T=%d ratio %.1f%% | mem real %d×%dMiB sim %d×%dKiB",
			prof.Slug, rp.N, rp.T, rp.K, ExpectedSeconds(prof, rp), b.Min.Round(1e7), b.Max.Round(1e7), 100*CostRatio(rp),
			sp.N, sp.T, 100*CostRatio(sp), RealMemParams(prof).Buffers, RealMemParams(prof).BufferBytes>>20,
			SimMemParams(prof, 0).Buffers, SimMemParams(prof, 0).BufferBytes>>10)
	}
	h100, _ := catalog.Lookup("h100-sxm")
	if got := RealParams(h100).T; got != 56 {
		t.Errorf("h100 real T = %d, want 56 (10 s at η = 0.2 of 1978 TOPS)", got)
	}
	for _, bad := range []Params{{N: 0, T: 1, K: 1}, {N: 12, T: 1, K: 1}, {N: MaxN + 8, T: 1, K: 1}, {N: 64, T: 0, K: 1}, {N: 64, T: MaxT + 1, K: 1}, {N: 64, T: 1, K: 65}, {N: 64, T: 1, K: 0}} {
		if err := bad.Validate(); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: got %v, want ErrParams", bad, err)
		}
	}
	tb := TimeBound{Min: 1e9, Max: 2e9}
	if tb.Check(5e8) == nil || !errors.Is(tb.Check(5e8), ErrTooFast) || !errors.Is(tb.Check(3e9), ErrTooSlow) || tb.Check(15e8) != nil {
		t.Error("TimeBound.Check")
	}
}

func TestProverErrors(t *testing.T) {
	ctx := context.Background()
	pr := NewCPUProver(CPUOptions{})
	if _, err := pr.Sweep(ctx, 0, nil); !errors.Is(err, ErrNotCommitted) {
		t.Errorf("sweep before commit: %v", err)
	}
	if _, err := pr.Commit(ctx, nil, small); !errors.Is(err, ErrMalformed) {
		t.Errorf("commit of no gpus: %v", err)
	}
	if _, err := pr.Commit(ctx, [][32]byte{{}}, Params{N: 7, T: 1, K: 1}); !errors.Is(err, ErrParams) {
		t.Errorf("commit n=7: %v", err)
	}
	if _, err := pr.Commit(ctx, [][32]byte{{}}, small); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Sweep(ctx, 0, make([]uint64, 3)); !errors.Is(err, ErrMalformed) {
		t.Errorf("short sweep vector: %v", err)
	}
	if _, err := pr.Open(ctx, 0, []int{small.N}); !errors.Is(err, ErrMalformed) {
		t.Errorf("open row n: %v", err)
	}
	if _, err := pr.Open(ctx, 1, []int{0}); !errors.Is(err, ErrNotCommitted) {
		t.Errorf("open gpu 1 of 1: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pr.Commit(cctx, [][32]byte{{}}, small); !errors.Is(err, context.Canceled) {
		t.Errorf("commit with a cancelled context: %v", err)
	}
}

func TestParseCheat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Cheat
		ok   bool
	}{
		{"", Cheat{}, true},
		{"slow=2", Cheat{Slow: 2}, true},
		{"skip=0.1", Cheat{Skip: 0.1}, true},
		{"wrong=0.05", Cheat{Wrong: 0.05}, true},
		{"mem=0.8", Cheat{Mem: 0.8}, true},
		{"replay", Cheat{Replay: true}, true},
		{" slow=3 , replay,mem=0.5", Cheat{Slow: 3, Replay: true, Mem: 0.5}, true},
		{"slow=0.5", Cheat{}, false},
		{"skip=1.5", Cheat{}, false},
		{"mem=0", Cheat{}, false},
		{"wrong=-0.1", Cheat{}, false},
		{"slow=NaN", Cheat{}, false},
		{"slow=inf", Cheat{}, false},
		{"fast=2", Cheat{}, false},
		{"slow", Cheat{}, false},
		{"replay=1", Cheat{}, false},
		{"slow=2,slow=3", Cheat{}, false},
		{"skip=x", Cheat{}, false},
	} {
		got, err := ParseCheat(tc.in)
		if tc.ok != (err == nil) || (tc.ok && got != tc.want) {
			t.Errorf("ParseCheat(%q) = %+v, %v; want %+v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadCheat) {
			t.Errorf("ParseCheat(%q): error %v does not wrap ErrBadCheat", tc.in, err)
		}
		if tc.ok {
			if back, err := ParseCheat(got.String()); err != nil || back != got {
				t.Errorf("round trip of %q: %q -> %+v, %v", tc.in, got.String(), back, err)
			}
		}
	}
	if !(Cheat{}).Honest() || (Cheat{Replay: true}).Honest() || !(Cheat{Slow: 1, Mem: 1}).Honest() {
		t.Error("Honest")
	}
}

func FuzzParseCheat(f *testing.F) {
	for _, s := range []string{"", "slow=2", "skip=0.1,wrong=0.2", "mem=0.8,replay", "slow=1e308", "=,", "replay=", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCheat(s)
		if err != nil {
			return
		}
		back, err := ParseCheat(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseCheat(%q) = %+v; String %q parses to %+v, %v", s, c, c.String(), back, err)
		}
	})
}

// FuzzVerifyRow feeds VerifyRow arbitrary openings, sweep values and
// sizes: it must return an error or nil, never panic, and accept only the
// honest row.
func FuzzVerifyRow(f *testing.F) {
	ctx := context.Background()
	p := Params{N: 16, T: 2, K: 4}
	seed := seedOf("fuzz")
	pr := NewCPUProver(CPUOptions{Workers: 1})
	roots, _ := pr.Commit(ctx, [][32]byte{seed}, p)
	r := DrawVector(seedOf("fuzz-r"), p.N)
	s, _ := pr.Sweep(ctx, 0, r)
	open, _ := pr.Open(ctx, 0, []int{0, 5, 15})
	for _, o := range open {
		var proof []byte
		for _, h := range o.Proof {
			proof = append(proof, h[:]...)
		}
		f.Add(16, 2, o.Index, o.Row, proof, s[o.Index], 16)
	}
	f.Add(-8, -1, -1, []byte{}, []byte{1, 2, 3}, uint64(math.MaxUint64), 0)
	f.Add(8, 9999, 1<<40, []byte("x"), make([]byte, 32*40), uint64(P), 3)
	f.Fuzz(func(t *testing.T, n, tt, index int, row, proof []byte, sv uint64, slen int) {
		fp := Params{N: n % 41, T: tt % 5, K: 1} // small work, any validity
		if fp.N == p.N && fp.T == p.T {
			fp = p
		}
		if len(proof) > 64*32 {
			proof = proof[:64*32]
		}
		var pf [][32]byte
		for len(proof) >= 32 {
			pf = append(pf, [32]byte(proof[:32]))
			proof = proof[32:]
		}
		ss := make([]uint64, max(0, min(slen, 64)))
		copy(ss, s)
		if index >= 0 && index < len(ss) {
			ss[index] = sv
		}
		rr := r
		if fp.N != p.N {
			rr = DrawVector(seed, max(0, fp.N))
		}
		o := Opening{Index: index, Row: row, Proof: pf}
		err := VerifyRow(seed, fp, roots[0], rr, ss, o)
		if err == nil {
			if fp != p || index < 0 || index >= p.N {
				t.Fatalf("accepted an opening for params %+v index %d", fp, index)
			}
			if want := open[0]; index == want.Index && !bytes.Equal(row, want.Row) {
				t.Fatalf("accepted a forged row %d", index)
			}
		}
	})
}
