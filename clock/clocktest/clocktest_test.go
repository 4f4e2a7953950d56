package clocktest

import (
	"testing"
	"time"
)

// recv waits for a tick, at most limit of real time.
func recv(t *testing.T, ch <-chan time.Time, limit time.Duration) (time.Time, bool) {
	t.Helper()
	select {
	case v := <-ch:
		return v, true
	case <-time.After(limit):
		return time.Time{}, false
	}
}

func TestAdvanceFiresDueTimer(t *testing.T) {
	c := New()
	start := c.Now()
	tm := c.NewTimer(time.Hour)
	if _, ok := recv(t, tm.C(), 50*time.Millisecond); ok {
		t.Fatal("an hour's timer fired at once")
	}
	c.Advance(30 * time.Minute)
	if _, ok := recv(t, tm.C(), 50*time.Millisecond); ok {
		t.Fatal("an hour's timer fired after half an hour")
	}
	c.Advance(30 * time.Minute)
	v, ok := recv(t, tm.C(), 5*time.Second)
	if !ok {
		t.Fatal("an hour's timer did not fire after an hour")
	}
	if v.Sub(start) < time.Hour {
		t.Fatalf("fired at %s after start, want at least 1h", v.Sub(start))
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it live")
	}
}

func TestTimerRunsWithRealTime(t *testing.T) {
	c := New()
	tm := c.NewTimer(20 * time.Millisecond)
	if _, ok := recv(t, tm.C(), 5*time.Second); !ok {
		t.Fatal("a 20 ms timer did not fire without Advance")
	}
}

func TestStoppedAndResetTimers(t *testing.T) {
	c := New()
	tm := c.NewTimer(time.Minute)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported it not live")
	}
	c.Advance(2 * time.Minute)
	if _, ok := recv(t, tm.C(), 50*time.Millisecond); ok {
		t.Fatal("a stopped timer fired")
	}
	if tm.Reset(time.Minute) {
		t.Fatal("Reset of a stopped timer reported it live")
	}
	c.Advance(59 * time.Second)
	if _, ok := recv(t, tm.C(), 50*time.Millisecond); ok {
		t.Fatal("a reset timer fired early")
	}
	c.Advance(time.Second)
	if _, ok := recv(t, tm.C(), 5*time.Second); !ok {
		t.Fatal("a reset timer did not fire")
	}
}

func TestTickerFiresOncePerAdvanceAndKeepsPeriod(t *testing.T) {
	c := New()
	tk := c.NewTicker(time.Minute)
	defer tk.Stop()
	c.Advance(10 * time.Minute)
	if _, ok := recv(t, tk.C(), 5*time.Second); !ok {
		t.Fatal("ticker did not fire")
	}
	if _, ok := recv(t, tk.C(), 50*time.Millisecond); ok {
		t.Fatal("ticker fired twice for one jump: missed ticks should be dropped")
	}
	c.Advance(time.Minute)
	if _, ok := recv(t, tk.C(), 5*time.Second); !ok {
		t.Fatal("ticker did not fire a period later")
	}
	tk.Stop()
	c.Advance(time.Hour)
	if _, ok := recv(t, tk.C(), 50*time.Millisecond); ok {
		t.Fatal("a stopped ticker fired")
	}
}

func TestNowMovesWithAdvance(t *testing.T) {
	c := New()
	before := c.Now()
	c.Advance(time.Hour)
	if d := c.Now().Sub(before); d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("Now moved %s over Advance(1h)", d)
	}
}
