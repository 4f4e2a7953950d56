package market

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// BidWorkers answer bids (gossiped or sent straight) at once, at most;
// up to BidQueue more wait for one of them. Answering a bid dials nobody
// (the quote goes over the bidder's connection), but a slow bidder holds
// its answerer up to a stream timeout, so a flood of bids is dropped
// rather than answered by a goroutine each.
const (
	BidWorkers = 8
	BidQueue   = 256
)

// BidAnswerers runs a fixed number of goroutines that answer bids, the
// gossiped ones and those sent straight (Supplier.ServeBids) alike; a bid
// that finds the queue full is dropped and counted: the renter still
// hears from the suppliers that were not flooded, and re-bids.
type BidAnswerers struct {
	q       chan *Bid
	dropped atomic.Uint64
	log     *slog.Logger
}

// NewBidAnswerers starts workers goroutines through goLoop (so that its
// caller's Close can wait for them), each answering bids with handle
// (Supplier.HandleBid) until ctx ends. Drops are logged to log, the 1st,
// 2nd, 4th, 8th... of them.
func NewBidAnswerers(ctx context.Context, workers, queue int, handle func(context.Context, *Bid), goLoop func(func()), log *slog.Logger) *BidAnswerers {
	if log == nil {
		log = slog.Default()
	}
	a := &BidAnswerers{q: make(chan *Bid, queue), log: log}
	for range workers {
		goLoop(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case b := <-a.q:
					handle(ctx, b)
				}
			}
		})
	}
	return a
}

// Offer queues b for an answer; it reports false, and counts b dropped,
// when the queue is full.
func (a *BidAnswerers) Offer(b *Bid) bool {
	select {
	case a.q <- b:
		return true
	default:
		if d := a.dropped.Add(1); d&(d-1) == 0 {
			a.log.Warn("bid dropped: the supplier is answering as many as it can", "bid", b.ID.Short(), "dropped", d)
		}
		return false
	}
}

// Dropped is how many bids Offer has dropped.
func (a *BidAnswerers) Dropped() uint64 { return a.dropped.Load() }
