package p2p

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

var guardNow = time.UnixMilli(1_800_000_000_000)

func TestReplayTableBounded(t *testing.T) {
	tab := NewReplayTable[int](3)
	now := guardNow
	for i, ttl := range []time.Duration{time.Minute, 3 * time.Minute, 2 * time.Minute, 4 * time.Minute} {
		if !tab.Add(i, now.Add(ttl), now) {
			t.Fatalf("key %d refused", i)
		}
	}
	if n := tab.Len(); n != 3 {
		t.Fatalf("len %d, want 3", n)
	}
	// Key 0, the soonest to expire, was forgotten to make room.
	if !tab.Add(0, now.Add(time.Minute), now) {
		t.Error("key 0 still remembered")
	}
	// 0 pushed out 2 (expiring at 2 min); 1 and 3 remain.
	if tab.Add(1, now.Add(time.Hour), now) || tab.Add(3, now.Add(time.Hour), now) {
		t.Error("a live key was forgotten")
	}
	// At 3 minutes, keys 0 and 1 have expired.
	if !tab.Add(1, now.Add(time.Hour), now.Add(3*time.Minute)) {
		t.Error("expired key 1 still remembered")
	}
	if n := tab.Len(); n != 2 {
		t.Errorf("len %d after expiry, want 2 (keys 1 and 3)", n)
	}
}

func TestAuthorLimitsBounded(t *testing.T) {
	l := NewAuthorLimits(rate.Every(time.Hour), 1, 100)
	for i := range 110 {
		if err := l.Allow(peer.ID(fmt.Sprint(i)), guardNow); err != nil {
			t.Fatalf("author %d: %v", i, err)
		}
	}
	if n := len(l.m); n > 100 {
		t.Errorf("%d limiters kept, want at most 100", n)
	}
}

func TestAuthorLimitsRate(t *testing.T) {
	l := NewAuthorLimits(rate.Every(time.Second), 2, 10)
	a, b := peer.ID("a"), peer.ID("b")
	for i := range 2 {
		if err := l.Allow(a, guardNow); err != nil {
			t.Fatalf("message %d of the burst: %v", i, err)
		}
	}
	if err := l.Allow(a, guardNow); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("over the burst: err = %v, want ErrRateLimited", err)
	}
	if err := l.Allow(b, guardNow); err != nil {
		t.Fatalf("another author: %v", err)
	}
	if err := l.Allow(a, guardNow.Add(time.Second)); err != nil {
		t.Fatalf("after a refill: %v", err)
	}
}

// A valid record over a quota is ignored, not rejected: it costs the
// relay nothing in pubsub's own counters (Network.Penalize does that when
// warranted).
func TestVerdictOverQuotaIgnored(t *testing.T) {
	if v := Verdict(fmt.Errorf("bid: %w", ErrOverQuota)); v != pubsub.ValidationIgnore {
		t.Fatalf("Verdict(over quota) = %v, want ignore", v)
	}
}

func TestPenaltiesDecayAndCap(t *testing.T) {
	now := guardNow
	ps := newPenalties(func() time.Time { return now })
	p := peer.ID("relay")
	if s := ps.score(p); s != 0 {
		t.Fatalf("score of an unpenalised peer = %g", s)
	}
	for range 1000 {
		ps.add(p, 1)
	}
	if s := ps.score(p); s != -maxPenalty {
		t.Fatalf("score after 1000 points = %g, want the cap -%d", s, maxPenalty)
	}
	now = now.Add(penaltyHalfLife)
	if s := ps.score(p); s < -maxPenalty/2-0.001 || s > -maxPenalty/2+0.001 {
		t.Fatalf("score a half-life later = %g, want -%d", s, maxPenalty/2)
	}
	now = now.Add(20 * penaltyHalfLife)
	if s := ps.score(p); s != 0 {
		t.Fatalf("score after it faded = %g, want 0", s)
	}
	for i := range maxPenalised + 1 {
		ps.add(peer.ID(fmt.Sprint("p", i)), float64(i+1))
	}
	if len(ps.m) > maxPenalised {
		t.Fatalf("%d peers tracked, want at most %d", len(ps.m), maxPenalised)
	}
	if s := ps.score(peer.ID("p0")); s != 0 {
		t.Fatalf("the smallest penalty was kept (%g) over the bound", s)
	}
}
