package challenge

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
)

func simMem(t testing.TB, slug string) MemParams {
	prof, ok := catalog.Lookup(slug)
	if !ok {
		t.Fatalf("no profile %s", slug)
	}
	return SimMemParams(prof, 0)
}

func TestMemHonestPassesAndLiesFail(t *testing.T) {
	ctx := context.Background()
	p := simMem(t, "t4")
	p.Rounds = 64
	seed, sigma0, check := seedOf("mem"), seedOf("sigma"), seedOf("check")
	m, err := NewMemProver(ctx, seed, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.HeldBytes() != p.Bytes() {
		t.Errorf("held %d, want %d", m.HeldBytes(), p.Bytes())
	}
	resp, err := m.Respond(ctx, sigma0)
	if err != nil {
		t.Fatal(err)
	}
	if err := MemVerify(seed, p, sigma0, check, resp, 0, 0); err != nil {
		t.Fatalf("honest memory proof: %v", err)
	}
	// A prover that regenerates is exact: it passes all but the deadline.
	cheat, _ := NewMemProver(ctx, seed, p, 0.8)
	cresp, _ := cheat.Respond(ctx, sigma0)
	if err := MemVerify(seed, p, sigma0, check, cresp, 0, 0); err != nil {
		t.Fatalf("regenerating prover's digests: %v", err)
	}
	if err := MemVerify(seed, p, sigma0, check, cresp, time.Second, time.Millisecond); !errors.Is(err, ErrMemDeadline) {
		t.Errorf("late answer: got %v, want ErrMemDeadline", err)
	}
	// A prover that makes up the digests of the 20% it dropped.
	lie := MemResponse{Digests: make([][]uint64, p.Rounds)}
	for s, d := range resp.Digests {
		lie.Digests[s] = append([]uint64(nil), d...)
		for j := 13; j < 16; j++ {
			lie.Digests[s][j]++
		}
	}
	if err := MemVerify(seed, p, sigma0, check, lie, 0, 0); !errors.Is(err, ErrMemDigest) {
		t.Errorf("made-up digests: got %v, want ErrMemDigest", err)
	}
	// Wrong answer to a different sigma.
	if err := MemVerify(seed, p, seedOf("other sigma"), check, resp, 0, 0); !errors.Is(err, ErrMemDigest) {
		t.Errorf("answer to another chain key: got %v, want ErrMemDigest", err)
	}
	short := MemResponse{Digests: resp.Digests[1:]}
	if err := MemVerify(seed, p, sigma0, check, short, 0, 0); !errors.Is(err, ErrMalformed) {
		t.Errorf("too few rounds: got %v, want ErrMalformed", err)
	}
	ragged := MemResponse{Digests: append([][]uint64{resp.Digests[0][:3]}, resp.Digests[1:]...)}
	if err := MemVerify(seed, p, sigma0, check, ragged, 0, 0); !errors.Is(err, ErrMalformed) {
		t.Errorf("short round: got %v, want ErrMalformed", err)
	}
	if err := MemVerify(seed, MemParams{}, sigma0, check, resp, 0, 0); !errors.Is(err, ErrParams) {
		t.Errorf("zero params: got %v, want ErrParams", err)
	}
}

// TestMemCheatMissesDeadline times a prover that keeps 80% of its buffers
// against the deadline from the challenger's own calibration, and an
// honest one against the same deadline. GPUMESH_MEM_TRIALS sets the
// number of trials (default 5).
func TestMemCheatMissesDeadline(t *testing.T) {
	trials := 5
	if v, err := strconv.Atoi(os.Getenv("GPUMESH_MEM_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	ctx := context.Background()
	for _, slug := range []string{"t4", "h100-sxm"} {
		p := simMem(t, slug)
		cal := time.Duration(1 << 62)
		for range 3 {
			d, err := MemCalibrate(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			cal = min(cal, d)
		}
		deadline := MemSimDeadline(cal)
		var caught, falseAlarms int
		var cheatTime, honestTime time.Duration
		for i := range trials {
			seed, sigma0 := seedOf("mem trial", slug, i), seedOf("sigma", slug, i)
			for _, kept := range []float64{1, 0.8} {
				m, err := NewMemProver(ctx, seed, p, kept)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				resp, err := m.Respond(ctx, sigma0)
				elapsed := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				err = MemVerify(seed, p, sigma0, seedOf("check", i), resp, elapsed, deadline)
				if kept == 1 {
					honestTime += elapsed
					if err != nil {
						falseAlarms++
					}
				} else {
					cheatTime += elapsed
					if errors.Is(err, ErrMemDeadline) || errors.Is(err, ErrMemDigest) {
						caught++
					}
				}
			}
		}
		t.Logf("%s sim memory %d×%d B, %d rounds: calibrated %v, deadline %v; honest mean %v, false alarms %d/%d; mem=0.8 mean %v, caught %d/%d",
			slug, p.Buffers, p.BufferBytes, p.Rounds, cal.Round(time.Microsecond), deadline.Round(time.Microsecond),
			(honestTime / time.Duration(trials)).Round(time.Microsecond), falseAlarms, trials,
			(cheatTime / time.Duration(trials)).Round(time.Microsecond), caught, trials)
		if caught < trials {
			t.Errorf("%s: mem=0.8 caught in %d of %d trials", slug, caught, trials)
		}
	}
}

func BenchmarkMemRespond(b *testing.B) {
	ctx := context.Background()
	p := simMem(b, "h100-sxm")
	for _, kept := range []float64{1, 0.8} {
		b.Run("kept="+strconv.FormatFloat(kept, 'g', -1, 64), func(b *testing.B) {
			m, err := NewMemProver(ctx, seedOf("bench"), p, kept)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := m.Respond(ctx, seedOf("sigma")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChaCha8 measures the rate at which one core generates a
// buffer's stream: the rate at which a prover that dropped a buffer
// regenerates a window (MemRegenRate is an upper bound on it).
func BenchmarkChaCha8(b *testing.B) {
	buf := make([]byte, 4<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		FillMemBuffer(buf, seedOf("chacha8"), 0)
	}
}

// BenchmarkMemRoundHost measures the host's part of one round per buffer
// (its offset and ρ drawn, its digest hashed, the next chain key), which
// MemBufferOverhead allows for; the fold itself is not included.
func BenchmarkMemRoundHost(b *testing.B) {
	prof, _ := catalog.Lookup("h200")
	p := RealMemParams(prof)
	offs, rhos, d := make([]int, p.Buffers), make([]uint64, p.Buffers), make([]uint64, p.Buffers)
	sigma := seedOf("host")
	for b.Loop() {
		memOffsets(offs, sigma, 1, p)
		memRhos(rhos, sigma, 1)
		for j := range d {
			d[j] = memDigest(sigma, 1, j, rhos[j])
		}
		sigma = memNext(sigma, 1, d)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(p.Buffers), "ns/buffer")
}

// naiveMem is a MemBackend written apart from the CPU one, as a GPU
// backend is: it folds term by term (memFoldNaive), at the point it is
// given plus shift.
type naiveMem struct {
	bufs   [][]byte
	shift  uint64
	closed bool
}

func (n *naiveMem) FoldRound(_ context.Context, offs []int, window int, rhos, out []uint64) error {
	for j, b := range n.bufs {
		out[j] = memFoldNaive(b[offs[j]:offs[j]+window], rhos[j]+n.shift)
	}
	return nil
}
func (n *naiveMem) HeldBytes() int64 { return int64(len(n.bufs) * len(n.bufs[0])) }
func (n *naiveMem) Close() error     { n.closed = true; return nil }

// TestMemProverOnAnyBackend: a prover over another MemBackend, filled
// with FillMemBuffer, gives the CPU prover's digests, which verify; one
// that folds at another point fails the spot checks.
func TestMemProverOnAnyBackend(t *testing.T) {
	ctx := context.Background()
	p := MemParams{Buffers: 5, BufferBytes: 4096, WindowBytes: 512, Rounds: 64, Checks: 32}
	seed, sigma0 := seedOf("backend"), seedOf("backend sigma")
	cpu, err := NewMemProver(ctx, seed, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, err := cpu.Respond(ctx, sigma0)
	if err != nil {
		t.Fatal(err)
	}
	for _, shift := range []uint64{0, 1} {
		nb := &naiveMem{bufs: make([][]byte, p.Buffers), shift: shift}
		for j := range nb.bufs {
			nb.bufs[j] = make([]byte, p.BufferBytes)
			FillMemBuffer(nb.bufs[j], seed, j)
		}
		m, err := NewMemProverOn(nb, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Respond(ctx, sigma0)
		if err != nil {
			t.Fatal(err)
		}
		err = MemVerify(seed, p, sigma0, seedOf("check"), got, 0, 0)
		if shift == 0 {
			if err != nil {
				t.Errorf("a second backend's answer: %v", err)
			}
			for s := range want.Digests {
				if !slices.Equal(got.Digests[s], want.Digests[s]) {
					t.Fatalf("round %d: digests %x, the CPU backend's %x", s, got.Digests[s], want.Digests[s])
				}
			}
		} else if !errors.Is(err, ErrMemDigest) {
			t.Errorf("a backend folding at ρ+1: %v, want ErrMemDigest", err)
		}
		if m.Close(); !nb.closed {
			t.Error("MemProver.Close did not close its backend")
		}
	}
}

// TestMemRhos: the fold points are never 0 or 1 (nor P), and differ
// between buffers, rounds and chain keys.
func TestMemRhos(t *testing.T) {
	seen := map[uint64]bool{}
	rhos := make([]uint64, 64)
	for s := range 64 {
		memRhos(rhos, seedOf("rho", s%2), s/2)
		for _, r := range rhos {
			if r < 2 || r >= P {
				t.Fatalf("ρ = %d outside [2, P)", r)
			}
			if seen[r] {
				t.Fatalf("ρ = %d drawn twice", r)
			}
			seen[r] = true
		}
	}
}

// TestStreamEnteredMidway pins what the memory proof does not stop: a
// prover that kept the ChaCha8 state from part-way through a buffer's
// stream (chacha8rand re-keys itself every 992 bytes; its state is small)
// regenerates a window from there, without what precedes it.
func TestStreamEnteredMidway(t *testing.T) {
	seed := [32]byte{9}
	const j, off, w = 3, 1 << 20, 4096
	c := rand.NewChaCha8(subSeed(seed, labelMemBuf, j))
	for range (off - 8192) / 8 {
		c.Uint64()
	}
	kept, err := c.MarshalBinary() // what an impostor stores
	if err != nil {
		t.Fatal(err)
	}
	var from rand.ChaCha8
	if err := from.UnmarshalBinary(kept); err != nil {
		t.Fatal(err)
	}
	for range 8192 / 8 {
		from.Uint64()
	}
	got := make([]byte, w)
	streamInto(&from, got)
	if want := regenWindow(seed, j, off, w); !bytes.Equal(got, want) {
		t.Fatal("a window regenerated from a kept state differs from the stream's")
	}
}
