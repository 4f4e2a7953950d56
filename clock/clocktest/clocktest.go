// Package clocktest has a clock.Clock that a test moves forward: it runs
// with real time, so real network I/O and the parts that still read
// time.Now keep working, and Advance jumps it ahead, firing every timer
// and ticker that falls due, so a test need not wait a lease's minute out.
package clocktest

import (
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/clock"
)

// Clock is real time plus an offset that only grows. Its zero value is
// not usable; call New.
type Clock struct {
	mu      sync.Mutex
	offset  time.Duration
	waiters map[*waiter]struct{}
}

var _ clock.Clock = (*Clock)(nil)

// New is a clock at real time.
func New() *Clock { return &Clock{waiters: map[*waiter]struct{}{}} }

// Now is real time plus everything Advance added.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now()
}

func (c *Clock) now() time.Time { return time.Now().Add(c.offset) }

// Advance moves the clock d ahead and fires the timers and tickers that
// are due by then (a ticker fires once, however many periods d spans, as
// a time.Ticker drops the ticks its reader missed).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d < 0 {
		panic("clocktest: Advance with a negative duration")
	}
	c.offset += d
	now := c.now()
	for w := range c.waiters {
		w.rt.Reset(max(w.when.Sub(now), 0))
	}
}

// waiter is one timer or ticker: a real timer re-armed for the time left
// until when, by this clock, each time the clock jumps.
type waiter struct {
	c      *Clock
	ch     chan time.Time
	period time.Duration // a ticker's; 0 for a timer
	when   time.Time     // guarded by c.mu
	rt     *time.Timer   // calls fire
}

// NewTimer is a timer that fires d from now by this clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	return timer{c.start(d, 0)}
}

// NewTicker is a ticker that fires every d by this clock.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("clocktest: non-positive interval for NewTicker")
	}
	return ticker{c.start(d, d)}
}

func (c *Clock) start(d, period time.Duration) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{c: c, ch: make(chan time.Time, 1), period: period, when: c.now().Add(d)}
	w.rt = time.AfterFunc(max(d, 0), w.fire)
	c.waiters[w] = struct{}{}
	return w
}

// fire runs when the real timer goes off: it delivers the tick if the
// clock has reached when, and re-arms for what is left otherwise.
func (w *waiter) fire() {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, live := c.waiters[w]; !live {
		return
	}
	now := c.now()
	if left := w.when.Sub(now); left > 0 {
		w.rt.Reset(left)
		return
	}
	select {
	case w.ch <- now:
	default: // the reader has not taken the last tick: drop this one
	}
	if w.period == 0 {
		delete(c.waiters, w)
		return
	}
	for !w.when.After(now) {
		w.when = w.when.Add(w.period)
	}
	w.rt.Reset(w.when.Sub(now))
}

// stop removes w and drains its channel; it reports whether w was live.
func (w *waiter) stop() bool {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	_, live := c.waiters[w]
	delete(c.waiters, w)
	w.rt.Stop()
	select {
	case <-w.ch:
	default:
	}
	return live
}

type timer struct{ w *waiter }

func (t timer) C() <-chan time.Time { return t.w.ch }
func (t timer) Stop() bool          { return t.w.stop() }

func (t timer) Reset(d time.Duration) bool {
	live := t.w.stop()
	c := t.w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t.w.when = c.now().Add(d)
	c.waiters[t.w] = struct{}{}
	t.w.rt.Reset(max(d, 0))
	return live
}

type ticker struct{ w *waiter }

func (t ticker) C() <-chan time.Time { return t.w.ch }
func (t ticker) Stop()               { t.w.stop() }
