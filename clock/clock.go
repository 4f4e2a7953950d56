// Package clock is the time source of gpumesh's long-lived parts: the
// current time, timers and tickers behind one small interface, so that
// logic that depends on time (a lease's end, receipt intervals, ask
// renewal) can be driven by a test instead of waited for.
//
// Real is the clock of the running product. clock/clocktest has a clock a
// test moves forward.
package clock

import "time"

// Clock tells the time and makes timers and tickers that fire by it.
type Clock interface {
	Now() time.Time
	// NewTimer is time.NewTimer by this clock.
	NewTimer(d time.Duration) Timer
	// NewTicker is time.NewTicker by this clock; d must be positive.
	NewTicker(d time.Duration) Ticker
}

// Timer is a *time.Timer of some Clock. As with time.Timer since Go 1.23,
// no stale value is received after Stop or Reset returns.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a *time.Ticker of some Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
func Real() Clock { return realClock{} }

// Or is c, or Real when c is nil: for configs whose clock is optional.
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Offset is c read as if it were off by d: Now returns c's time plus d,
// and timers and tickers, which measure durations, are c's own. It stands
// for a machine whose system clock is wrong, as the chaos run's skewed
// nodes are (gpumesh node --clock-offset).
func Offset(c Clock, d time.Duration) Clock {
	if d == 0 {
		return c
	}
	return offsetClock{c, d}
}

type offsetClock struct {
	Clock
	d time.Duration
}

func (c offsetClock) Now() time.Time { return c.Clock.Now().Add(c.d) }
