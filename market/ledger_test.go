package market_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/store"
)

// ledgerStore is one store implementation the ledger tests run against.
type ledgerStore struct {
	name string
	// open returns a store whose TTLs follow clk where it can (Badger's
	// follow the wall clock, so clk starts at the real time there).
	open func(t *testing.T, clk *manualClock) store.Store
}

var ledgerStores = []ledgerStore{
	{"memory", func(t *testing.T, clk *manualClock) store.Store {
		s := store.NewMemory(store.WithClock(clk.Now))
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"badger", func(t *testing.T, clk *manualClock) store.Store {
		s, err := store.OpenBadger(t.TempDir())
		if err != nil {
			t.Fatalf("OpenBadger: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// forEachLedgerStore runs fn against every store implementation, with a
// manual clock that starts at the real time.
func forEachLedgerStore(t *testing.T, fn func(t *testing.T, s store.Store, clk *manualClock)) {
	for _, ls := range ledgerStores {
		t.Run(ls.name, func(t *testing.T) {
			clk := &manualClock{t: time.Now()}
			fn(t, ls.open(t, clk), clk)
		})
	}
}

func gpuUUIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("GPU-%s-%04d", prefix, i)
	}
	return out
}

func mustOpenLedger(t *testing.T, s store.Store, gpus map[string][]string, clk *manualClock) *market.Ledger {
	t.Helper()
	l, err := market.OpenLedger(s, gpus, clk.Now)
	if err != nil {
		t.Fatalf("OpenLedger: %v", err)
	}
	return l
}

func TestLedgerConcurrentReserveOneEach(t *testing.T) {
	forEachLedgerStore(t, func(t *testing.T, s store.Store, clk *manualClock) {
		l := mustOpenLedger(t, s, map[string][]string{"h100-sxm": gpuUUIDs("h", 8)}, clk)
		var won, lost atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Go(func() {
				_, err := l.Reserve(testID("lease", i), "h100-sxm", 1, clk.Now().Add(time.Minute))
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, market.ErrInsufficientCapacity):
					lost.Add(1)
				default:
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Reserve: unexpected error %v", err)
		}
		if won.Load() != 8 || lost.Load() != 42 {
			t.Errorf("%d reservations won and %d refused; want 8 and 42", won.Load(), lost.Load())
		}
		if free := l.Free("h100-sxm"); free != 0 {
			t.Errorf("Free = %d, want 0", free)
		}
		held := map[string]bool{}
		for _, r := range l.Reservations() {
			for _, g := range r.GPUs {
				if held[g] {
					t.Errorf("GPU %s reserved twice", g)
				}
				held[g] = true
			}
		}
		if len(held) != 8 {
			t.Errorf("%d GPUs held, want 8", len(held))
		}
	})
}

func TestLedgerRaceForLastGPUs(t *testing.T) {
	forEachLedgerStore(t, func(t *testing.T, s store.Store, clk *manualClock) {
		l := mustOpenLedger(t, s, map[string][]string{"a100-80gb": gpuUUIDs("a", 4)}, clk)
		if _, err := l.Reserve(testID("first"), "a100-80gb", 2, clk.Now().Add(time.Minute)); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		for round := range 20 {
			ids := []market.ID{testID("racer", round, 0), testID("racer", round, 1)}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					_, errs[i] = l.Reserve(ids[i], "a100-80gb", 2, clk.Now().Add(time.Minute))
				})
			}
			wg.Wait()
			winners := 0
			for i, err := range errs {
				switch {
				case err == nil:
					winners++
				case !errors.Is(err, market.ErrInsufficientCapacity):
					t.Fatalf("racer %d: unexpected error %v", i, err)
				}
			}
			if winners != 1 {
				t.Fatalf("round %d: %d racers won the last 2 GPUs, want exactly 1 (errors %v)", round, winners, errs)
			}
			for i, err := range errs {
				if err == nil {
					if err := l.Release(ids[i]); err != nil {
						t.Fatalf("Release: %v", err)
					}
				}
			}
		}
	})
}

func TestLedgerPendingLapses(t *testing.T) {
	forEachLedgerStore(t, func(t *testing.T, s store.Store, clk *manualClock) {
		l := mustOpenLedger(t, s, map[string][]string{"l4": gpuUUIDs("l", 2)}, clk)
		lease := testID("lease")
		if _, err := l.Reserve(lease, "l4", 2, clk.Now().Add(5*time.Second)); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if _, err := l.Reserve(testID("other"), "l4", 1, clk.Now().Add(time.Minute)); !errors.Is(err, market.ErrInsufficientCapacity) {
			t.Fatalf("Reserve with none free: error = %v, want ErrInsufficientCapacity", err)
		} else if want := "model l4: want 1, free 0"; !strings.Contains(err.Error(), want) {
			t.Errorf("Reserve error %q does not say %q", err, want)
		}
		clk.Advance(5 * time.Second) // lapses at Until exactly
		if free := l.Free("l4"); free != 2 {
			t.Errorf("Free after the pending reservation lapsed = %d, want 2", free)
		}
		if got := l.Reservations(); len(got) != 0 {
			t.Errorf("Reservations after lapse = %v, want none", got)
		}
		if _, err := l.Confirm(lease, clk.Now().Add(time.Hour)); !errors.Is(err, market.ErrNoReservation) {
			t.Errorf("Confirm after lapse: error = %v, want ErrNoReservation", err)
		}
		if err := l.Release(lease); !errors.Is(err, market.ErrNoReservation) {
			t.Errorf("Release after lapse: error = %v, want ErrNoReservation", err)
		}
		if _, err := l.Reserve(testID("other"), "l4", 2, clk.Now().Add(time.Minute)); err != nil {
			t.Errorf("Reserve after lapse: %v", err)
		}
	})
}

func TestLedgerConfirmHoldsUntilEnd(t *testing.T) {
	forEachLedgerStore(t, func(t *testing.T, s store.Store, clk *manualClock) {
		l := mustOpenLedger(t, s, map[string][]string{"h100-sxm": gpuUUIDs("h", 4)}, clk)
		lease := testID("lease")
		res, err := l.Reserve(lease, "h100-sxm", 3, clk.Now().Add(5*time.Second))
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if res.State != market.ReservationPending || len(res.GPUs) != 3 {
			t.Fatalf("Reserve = %+v, want pending with 3 GPUs", res)
		}
		clk.Advance(2 * time.Second)
		end := clk.Now().Add(time.Hour)
		conf, err := l.Confirm(lease, end)
		if err != nil {
			t.Fatalf("Confirm: %v", err)
		}
		if conf.State != market.ReservationConfirmed || conf.Until.UnixMilli() != end.UnixMilli() || !slices.Equal(conf.GPUs, res.GPUs) {
			t.Errorf("Confirm = %+v, want confirmed until %v on %v", conf, end, res.GPUs)
		}
		clk.Advance(10 * time.Minute) // well past the confirmation deadline
		if free := l.Free("h100-sxm"); free != 1 {
			t.Errorf("Free during the lease = %d, want 1", free)
		}
		want := []market.Capacity{{Model: "h100-sxm", Total: 4, Reserved: 3, Free: 1}}
		if got := l.Capacity(); !slices.Equal(got, want) {
			t.Errorf("Capacity = %+v, want %+v", got, want)
		}
		clk.Advance(50 * time.Minute) // the lease ends
		if free := l.Free("h100-sxm"); free != 4 {
			t.Errorf("Free after the lease ended = %d, want 4", free)
		}
	})
}

func TestLedgerIdempotentReserveAndRelease(t *testing.T) {
	forEachLedgerStore(t, func(t *testing.T, s store.Store, clk *manualClock) {
		l := mustOpenLedger(t, s, map[string][]string{"h100-sxm": gpuUUIDs("h", 4), "l4": gpuUUIDs("l", 1)}, clk)
		lease := testID("lease")
		first, err := l.Reserve(lease, "h100-sxm", 2, clk.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		again, err := l.Reserve(lease, "h100-sxm", 2, clk.Now().Add(2*time.Minute))
		if err != nil {
			t.Fatalf("Reserve again: %v", err)
		}
		if !slices.Equal(again.GPUs, first.GPUs) || !again.Until.Equal(first.Until) {
			t.Errorf("Reserve again = %+v, want the first reservation %+v", again, first)
		}
		if free := l.Free("h100-sxm"); free != 2 {
			t.Errorf("Free after a repeated Reserve = %d, want 2", free)
		}
		if _, err := l.Reserve(lease, "l4", 1, clk.Now().Add(time.Minute)); err == nil {
			t.Errorf("Reserve of the same lease for another model succeeded")
		}
		if err := l.Release(lease); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if free := l.Free("h100-sxm"); free != 4 {
			t.Errorf("Free after Release = %d, want 4", free)
		}
		if err := l.Release(lease); !errors.Is(err, market.ErrNoReservation) {
			t.Errorf("second Release: error = %v, want ErrNoReservation", err)
		}
		if err := l.Release(testID("never")); !errors.Is(err, market.ErrNoReservation) {
			t.Errorf("Release(unknown): error = %v, want ErrNoReservation", err)
		}
		for _, tc := range []struct {
			name  string
			model string
			count int
			until time.Time
			want  error // nil: any error
		}{
			{"unknown model", "b200", 1, clk.Now().Add(time.Minute), market.ErrInsufficientCapacity},
			{"too many", "h100-sxm", 5, clk.Now().Add(time.Minute), market.ErrInsufficientCapacity},
			{"zero count", "h100-sxm", 0, clk.Now().Add(time.Minute), nil},
			{"until not in the future", "h100-sxm", 1, clk.Now(), nil},
		} {
			_, err := l.Reserve(testID(tc.name), tc.model, tc.count, tc.until)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("%s: Reserve error = %v, want %v", tc.name, err, tc.want)
			}
		}
		if free := l.Free("h100-sxm"); free != 4 {
			t.Errorf("Free after refused reservations = %d, want 4", free)
		}
	})
}

func TestLedgerRestart(t *testing.T) {
	dir := t.TempDir()
	clk := &manualClock{t: time.Now()}
	gpus := map[string][]string{"h100-sxm": gpuUUIDs("h", 8), "l4": gpuUUIDs("l", 2)}
	open := func() (store.Store, *market.Ledger) {
		s, err := store.OpenBadger(dir)
		if err != nil {
			t.Fatalf("OpenBadger: %v", err)
		}
		return s, mustOpenLedger(t, s, gpus, clk)
	}
	s, l := open()
	confirmed, err := l.Reserve(testID("confirmed"), "h100-sxm", 3, clk.Now().Add(5*time.Second))
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if confirmed, err = l.Confirm(confirmed.LeaseID, clk.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	pending, err := l.Reserve(testID("pending"), "h100-sxm", 2, clk.Now().Add(30*time.Minute))
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Reserve(testID("lapsing"), "l4", 2, clk.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	clk.Advance(10 * time.Second) // the l4 reservation lapses while the supplier is down
	s, l = open()
	defer s.Close()
	got := l.Reservations()
	want := []market.Reservation{pending, confirmed} // soonest to lapse first
	if len(got) != len(want) {
		t.Fatalf("after restart Reservations = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.LeaseID != w.LeaseID || g.Model != w.Model || g.State != w.State || !g.Until.Equal(w.Until) || !slices.Equal(g.GPUs, w.GPUs) {
			t.Errorf("after restart reservation %d = %+v, want %+v", i, g, w)
		}
	}
	wantCap := []market.Capacity{
		{Model: "h100-sxm", Total: 8, Reserved: 5, Free: 3},
		{Model: "l4", Total: 2, Reserved: 0, Free: 2},
	}
	if got := l.Capacity(); !slices.Equal(got, wantCap) {
		t.Errorf("after restart Capacity = %+v, want %+v", got, wantCap)
	}
	if _, err := l.Reserve(testID("new"), "h100-sxm", 4, clk.Now().Add(time.Minute)); !errors.Is(err, market.ErrInsufficientCapacity) {
		t.Errorf("Reserve beyond what the restart left free: error = %v, want ErrInsufficientCapacity", err)
	}
	if _, err := l.Confirm(pending.LeaseID, clk.Now().Add(time.Hour)); err != nil {
		t.Errorf("Confirm of a pending reservation after restart: %v", err)
	}
}

func TestLedgerRejectsDuplicateGPU(t *testing.T) {
	_, err := market.OpenLedger(store.NewMemory(), map[string][]string{"a": {"GPU-1"}, "b": {"GPU-1"}}, nil)
	if err == nil {
		t.Errorf("OpenLedger with a GPU under two models succeeded")
	}
}
