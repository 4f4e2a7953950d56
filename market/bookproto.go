package market

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Limits of the order-book protocol.
const (
	maxBookRequest = 4 << 10
	maxBookAsks    = 500
	maxBookReply   = maxBookAsks*(MaxAskSize+8) + 1024 // every ask at its limit, with framing
)

// ServeBook answers BookProtocol from b: the live asks of the models asked
// for, as the signed envelopes their suppliers published, so the asker
// can check every one itself.
func ServeBook(h host.Host, b *Book) {
	p2p.Serve(h, BookProtocol, func(s network.Stream) error {
		var req pb.BookRequest
		if err := p2p.ReadMsg(s, maxBookRequest, &req); err != nil {
			return err
		}
		limit := int(req.Limit)
		if limit <= 0 || limit > maxBookAsks {
			limit = maxBookAsks
		}
		var resp pb.BookResponse
		add := func(as []*Ask) {
			for _, a := range as {
				if len(resp.Asks) < limit {
					resp.Asks = append(resp.Asks, a.Raw)
				}
			}
		}
		if len(req.Models) == 0 {
			add(b.Asks(""))
		}
		for _, m := range req.Models {
			add(b.Asks(m))
		}
		return p2p.WriteMsg(s, &resp)
	})
}

// QueryBook asks node p for the asks in its order book for models (all
// when empty) and verifies each one as of now; invalid ones are dropped.
func QueryBook(ctx context.Context, h host.Host, p peer.ID, models []string, now time.Time) ([]*Ask, error) {
	var resp pb.BookResponse
	if err := p2p.Request(ctx, h, p, BookProtocol, &pb.BookRequest{Models: models, Limit: maxBookAsks}, &resp, maxBookReply); err != nil {
		return nil, fmt.Errorf("order book of %s: %w", p, err)
	}
	out := []*Ask{}
	for _, raw := range resp.Asks {
		if a, err := OpenAsk(raw, now); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}
