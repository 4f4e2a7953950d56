package clock_test

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/clock"
)

func TestOffset(t *testing.T) {
	if c := clock.Offset(clock.Real(), 0); c != clock.Real() {
		t.Fatalf("Offset by 0 = %T, want the clock itself", c)
	}
	ahead := clock.Offset(clock.Real(), 30*time.Second)
	before := time.Now()
	got := ahead.Now()
	after := time.Now()
	if got.Before(before.Add(30*time.Second)) || got.After(after.Add(30*time.Second)) {
		t.Fatalf("Now() = %v, want 30 s after a time in [%v, %v]", got, before, after)
	}
	// Timers measure durations: an offset clock's fire after d, not d
	// shifted by the offset.
	behind := clock.Offset(clock.Real(), -time.Hour)
	start := time.Now()
	tm := behind.NewTimer(20 * time.Millisecond)
	<-tm.C()
	if waited := time.Since(start); waited < 20*time.Millisecond || waited > 10*time.Second {
		t.Fatalf("a 20 ms timer of a clock an hour behind fired after %s", waited)
	}
}
