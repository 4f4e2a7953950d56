package market

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBidAnswerersAreBounded: however many bids arrive, no more than the
// workers answer at once, the queue holds the next ones, and the rest are
// dropped and counted; once the answerers are free, every queued bid is
// answered, and they stop with their context.
func TestBidAnswerersAreBounded(t *testing.T) {
	const workers, queue = 3, 5
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		most      int64 // the most bids answered at once
		busy, all atomic.Int64
		release   = make(chan struct{})
	)
	handle := func(ctx context.Context, b *Bid) {
		mu.Lock()
		most = max(most, busy.Add(1))
		mu.Unlock()
		<-release
		busy.Add(-1)
		all.Add(1)
	}
	a := NewBidAnswerers(ctx, workers, queue, handle, func(f func()) { wg.Go(f) }, quietLog())
	accepted := 0
	for range 100 {
		if a.Offer(&Bid{}) {
			accepted++
		}
		if accepted == workers {
			eventually(t, 5*time.Second, "every answerer busy", func() bool { return busy.Load() == workers })
		}
	}
	if want := workers + queue; accepted != want {
		t.Fatalf("accepted %d of 100 bids while answerers were busy, want %d", accepted, want)
	}
	if got := a.Dropped(); got != uint64(100-accepted) {
		t.Fatalf("dropped %d, want %d", got, 100-accepted)
	}
	close(release)
	eventually(t, 5*time.Second, "every accepted bid answered", func() bool { return all.Load() == int64(accepted) })
	mu.Lock()
	defer mu.Unlock()
	if most > workers {
		t.Fatalf("%d bids answered at once, want at most %d", most, workers)
	}
	cancel()
	wg.Wait() // the answerers end with ctx
}
