package audit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/pb"
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

// TestSlowStrangerIsCutOff: a stranger that holds the prover by replying
// slowly (here: not at all after the commit) has its stream reset once
// it held the prover for the share left in the window, long before the
// step's 2 min deadline; a priority challenger is not cut off so.
func TestSlowStrangerIsCutOff(t *testing.T) {
	const (
		window = 20 * time.Second
		share  = 0.1 // 2 s a window
		scale  = 256 // a challenge takes about 0.3 s
	)
	ph, ch := newHost(t), newHost(t)
	held := make(chan time.Duration, 1)
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Scale: scale, Log: quiet(), StrangerShare: share, StrangerWindow: window,
		held: func(from, to time.Time, stranger bool) { held <- to.Sub(from) }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := streamTo(t, ctx, ch, ph, ChallengeProtocol)
	defer s.Reset()
	params, _ := Sizes(mustProfile(t, "t4"), true, scale)
	req := &pb.ChallengeRequest{Model: "t4", GpuUuids: []string{"GPU-sim-a", "GPU-sim-b"}, Seeds: [][]byte{make([]byte, 32), make([]byte, 32)},
		N: uint32(params.N), T: uint32(params.T), K: uint32(params.K), Simulated: true, Scale: scale}
	if err := p2p.WriteMsg(s, req); err != nil {
		t.Fatal(err)
	}
	// Far beyond the 2 s left of the share, far short of a step (2 min):
	// the stranger never sends its sweep request.
	_ = s.SetReadDeadline(time.Now().Add(45 * time.Second))
	var commit pb.Commit
	err := p2p.ReadMsg(s, 1<<20, &commit)
	if err == nil {
		if commit.Refused != "" {
			t.Fatalf("refused: %s", commit.Refused)
		}
		err = p2p.ReadMsg(s, 1<<20, &commit)
	}
	var timeout interface{ Timeout() bool }
	if err == nil || (errors.As(err, &timeout) && timeout.Timeout()) {
		t.Fatalf("a stranger silent after the commit still holds the prover after 45 s (read: %v)", err)
	}
	select {
	case d := <-held:
		t.Logf("the stranger held the prover %v (2 s left of the share)", d)
	case <-ctx.Done():
		t.Fatal("the prover was not released")
	}
}
