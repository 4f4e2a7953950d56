package market

// Collecting the quotes of one bid and ranking them.

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/money"
)

// collector gathers the quotes of one bid until req.Wait passes, ctx
// ends, or every supplier in expect (those with a matching live ask that
// the renter connected to) has quoted or declined, waiting for the last
// of them no longer than the straggler cut (StraggleFactor) allows once
// an acceptable offer is in. With nobody to expect, it waits for
// req.Wait, or the straggler cut: suppliers the order book did not list
// may still quote.
type collector struct {
	r        *Renter
	ch       <-chan *Quote
	req      RentRequest
	start    time.Time
	first    time.Duration // when the first acceptable offer came, after start
	deadline time.Time
	timer    *time.Timer
	expected bool
	waiting  map[peer.ID]bool
	declines []*Quote
	done     bool
}

// Once the first acceptable offer is in, the answers still expected get
// at most StraggleFactor times as long as that one took, and at least
// StraggleMin: a supplier that never answers (down, overloaded, or
// advertising what it does not serve) costs a rent that much, not the
// whole Wait.
const (
	StraggleFactor = 3
	StraggleMin    = 500 * time.Millisecond
)

func (r *Renter) newCollector(ch <-chan *Quote, req RentRequest, expect map[peer.ID]bool) *collector {
	now := time.Now()
	return &collector{r: r, ch: ch, req: req, start: now, deadline: now.Add(req.Wait), timer: time.NewTimer(req.Wait),
		expected: len(expect) > 0, waiting: maps.Clone(expect)}
}

// offerIn shortens the wait for stragglers after an acceptable offer.
func (c *collector) offerIn() {
	now := time.Now()
	if c.first == 0 {
		c.first = now.Sub(c.start)
	}
	if cut := now.Add(max(StraggleMin, StraggleFactor*now.Sub(c.start))); cut.Before(c.deadline) {
		c.deadline = cut
		c.timer.Reset(cut.Sub(now))
	}
}

// extend lifts the straggler cut once every offer in hand was refused:
// with nothing left to lease from, the answers still expected are worth
// waiting for until req.Wait after all (a supplier slower than the cut,
// on a loaded machine, was the only one left to lease from). A later
// offer sets a cut anew.
func (c *collector) extend() {
	if c.done {
		return
	}
	c.first = 0
	c.deadline = c.start.Add(c.req.Wait)
	c.timer.Reset(time.Until(c.deadline))
}

func (c *collector) stop() { c.timer.Stop() }

// collect returns, ranked, the acceptable offers that came in since the
// last call, once req.Enough of them are in or nothing more is to come;
// more reports whether answers may still come after that.
func (c *collector) collect(ctx context.Context) (offers []*Quote, more bool) {
	for !c.done && len(offers) < c.req.Enough {
		if c.expected && len(c.waiting) == 0 {
			c.done = true
			break
		}
		select {
		case <-ctx.Done():
			c.done = true
		case <-c.timer.C:
			c.done = true
		case q := <-c.ch:
			delete(c.waiting, q.Supplier)
			switch {
			case q.Decline != "":
				c.declines = append(c.declines, q)
			case slices.Contains(c.req.Exclude, q.Supplier):
			case money.Micros(q.PriceMicros) > c.req.MaxPrice || int(q.Count) != c.req.Count || q.DurationS != uint32(c.req.Duration/time.Second):
				// A supplier quoting outside the bid is ignored.
				c.declines = append(c.declines, q)
			default:
				offers = append(offers, q)
				c.offerIn()
			}
		}
	}
	return c.r.rank(offers), !c.done && !(c.expected && len(c.waiting) == 0)
}

// takeDeclines returns the declines collected since the last call.
func (c *collector) takeDeclines() []*Quote {
	d := c.declines
	c.declines = nil
	return d
}

// rank orders offers by price, then round-trip time; screen then puts
// the more reputable first among equal prices.
func (r *Renter) rank(qs []*Quote) []*Quote {
	rtt := func(p peer.ID) time.Duration {
		if d := r.cfg.Net.Host.Peerstore().LatencyEWMA(p); d > 0 {
			return d
		}
		return time.Hour
	}
	sort.SliceStable(qs, func(i, j int) bool {
		if qs[i].PriceMicros != qs[j].PriceMicros {
			return qs[i].PriceMicros < qs[j].PriceMicros
		}
		return rtt(qs[i].Supplier) < rtt(qs[j].Supplier)
	})
	return qs
}
