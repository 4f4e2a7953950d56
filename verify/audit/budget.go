package audit

import (
	"time"
)

// Bounds on the time strangers' challenges take (ProverConfig).
const (
	// DefaultStrangerShare is the most of a prover's time that
	// challengers it does not give priority may take together.
	DefaultStrangerShare = 0.1
	// DefaultStrangerWindow is the sliding window over which the share
	// is kept.
	DefaultStrangerWindow = 10 * time.Minute
)

// budget is a prover's account of the time strangers' challenges took:
// over any window of its length, at most share of it. A challenge is
// admitted only when the time taken in the window that ends now, plus the
// longest challenge's time (what this one may take), is within the
// share; else wait says when it will be. Only the prover's mutex-holder
// uses it.
type budget struct {
	window time.Duration
	share  float64
	spans  []span // strangers' challenges, in the order they ended
	// longest is the longest challenge seen, strangers' or not: the
	// estimate of the next one's time.
	longest time.Duration
}

// span is the time one challenge held the prover.
type span struct{ from, to time.Time }

// allowance is the time strangers may take per window.
func (b *budget) allowance() time.Duration {
	return time.Duration(b.share * float64(b.window))
}

// estimate is the time the next challenge may take: the longest yet,
// capped at the allowance (a challenge longer than the whole share is
// admitted when no other took any of it).
func (b *budget) estimate() time.Duration {
	return min(b.longest, b.allowance())
}

// took records a challenge that held the prover from from to to, a
// stranger's or not.
func (b *budget) took(from, to time.Time, stranger bool) {
	b.longest = max(b.longest, to.Sub(from))
	if !stranger {
		return
	}
	b.spans = append(b.spans, span{from, to})
	// Forget what has left the window for good.
	start := to.Add(-b.window)
	i := 0
	for i < len(b.spans) && !b.spans[i].to.After(start) {
		i++
	}
	b.spans = b.spans[i:]
}

// wait is how long from now until a stranger's challenge may start: 0
// when the time taken in the window ending now, plus the estimate of the
// next challenge, is within the allowance; else the time the window's
// start must move on for enough of the spans in it to leave.
func (b *budget) wait(now time.Time) time.Duration {
	start := now.Add(-b.window)
	excess := b.used(now) + b.estimate() - b.allowance()
	if excess <= 0 {
		return 0
	}
	// The window's start moves on; spans leave it from the oldest.
	for _, s := range b.spans {
		from := s.from
		if from.Before(start) {
			from = start
		}
		l := overlap(s, start, now)
		if l <= 0 {
			continue
		}
		if excess <= l {
			return from.Add(excess).Sub(start)
		}
		excess -= l
	}
	return b.window // not reached: excess ≤ used
}

// used is the time strangers' challenges took in the window ending now.
func (b *budget) used(now time.Time) time.Duration {
	start := now.Add(-b.window)
	var used time.Duration
	for _, s := range b.spans {
		used += overlap(s, start, now)
	}
	return used
}

// left is what is left of the allowance in the window ending now: the
// most a stranger's challenge admitted now may hold the prover (then it
// is cancelled), so that strangers together never take more than the
// share. It is at least the estimate when wait(now) is 0.
func (b *budget) left(now time.Time) time.Duration {
	return max(0, b.allowance()-b.used(now))
}

// overlap is how much of s lies in [from, to].
func overlap(s span, from, to time.Time) time.Duration {
	a, z := s.from, s.to
	if a.Before(from) {
		a = from
	}
	if z.After(to) {
		z = to
	}
	return max(0, z.Sub(a))
}
