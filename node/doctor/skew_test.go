package doctor

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestSkewRing(t *testing.T) {
	ids := []peer.ID{"peer-a", "peer-b", "peer-c"}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var r SkewRing
	if s := r.Summary(now); s != (SkewSummary{}) {
		t.Fatalf("empty ring: %+v", s)
	}
	// peer-a: its clock 3 s ahead; peer-b: 1 s behind; peer-c: 10 s
	// ahead, but only in an old sample.
	r.Add(ids[2], now.Add(-20*time.Minute+10*time.Second), now.Add(-20*time.Minute))
	r.Add(ids[0], now.Add(-time.Minute+3*time.Second), now.Add(-time.Minute))
	r.Add(ids[1], now.Add(-time.Minute-time.Second), now.Add(-time.Minute))
	if s := r.Summary(now); s.Samples != 2 || s.Peers != 2 || s.Median != time.Second {
		t.Fatalf("two peers: %+v, want the median 1s of 3s and -1s, 2 samples of 2 peers", s)
	}
	// A chatty peer counts once, with its latest sample.
	for i := range 20 {
		at := now.Add(-30*time.Second + time.Duration(i)*time.Second)
		r.Add(ids[1], at.Add(-2*time.Second), at)
	}
	if s := r.Summary(now); s.Samples != 22 || s.Peers != 2 || s.Median != 500*time.Millisecond {
		t.Fatalf("chatty peer: %+v, want the median 0.5s of 3s and -2s, 22 samples of 2 peers", s)
	}
	// The ring is bounded: old samples fall out.
	for range 2 * skewRingSize {
		r.Add(ids[2], now, now)
	}
	if s := r.Summary(now); s.Samples != skewRingSize || s.Peers != 1 || s.Median != 0 {
		t.Fatalf("after a flood: %+v, want %d samples of peer-c only", s, skewRingSize)
	}
}
