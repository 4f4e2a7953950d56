package challenge

import (
	"context"
	"errors"
	"os"
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
