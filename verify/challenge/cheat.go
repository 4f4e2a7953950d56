package challenge

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cheat describes an impostor for testnets. The zero Cheat is honest.
type Cheat struct {
	// Slow makes every phase take Slow times its honest time (by sleeping
	// after the work); 0 or 1 is not slow.
	Slow float64
	// Skip is the fraction of rows not computed: they are filled with
	// cheap ChaCha8 junk and committed as if computed, saving that work.
	Skip float64
	// Wrong is the fraction of rows corrupted (one byte flipped) after
	// computing, before the commit.
	Wrong float64
	// Mem is the fraction of the memory-proof buffers kept (see
	// MemProver); the rest is regenerated on demand. 0 keeps all.
	Mem float64
	// Replay answers every challenge with the first challenge's results:
	// later commits return the first roots without computing, and sweeps
	// and openings are answered from the first X_T.
	Replay bool
}

// ParseCheat reads a comma-separated list of slow=F (F ≥ 1), skip=F and
// wrong=F (0 ≤ F ≤ 1), mem=F (0 < F ≤ 1) and replay, as
// `gpumesh node --sim-cheat` takes it. The empty string is the honest
// zero Cheat. Errors wrap ErrBadCheat.
func ParseCheat(s string) (Cheat, error) {
	var c Cheat
	seen := map[string]bool{}
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		key, val, hasVal := strings.Cut(item, "=")
		key = strings.TrimSpace(key)
		if seen[key] {
			return Cheat{}, fmt.Errorf("challenge: cheat %q: %s given twice: %w", s, key, ErrBadCheat)
		}
		seen[key] = true
		if key == "replay" {
			if hasVal {
				return Cheat{}, fmt.Errorf("challenge: cheat %q: replay takes no value: %w", s, ErrBadCheat)
			}
			c.Replay = true
			continue
		}
		if !hasVal {
			return Cheat{}, fmt.Errorf("challenge: cheat %q: %q needs =F (want slow, skip, wrong, mem or replay): %w", s, item, ErrBadCheat)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Cheat{}, fmt.Errorf("challenge: cheat %q: %s=%q is not a number: %w", s, key, val, ErrBadCheat)
		}
		var ok bool
		switch key {
		case "slow":
			c.Slow, ok = f, f >= 1
		case "skip":
			c.Skip, ok = f, f >= 0 && f <= 1
		case "wrong":
			c.Wrong, ok = f, f >= 0 && f <= 1
		case "mem":
			c.Mem, ok = f, f > 0 && f <= 1
		default:
			return Cheat{}, fmt.Errorf("challenge: cheat %q: unknown %q (want slow, skip, wrong, mem or replay): %w", s, key, ErrBadCheat)
		}
		if !ok {
			return Cheat{}, fmt.Errorf("challenge: cheat %q: %s=%v out of range (slow ≥ 1; skip, wrong in [0,1]; mem in (0,1]): %w", s, key, f, ErrBadCheat)
		}
	}
	return c, nil
}

// String is the ParseCheat form of c ("" for the honest Cheat).
func (c Cheat) String() string {
	var parts []string
	add := func(k string, f float64) {
		if f != 0 {
			parts = append(parts, k+"="+strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	add("slow", c.Slow)
	add("skip", c.Skip)
	add("wrong", c.Wrong)
	add("mem", c.Mem)
	if c.Replay {
		parts = append(parts, "replay")
	}
	return strings.Join(parts, ",")
}

// Honest reports whether c cheats in no way.
func (c Cheat) Honest() bool {
	return c.Slow <= 1 && c.Skip == 0 && c.Wrong == 0 && (c.Mem == 0 || c.Mem == 1) && !c.Replay
}

// MemKept is the fraction of memory-proof buffers a prover with c keeps.
func (c Cheat) MemKept() float64 {
	if c.Mem <= 0 || c.Mem > 1 {
		return 1
	}
	return c.Mem
}

// NewCheatProver returns a Prover that computes with a CPUProver and
// cheats as c says (Mem is for NewMemProver and ignored here). With the
// zero Cheat it behaves as NewCPUProver(opts).
func NewCheatProver(c Cheat, opts CPUOptions) Prover {
	inner := NewCPUProver(opts)
	inner.skip, inner.wrong = c.Skip, c.Wrong
	return &cheatProver{inner: inner, slow: c.Slow, replay: c.Replay}
}

// cheatProver adds the Slow and Replay cheats around a CPUProver.
type cheatProver struct {
	inner  *CPUProver
	slow   float64
	replay bool

	mu    sync.Mutex
	first [][32]byte // roots of the first commit, once replaying
}

// Commit implements Prover.
func (c *cheatProver) Commit(ctx context.Context, seeds [][32]byte, p Params) ([][32]byte, error) {
	if c.replay {
		c.mu.Lock()
		first := c.first
		c.mu.Unlock()
		if first != nil {
			return first, nil
		}
	}
	start := time.Now()
	roots, err := c.inner.Commit(ctx, seeds, p)
	if err != nil {
		return nil, err
	}
	if err := c.stall(ctx, time.Since(start)); err != nil {
		return nil, err
	}
	if c.replay {
		c.mu.Lock()
		c.first = roots
		c.mu.Unlock()
	}
	return roots, nil
}

// Sweep implements Prover.
func (c *cheatProver) Sweep(ctx context.Context, gpu int, r []uint64) ([]uint64, error) {
	start := time.Now()
	s, err := c.inner.Sweep(ctx, gpu, r)
	if err != nil {
		return nil, err
	}
	return s, c.stall(ctx, time.Since(start))
}

// Open implements Prover.
func (c *cheatProver) Open(ctx context.Context, gpu int, rows []int) ([]Opening, error) {
	start := time.Now()
	o, err := c.inner.Open(ctx, gpu, rows)
	if err != nil {
		return nil, err
	}
	return o, c.stall(ctx, time.Since(start))
}

// stall sleeps (slow−1)·worked, or until ctx ends.
func (c *cheatProver) stall(ctx context.Context, worked time.Duration) error {
	if c.slow <= 1 {
		return nil
	}
	t := time.NewTimer(time.Duration((c.slow - 1) * float64(worked)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
