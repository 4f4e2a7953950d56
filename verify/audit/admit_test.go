package audit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestPriorityAskedAfterTheCheapChecks: ProverConfig.Priority (which may
// read the lease store) is asked only for a challenge that passed the
// cheap checks, and never while the prover's mutex is held.
func TestPriorityAskedAfterTheCheapChecks(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	var (
		mu     sync.Mutex
		asked  int
		locked bool
		p      *Prover
	)
	ready := make(chan struct{})
	t0 := time.Unix(1_000_000, 0) // stands still: the second challenge is within the gap
	p = Serve(ProverConfig{Host: ph, GPUs: twoT4, Log: quiet(), Now: func() time.Time { return t0 }, Priority: func(peer.ID) bool {
		<-ready
		mu.Lock()
		defer mu.Unlock()
		asked++
		if p.mu.TryLock() {
			p.mu.Unlock()
		} else {
			locked = true
		}
		return false
	}})
	close(ready)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	c := NewChallenger(ch, 0, quiet())
	uuids := []string{"GPU-sim-a", "GPU-sim-b"}
	if _, err := c.Challenge(ctx, ph.ID(), "t4", uuids, true); err != nil {
		t.Fatal(err)
	}
	// Within the gap: refused by a cheap check, Priority not asked.
	if _, err := c.Challenge(ctx, ph.ID(), "t4", uuids, true); !errors.Is(err, ErrBusy) {
		t.Fatalf("within the gap: %v, want busy", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 || locked {
		t.Errorf("Priority asked %d times (want 1: not for a challenge within the gap), under the prover's mutex: %v", asked, locked)
	}
}
