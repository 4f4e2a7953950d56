package market

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// recordCase is one input to an Open function and the named error it must
// report (nil: accepted). A zero now means the fixture's clock.
type recordCase struct {
	name string
	data []byte
	now  time.Time
	want error
}

func runCases(t *testing.T, f *fixture, open func([]byte, time.Time) error, cases []recordCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = f.now
			}
			err := open(tc.data, now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("rejected a valid record: %v", err)
				}
				return
			}
			checkErr(t, err, tc.want)
		})
	}
}

// tamper returns data with one bit flipped in its middle.
func tamper(data []byte) []byte {
	d := bytes.Clone(data)
	d[len(d)/2] ^= 0x01
	return d
}

// envelopeCases are the failures p2p.Open catches, for a good record of a
// type whose envelopes are at most limit bytes.
func envelopeCases(good []byte, limit int) []recordCase {
	lastFlipped := bytes.Clone(good)
	lastFlipped[len(lastFlipped)-1] ^= 0x80
	return []recordCase{
		{name: "empty", data: nil, want: p2p.ErrBadEnvelope},
		{name: "garbage", data: []byte("not an envelope"), want: p2p.ErrBadEnvelope},
		{name: "truncated", data: good[:len(good)-1], want: p2p.ErrBadEnvelope},
		{name: "tampered", data: tamper(good), want: p2p.ErrBadEnvelope},
		{name: "tampered signature", data: lastFlipped, want: p2p.ErrBadEnvelope},
		{name: "too large", data: make([]byte, limit+1), want: p2p.ErrTooLarge},
	}
}

func TestOpenAsk(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	good := f.ask(t)
	a, err := OpenAsk(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != IDOf(good) || a.Supplier != f.supplier || !bytes.Equal(a.Raw, good) || a.Model != "h100-sxm" ||
		len(a.Addrs) != 1 || a.Addrs[0].String() != "/ip4/127.0.0.1/tcp/4001" || !a.Created().Equal(f.now) {
		t.Errorf("decoded ask = %+v", a)
	}
	ask := func(e func(*pb.Ask)) []byte { return f.ask(t, e) }
	cases := append(envelopeCases(good, MaxAskSize),
		recordCase{name: "good", data: good},
		recordCase{name: "largest count and price, auction", data: ask(func(m *pb.Ask) { m.Count, m.PriceMicros, m.Pricing = MaxCount, MaxPriceMicros, string(Auction) })},
		recordCase{name: "no addrs, dynamic", data: ask(func(m *pb.Ask) { m.Addrs, m.Pricing = nil, string(Dynamic) })},
		recordCase{name: "created within skew", data: ask(func(m *pb.Ask) { m.CreatedMs = f.ms(p2p.ClockSkew) })},
		recordCase{name: "one ms before expiry", data: good, now: f.now.Add(10*time.Minute - time.Millisecond)},
		recordCase{name: "full lifetime", data: ask(func(m *pb.Ask) { m.ExpiresMs = f.ms(MaxOrderLifetime) })},
		recordCase{name: "wrong payload type", data: forge(t, BidType, f.askMsg(), f.supplierKey), want: p2p.ErrBadEnvelope},
		recordCase{name: "forged signer", data: forge(t, AskType, f.askMsg(), other), want: p2p.ErrSignerMismatch},
		recordCase{name: "supplier not a peer id", data: forge(t, AskType, edit(f.askMsg(), []func(*pb.Ask){func(m *pb.Ask) { m.Supplier = []byte("me") }}), f.supplierKey), want: p2p.ErrMalformed},
		recordCase{name: "version 2", data: forge(t, AskType, edit(f.askMsg(), []func(*pb.Ask){func(m *pb.Ask) { m.Version = 2 }}), f.supplierKey), want: p2p.ErrUnsupported},
		recordCase{name: "nonce 0", data: ask(func(m *pb.Ask) { m.Nonce = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "created 0", data: ask(func(m *pb.Ask) { m.CreatedMs = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "created negative, huge lifetime", data: ask(func(m *pb.Ask) { m.CreatedMs, m.ExpiresMs = -1<<62, 1<<62 }), want: p2p.ErrMalformed},
		recordCase{name: "expires at created", data: ask(func(m *pb.Ask) { m.ExpiresMs = m.CreatedMs }), want: p2p.ErrMalformed},
		recordCase{name: "lifetime over an hour", data: ask(func(m *pb.Ask) { m.ExpiresMs = f.ms(MaxOrderLifetime + time.Millisecond) }), want: p2p.ErrMalformed},
		recordCase{name: "future-dated", data: ask(func(m *pb.Ask) { m.CreatedMs, m.ExpiresMs = f.ms(p2p.ClockSkew+time.Second), f.ms(time.Minute) }), want: p2p.ErrFutureDated},
		recordCase{name: "expired", data: good, now: f.now.Add(10 * time.Minute), want: p2p.ErrExpired},
		recordCase{name: "count 0", data: ask(func(m *pb.Ask) { m.Count = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "count over max", data: ask(func(m *pb.Ask) { m.Count = MaxCount + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "price 0", data: ask(func(m *pb.Ask) { m.PriceMicros = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "price negative", data: ask(func(m *pb.Ask) { m.PriceMicros = -1 }), want: p2p.ErrMalformed},
		recordCase{name: "price over max", data: ask(func(m *pb.Ask) { m.PriceMicros = MaxPriceMicros + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "min duration under a minute", data: ask(func(m *pb.Ask) { m.MinDurationS = 59 }), want: p2p.ErrMalformed},
		recordCase{name: "max duration over 30 days", data: ask(func(m *pb.Ask) { m.MaxDurationS = uint32(MaxDuration/time.Second) + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "min above max", data: ask(func(m *pb.Ask) { m.MinDurationS, m.MaxDurationS = 7200, 3600 }), want: p2p.ErrMalformed},
		recordCase{name: "unknown pricing", data: ask(func(m *pb.Ask) { m.Pricing = "free" }), want: p2p.ErrMalformed},
		recordCase{name: "pricing in capitals", data: ask(func(m *pb.Ask) { m.Pricing = "Fixed" }), want: p2p.ErrMalformed},
		recordCase{name: "region too long", data: ask(func(m *pb.Ask) { m.Region = strings.Repeat("r", MaxRegionBytes+1) }), want: p2p.ErrMalformed},
		recordCase{name: "model empty", data: ask(func(m *pb.Ask) { m.Model = "" }), want: p2p.ErrMalformed},
		recordCase{name: "model capitals", data: ask(func(m *pb.Ask) { m.Model = "H100" }), want: p2p.ErrMalformed},
		recordCase{name: "model leading dash", data: ask(func(m *pb.Ask) { m.Model = "-h100" }), want: p2p.ErrMalformed},
		recordCase{name: "model too long", data: ask(func(m *pb.Ask) { m.Model = strings.Repeat("a", 33) }), want: p2p.ErrMalformed},
		recordCase{name: "17 addrs", data: ask(func(m *pb.Ask) {
			for len(m.Addrs) <= MaxAddrs {
				m.Addrs = append(m.Addrs, m.Addrs[0])
			}
		}), want: p2p.ErrMalformed},
		recordCase{name: "bad addr", data: ask(func(m *pb.Ask) { m.Addrs = append(m.Addrs, []byte{0xff, 0xff}) }), want: p2p.ErrMalformed},
	)
	runCases(t, f, func(d []byte, now time.Time) error {
		a, err := OpenAsk(d, now)
		if (a == nil) == (err == nil) {
			t.Errorf("OpenAsk returned %v and %v", a, err)
		}
		return err
	}, cases)
}

func TestOpenBid(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	good := f.bid(t)
	b, err := OpenBid(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != IDOf(good) || b.Renter != f.renter || len(b.Filter.Terms) != 2 || b.Filter.String() != "model=h100-sxm region=eu-west" || len(b.Addrs) != 1 || !bytes.Equal(b.Raw, good) {
		t.Errorf("decoded bid = %+v", b)
	}
	bid := func(e func(*pb.Bid)) []byte { return f.bid(t, e) }
	cases := append(envelopeCases(good, MaxBidSize),
		recordCase{name: "good", data: good},
		recordCase{name: "empty filter", data: bid(func(m *pb.Bid) { m.Filter = "" })},
		recordCase{name: "model not in any local table", data: bid(func(m *pb.Bid) { m.Filter = "model=zz-9000" })},
		recordCase{name: "16 addrs", data: bid(func(m *pb.Bid) {
			for len(m.Addrs) < MaxAddrs {
				m.Addrs = append(m.Addrs, m.Addrs[0])
			}
		})},
		recordCase{name: "wrong payload type", data: forge(t, AskType, f.bidMsg(), f.renterKey), want: p2p.ErrBadEnvelope},
		recordCase{name: "forged signer", data: forge(t, BidType, f.bidMsg(), other), want: p2p.ErrSignerMismatch},
		recordCase{name: "version 0", data: forge(t, BidType, edit(f.bidMsg(), []func(*pb.Bid){func(m *pb.Bid) { m.Version = 0 }}), f.renterKey), want: p2p.ErrUnsupported},
		recordCase{name: "nonce 0", data: bid(func(m *pb.Bid) { m.Nonce = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "lifetime over an hour", data: bid(func(m *pb.Bid) { m.ExpiresMs = f.ms(2 * time.Hour) }), want: p2p.ErrMalformed},
		recordCase{name: "future-dated", data: bid(func(m *pb.Bid) { m.CreatedMs, m.ExpiresMs = f.ms(time.Minute), f.ms(2*time.Minute) }), want: p2p.ErrFutureDated},
		recordCase{name: "expired", data: good, now: f.now.Add(time.Hour), want: p2p.ErrExpired},
		recordCase{name: "count 0", data: bid(func(m *pb.Bid) { m.Count = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "count over max", data: bid(func(m *pb.Bid) { m.Count = MaxCount + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "duration 0", data: bid(func(m *pb.Bid) { m.DurationS = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "duration over 30 days", data: bid(func(m *pb.Bid) { m.DurationS = 31 * 24 * 3600 }), want: p2p.ErrMalformed},
		recordCase{name: "max price 0", data: bid(func(m *pb.Bid) { m.MaxPriceMicros = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "max price over max", data: bid(func(m *pb.Bid) { m.MaxPriceMicros = MaxPriceMicros + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "filter too long", data: bid(func(m *pb.Bid) { m.Filter = "region=" + strings.Repeat("x", MaxBidFilterBytes) }), want: p2p.ErrMalformed},
		recordCase{name: "filter unparsable", data: bid(func(m *pb.Bid) { m.Filter = "model==h100" }), want: p2p.ErrMalformed},
		recordCase{name: "filter unknown key", data: bid(func(m *pb.Bid) { m.Filter = "colour=red" }), want: p2p.ErrMalformed},
		recordCase{name: "no addrs", data: bid(func(m *pb.Bid) { m.Addrs = nil }), want: p2p.ErrMalformed},
		recordCase{name: "bad addr", data: bid(func(m *pb.Bid) { m.Addrs = [][]byte{{0x04, 0x7f}} }), want: p2p.ErrMalformed},
	)
	runCases(t, f, func(d []byte, now time.Time) error { _, err := OpenBid(d, now); return err }, cases)
}

func TestOpenCancel(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	order := f.ask(t)
	good := f.cancel(t, order)
	c, err := OpenCancel(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if c.OrderID != IDOf(order) || c.Signer != f.supplier || c.ID != IDOf(good) {
		t.Errorf("decoded cancel = %+v", c)
	}
	cancel := func(e func(*pb.Cancel)) []byte { return f.cancel(t, order, e) }
	cases := append(envelopeCases(good, MaxCancelSize),
		recordCase{name: "good", data: good},
		recordCase{name: "nearly an hour old", data: good, now: f.now.Add(MaxOrderLifetime - time.Millisecond)},
		recordCase{name: "an hour old", data: good, now: f.now.Add(MaxOrderLifetime), want: p2p.ErrExpired},
		recordCase{name: "future-dated", data: cancel(func(m *pb.Cancel) { m.CreatedMs = f.ms(p2p.ClockSkew + time.Millisecond) }), want: p2p.ErrFutureDated},
		recordCase{name: "created 0", data: cancel(func(m *pb.Cancel) { m.CreatedMs = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "nonce 0", data: cancel(func(m *pb.Cancel) { m.Nonce = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "short order id", data: cancel(func(m *pb.Cancel) { m.OrderId = m.OrderId[:31] }), want: p2p.ErrMalformed},
		recordCase{name: "forged signer", data: forge(t, CancelType, f.cancelMsg(order), other), want: p2p.ErrSignerMismatch},
		recordCase{name: "wrong payload type", data: forge(t, AskType, f.cancelMsg(order), f.supplierKey), want: p2p.ErrBadEnvelope},
	)
	runCases(t, f, func(d []byte, now time.Time) error { _, err := OpenCancel(d, now); return err }, cases)
}

func TestOpenQuote(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	bid := f.bid(t)
	good := f.quote(t, bid)
	q, err := OpenQuote(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if q.Supplier != f.supplier || q.Renter != f.renter || q.BidID != IDOf(bid) || q.ID != IDOf(good) || q.Count != 4 {
		t.Errorf("decoded quote = %+v", q)
	}
	quote := func(e func(*pb.Quote)) []byte { return f.quote(t, bid, e) }
	decline := func(d Decline) func(*pb.Quote) {
		return func(m *pb.Quote) { m.Decline, m.Count, m.PriceMicros, m.DurationS = string(d), 0, 0, 0 }
	}
	cases := append(envelopeCases(good, MaxQuoteSize),
		recordCase{name: "good", data: good},
		recordCase{name: "decline busy", data: quote(decline(DeclineBusy))},
		recordCase{name: "decline duration", data: quote(decline(DeclineDuration))},
		recordCase{name: "decline mismatch", data: quote(decline(DeclineMismatch))},
		recordCase{name: "decline price with its minimum", data: quote(func(m *pb.Quote) { decline(DeclinePrice)(m); m.MinPriceMicros = 5_000_000 })},
		recordCase{name: "decline keeping its terms", data: quote(func(m *pb.Quote) { m.Decline = string(DeclineBusy) })},
		recordCase{name: "unknown decline", data: quote(decline("nope")), want: p2p.ErrMalformed},
		recordCase{name: "decline count over max", data: quote(func(m *pb.Quote) { decline(DeclineBusy)(m); m.Count = MaxCount + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "decline negative price", data: quote(func(m *pb.Quote) { decline(DeclineBusy)(m); m.PriceMicros = -1 }), want: p2p.ErrMalformed},
		recordCase{name: "decline duration too short", data: quote(func(m *pb.Quote) { decline(DeclineBusy)(m); m.DurationS = 1 }), want: p2p.ErrMalformed},
		recordCase{name: "offer count 0", data: quote(func(m *pb.Quote) { m.Count = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "offer price 0", data: quote(func(m *pb.Quote) { m.PriceMicros = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "offer duration 0", data: quote(func(m *pb.Quote) { m.DurationS = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "min price over max", data: quote(func(m *pb.Quote) { m.MinPriceMicros = MaxPriceMicros + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "free over max", data: quote(func(m *pb.Quote) { m.Free = MaxCount + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "bad model", data: quote(func(m *pb.Quote) { m.Model = "h100 sxm" }), want: p2p.ErrMalformed},
		recordCase{name: "region too long", data: quote(func(m *pb.Quote) { m.Region = strings.Repeat("r", 33) }), want: p2p.ErrMalformed},
		recordCase{name: "renter not a peer id", data: quote(func(m *pb.Quote) { m.Renter = []byte{1, 2, 3} }), want: p2p.ErrMalformed},
		recordCase{name: "bid id too short", data: quote(func(m *pb.Quote) { m.BidId = nil }), want: p2p.ErrMalformed},
		recordCase{name: "nonce 0", data: quote(func(m *pb.Quote) { m.Nonce = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "lifetime over an hour", data: quote(func(m *pb.Quote) { m.ExpiresMs = f.ms(61 * time.Minute) }), want: p2p.ErrMalformed},
		recordCase{name: "future-dated", data: quote(func(m *pb.Quote) { m.CreatedMs, m.ExpiresMs = f.ms(time.Minute), f.ms(2*time.Minute) }), want: p2p.ErrFutureDated},
		recordCase{name: "expired", data: good, now: f.now.Add(30 * time.Second), want: p2p.ErrExpired},
		recordCase{name: "forged signer", data: forge(t, QuoteType, f.quoteMsg(t, bid), other), want: p2p.ErrSignerMismatch},
		recordCase{name: "wrong payload type", data: forge(t, BidType, f.quoteMsg(t, bid), f.supplierKey), want: p2p.ErrBadEnvelope},
	)
	runCases(t, f, func(d []byte, now time.Time) error { _, err := OpenQuote(d, now); return err }, cases)
}

func TestOpenProposal(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	otherSupplier := &fixture{supplierKey: other, renterKey: f.renterKey, supplier: peerOf(t, other), renter: f.renter, now: f.now}
	bid := f.bid(t)
	quote := f.quote(t, bid)
	good := f.proposal(t, quote)
	p, err := OpenProposal(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != IDOf(good) || p.Renter != f.renter || p.Supplier != f.supplier || p.Quote == nil || p.Quote.ID != IDOf(quote) || p.Ask != nil {
		t.Errorf("decoded proposal = %+v", p)
	}
	ask := f.ask(t)
	goodAsk := f.askProposal(t, ask)
	p, err = OpenProposal(goodAsk, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ask == nil || p.Ask.ID != IDOf(ask) || p.Quote != nil {
		t.Errorf("decoded ask proposal = %+v", p)
	}

	prop := func(e func(*pb.LeaseProposal)) []byte { return f.proposal(t, quote, e) }
	onAsk := func(e func(*pb.LeaseProposal)) []byte { return f.askProposal(t, ask, e) }
	cases := append(envelopeCases(good, MaxProposalSize),
		recordCase{name: "good", data: good},
		recordCase{name: "good on an ask", data: goodAsk},
		recordCase{name: "whole ask at its longest", data: onAsk(func(m *pb.LeaseProposal) { m.Count, m.DurationS = 8, 24*3600 })},
		recordCase{name: "price differs from quote", data: prop(func(m *pb.LeaseProposal) { m.PriceMicros-- }), want: ErrMismatch},
		recordCase{name: "count differs from quote", data: prop(func(m *pb.LeaseProposal) { m.Count++ }), want: ErrMismatch},
		recordCase{name: "model differs from quote", data: prop(func(m *pb.LeaseProposal) { m.Model = "a100-80gb" }), want: ErrMismatch},
		recordCase{name: "duration differs from quote", data: prop(func(m *pb.LeaseProposal) { m.DurationS++ }), want: ErrMismatch},
		recordCase{name: "quote signed by another supplier", data: f.proposal(t, otherSupplier.quote(t, bid), func(m *pb.LeaseProposal) { m.Supplier = []byte(f.supplier) }), want: ErrMismatch},
		recordCase{name: "quote is a decline", data: f.proposal(t, f.quote(t, bid, func(m *pb.Quote) { m.Decline = string(DeclineBusy) })), want: ErrMismatch},
		recordCase{name: "quote for another renter", data: f.proposal(t, f.quote(t, bid, func(m *pb.Quote) { m.Renter = []byte(peerOf(t, other)) })), want: ErrMismatch},
		recordCase{name: "quote expired", data: prop(func(m *pb.LeaseProposal) { m.ExpiresMs = f.ms(time.Minute) }), now: f.now.Add(45 * time.Second), want: p2p.ErrExpired},
		recordCase{name: "quote tampered", data: prop(func(m *pb.LeaseProposal) { m.Quote = tamper(quote) }), want: p2p.ErrBadEnvelope},
		recordCase{name: "quote malformed", data: f.proposal(t, f.quote(t, bid, func(m *pb.Quote) { m.Region = strings.Repeat("r", 40) })), want: p2p.ErrMalformed},
		recordCase{name: "an ask where the quote goes", data: prop(func(m *pb.LeaseProposal) { m.Quote = ask }), want: p2p.ErrBadEnvelope},
		recordCase{name: "both quote and ask", data: prop(func(m *pb.LeaseProposal) { m.Ask = ask }), want: p2p.ErrMalformed},
		recordCase{name: "neither quote nor ask", data: prop(func(m *pb.LeaseProposal) { m.Quote = nil }), want: p2p.ErrMalformed},
		recordCase{name: "supplier not a peer id", data: prop(func(m *pb.LeaseProposal) { m.Supplier = nil }), want: p2p.ErrMalformed},
		recordCase{name: "ask of another supplier", data: onAsk(func(m *pb.LeaseProposal) { m.Supplier = []byte(peerOf(t, other)) }), want: ErrMismatch},
		recordCase{name: "more than the ask has", data: onAsk(func(m *pb.LeaseProposal) { m.Count = 9 }), want: ErrMismatch},
		recordCase{name: "below the ask's price", data: onAsk(func(m *pb.LeaseProposal) { m.PriceMicros = 1 }), want: ErrMismatch},
		recordCase{name: "another model than the ask's", data: onAsk(func(m *pb.LeaseProposal) { m.Model = "rtx4090" }), want: ErrMismatch},
		recordCase{name: "shorter than the ask allows", data: f.askProposal(t, f.ask(t, func(m *pb.Ask) { m.MinDurationS = 7200 })), want: ErrMismatch},
		recordCase{name: "longer than the ask allows", data: onAsk(func(m *pb.LeaseProposal) { m.DurationS = 24*3600 + 1 }), want: ErrMismatch},
		recordCase{name: "ask expired", data: onAsk(func(m *pb.LeaseProposal) { m.ExpiresMs = f.ms(20 * time.Minute) }), now: f.now.Add(10 * time.Minute), want: p2p.ErrExpired},
		recordCase{name: "count 0", data: prop(func(m *pb.LeaseProposal) { m.Count = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "price over max", data: prop(func(m *pb.LeaseProposal) { m.PriceMicros = MaxPriceMicros + 1 }), want: p2p.ErrMalformed},
		recordCase{name: "duration under a minute", data: prop(func(m *pb.LeaseProposal) { m.DurationS = 59 }), want: p2p.ErrMalformed},
		recordCase{name: "bad model", data: prop(func(m *pb.LeaseProposal) { m.Model = "" }), want: p2p.ErrMalformed},
		recordCase{name: "nonce 0", data: prop(func(m *pb.LeaseProposal) { m.Nonce = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "future-dated", data: prop(func(m *pb.LeaseProposal) { m.CreatedMs, m.ExpiresMs = f.ms(time.Minute), f.ms(2*time.Minute) }), want: p2p.ErrFutureDated},
		recordCase{name: "expired", data: good, now: f.now.Add(30 * time.Second), want: p2p.ErrExpired},
		recordCase{name: "forged renter", data: forge(t, ProposalType, f.proposalMsg(t, quote), f.supplierKey), want: p2p.ErrSignerMismatch},
		recordCase{name: "version 2", data: forge(t, ProposalType, edit(f.proposalMsg(t, quote), []func(*pb.LeaseProposal){func(m *pb.LeaseProposal) { m.Version = 2 }}), f.renterKey), want: p2p.ErrUnsupported},
		recordCase{name: "wrong payload type", data: forge(t, LeaseType, f.proposalMsg(t, quote), f.renterKey), want: p2p.ErrBadEnvelope},
	)
	runCases(t, f, func(d []byte, now time.Time) error { _, err := OpenProposal(d, now); return err }, cases)
}

func TestOpenLease(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	c := f.chain(t)
	good := c.lease
	l, err := OpenLease(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if l.ID != IDOf(c.proposal) || l.Supplier != f.supplier || l.Renter != f.renter || l.Proposal == nil ||
		l.Proposal.Quote == nil || !bytes.Equal(l.Raw, good) || l.End().Sub(l.Start()) != time.Hour {
		t.Errorf("decoded lease = %+v", l)
	}
	lease := func(e func(*pb.Lease)) []byte { return f.lease(t, c.proposal, e) }
	askLease := f.lease(t, f.askProposal(t, c.ask))
	cases := append(envelopeCases(good, MaxLeaseSize),
		recordCase{name: "good", data: good},
		recordCase{name: "good on an ask", data: askLease},
		recordCase{name: "long after its quote expired", data: good, now: f.now.Add(20 * 24 * time.Hour)},
		recordCase{name: "ask lease after the ask expired", data: askLease, now: f.now.Add(2 * time.Hour)},
		recordCase{name: "without gpu uuids", data: lease(func(m *pb.Lease) { m.GpuUuids = nil })},
		recordCase{name: "starts within skew", data: lease(func(m *pb.Lease) { m.StartMs += 10_000; m.EndMs += 10_000; m.ConfirmByMs += 10_000 })},
		recordCase{name: "starts in the future", data: lease(func(m *pb.Lease) { m.StartMs += 60_000; m.EndMs += 60_000; m.ConfirmByMs += 60_000 }), want: p2p.ErrFutureDated},
		recordCase{name: "starts long before the proposal", data: lease(func(m *pb.Lease) { m.StartMs -= 60_000; m.EndMs -= 60_000 }), want: ErrMismatch},
		recordCase{name: "starts after the proposal expired", data: lease(func(m *pb.Lease) { m.StartMs += 60_000; m.EndMs += 60_000; m.ConfirmByMs += 60_000 }), now: f.now.Add(time.Minute), want: ErrMismatch},
		recordCase{name: "wrong lease id", data: lease(func(m *pb.Lease) { m.LeaseId[0] ^= 1 }), want: ErrMismatch},
		recordCase{name: "lease id of the quote", data: lease(func(m *pb.Lease) { id := IDOf(c.quote); m.LeaseId = id[:] }), want: ErrMismatch},
		recordCase{name: "short lease id", data: lease(func(m *pb.Lease) { m.LeaseId = m.LeaseId[:16] }), want: p2p.ErrMalformed},
		recordCase{name: "price differs from proposal", data: lease(func(m *pb.Lease) { m.PriceMicros++ }), want: ErrMismatch},
		recordCase{name: "count differs from proposal", data: lease(func(m *pb.Lease) { m.Count--; m.GpuUuids = m.GpuUuids[1:] }), want: ErrMismatch},
		recordCase{name: "model differs from proposal", data: lease(func(m *pb.Lease) { m.Model = "rtx4090" }), want: ErrMismatch},
		recordCase{name: "end not start plus duration", data: lease(func(m *pb.Lease) { m.EndMs++ }), want: ErrMismatch},
		recordCase{name: "renter differs from proposal", data: lease(func(m *pb.Lease) { m.Renter = []byte(peerOf(t, other)) }), want: ErrMismatch},
		recordCase{name: "countersigned by another supplier", data: mustSeal(t)(SealLease(f.leaseMsg(t, c.proposal), other)), want: ErrMismatch},
		recordCase{name: "countersigned by the renter", data: mustSeal(t)(SealLease(f.leaseMsg(t, c.proposal), f.renterKey)), want: ErrMismatch},
		recordCase{name: "forged supplier", data: forge(t, LeaseType, f.leaseMsg(t, c.proposal), other), want: p2p.ErrSignerMismatch},
		recordCase{name: "renter not a peer id", data: lease(func(m *pb.Lease) { m.Renter = []byte("r") }), want: p2p.ErrMalformed},
		recordCase{name: "uuids fewer than count", data: lease(func(m *pb.Lease) { m.GpuUuids = m.GpuUuids[1:] }), want: p2p.ErrMalformed},
		recordCase{name: "uuid repeated", data: lease(func(m *pb.Lease) { m.GpuUuids[1] = m.GpuUuids[0] }), want: p2p.ErrMalformed},
		recordCase{name: "uuid empty", data: lease(func(m *pb.Lease) { m.GpuUuids[1] = "" }), want: p2p.ErrMalformed},
		recordCase{name: "confirm before start", data: lease(func(m *pb.Lease) { m.ConfirmByMs = m.StartMs - 1 }), want: p2p.ErrMalformed},
		recordCase{name: "end before start", data: lease(func(m *pb.Lease) { m.EndMs = m.StartMs }), want: p2p.ErrMalformed},
		recordCase{name: "start 0", data: lease(func(m *pb.Lease) { m.StartMs = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "count over max", data: lease(func(m *pb.Lease) { m.Count = MaxCount + 1; m.GpuUuids = nil }), want: p2p.ErrMalformed},
		recordCase{name: "version 2", data: forge(t, LeaseType, edit(f.leaseMsg(t, c.proposal), []func(*pb.Lease){func(m *pb.Lease) { m.Version = 2 }}), f.supplierKey), want: p2p.ErrUnsupported},
		recordCase{name: "proposal contradicts its quote", data: f.lease(t, f.proposal(t, c.quote, func(m *pb.LeaseProposal) { m.PriceMicros = 1 })), want: ErrMismatch},
		recordCase{name: "proposal tampered", data: lease(func(m *pb.Lease) { m.Proposal = tamper(c.proposal) }), want: p2p.ErrBadEnvelope},
		recordCase{name: "proposal missing", data: lease(func(m *pb.Lease) { m.Proposal = nil }), want: p2p.ErrBadEnvelope},
		recordCase{name: "wrong payload type", data: forge(t, ProposalType, f.leaseMsg(t, c.proposal), f.supplierKey), want: p2p.ErrBadEnvelope},
	)
	runCases(t, f, func(d []byte, now time.Time) error { _, err := OpenLease(d, now); return err }, cases)
}

func TestOpenTradePrint(t *testing.T) {
	f := newFixture(t)
	other := newTestKey(t)
	c := f.chain(t)
	good := c.trade
	tp, err := OpenTradePrint(good, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if tp.ID != IDOf(good) || tp.Supplier != f.supplier || tp.Lease == nil || tp.Lease.ID != IDOf(c.proposal) {
		t.Errorf("decoded trade print = %+v", tp)
	}
	trade := func(e func(*pb.TradePrint)) []byte { return f.trade(t, c.lease, e) }
	later := f.now.Add(3 * time.Hour)
	cases := append(envelopeCases(good, MaxTradeSize),
		recordCase{name: "good", data: good},
		recordCase{name: "printed later", data: trade(func(m *pb.TradePrint) { m.CreatedMs = later.UnixMilli() }), now: later},
		recordCase{name: "by the renter", data: mustSeal(t)(SealTradePrint(f.tradeMsg(c.lease), f.renterKey)), want: ErrMismatch},
		recordCase{name: "by a stranger", data: mustSeal(t)(SealTradePrint(f.tradeMsg(c.lease), other)), want: ErrMismatch},
		recordCase{name: "forged supplier", data: forge(t, TradeType, f.tradeMsg(c.lease), f.renterKey), want: p2p.ErrSignerMismatch},
		recordCase{name: "before its lease", data: trade(func(m *pb.TradePrint) { m.CreatedMs = f.ms(-time.Minute) }), want: ErrMismatch},
		recordCase{name: "an hour old", data: good, now: f.now.Add(MaxOrderLifetime), want: p2p.ErrExpired},
		recordCase{name: "future-dated", data: trade(func(m *pb.TradePrint) { m.CreatedMs = f.ms(time.Minute) }), want: p2p.ErrFutureDated},
		recordCase{name: "nonce 0", data: trade(func(m *pb.TradePrint) { m.Nonce = 0 }), want: p2p.ErrMalformed},
		recordCase{name: "lease contradicts its proposal", data: f.trade(t, f.lease(t, c.proposal, func(m *pb.Lease) { m.PriceMicros++ })), want: ErrMismatch},
		recordCase{name: "lease tampered", data: trade(func(m *pb.TradePrint) { m.Lease = tamper(c.lease) }), want: p2p.ErrBadEnvelope},
		recordCase{name: "version 2", data: forge(t, TradeType, edit(f.tradeMsg(c.lease), []func(*pb.TradePrint){func(m *pb.TradePrint) { m.Version = 2 }}), f.supplierKey), want: p2p.ErrUnsupported},
		recordCase{name: "wrong payload type", data: forge(t, LeaseType, f.tradeMsg(c.lease), f.supplierKey), want: p2p.ErrBadEnvelope},
	)
	runCases(t, f, func(d []byte, now time.Time) error { _, err := OpenTradePrint(d, now); return err }, cases)
}

// TestSealFillsSigner checks that each Seal function names the key's peer
// and the record version, whatever the caller put there.
func TestSealFillsSigner(t *testing.T) {
	f := newFixture(t)
	bid := f.bid(t, func(m *pb.Bid) { m.Renter, m.Version = []byte("someone else"), 7 })
	if b, err := OpenBid(bid, f.now); err != nil || b.Renter != f.renter {
		t.Fatalf("OpenBid(SealBid(...)) = %v, %v", b, err)
	}
	ask := f.ask(t, func(m *pb.Ask) { m.Supplier = nil })
	if a, err := OpenAsk(ask, f.now); err != nil || a.Supplier != f.supplier {
		t.Fatalf("OpenAsk(SealAsk(...)) = %v, %v", a, err)
	}
	m := f.askMsg()
	m.Supplier = nil
	if _, err := SealAsk(m, f.supplierKey); err != nil || m.Supplier != nil {
		t.Errorf("SealAsk changed its argument or failed: %v", err)
	}
	if _, err := SealAsk(&pb.Ask{Region: strings.Repeat("x", MaxAskSize)}, f.supplierKey); !strings.Contains(errString(err), "too large") {
		t.Errorf("sealing an oversized ask: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestErrorMessagesNameTheRecord(t *testing.T) {
	f := newFixture(t)
	data := f.ask(t, func(m *pb.Ask) { m.Count = 0 })
	_, err := OpenAsk(data, f.now)
	if want := "ask " + IDOf(data).Short() + ": malformed record: count 0"; !strings.HasPrefix(errString(err), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
	c := f.chain(t)
	p := f.proposal(t, c.quote, func(m *pb.LeaseProposal) { m.PriceMicros++ })
	_, err = OpenProposal(p, f.now)
	if want := "proposal " + IDOf(p).Short() + ": record contradicts"; !strings.HasPrefix(errString(err), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}

// TestVerifyTradePrint: a kept print verifies whatever its age (it is
// past OpenTradePrint's window), as its supplier's; one signed by another
// key is not the supplier's, and an altered one does not verify.
func TestVerifyTradePrint(t *testing.T) {
	f := newFixture(t)
	c := f.chain(t)
	if _, err := OpenTradePrint(c.trade, f.now.Add(30*24*time.Hour)); err == nil {
		t.Fatal("a month-old print opens: the test needs one past the window")
	}
	if signer, err := VerifyTradePrint(c.trade); err != nil || signer != f.supplier {
		t.Fatalf("VerifyTradePrint = %s, %v; want the supplier", signer, err)
	}
	if signer, err := VerifyTradePrint(mustSeal(t)(SealTradePrint(f.tradeMsg(c.lease), f.renterKey))); err == nil && signer == f.supplier {
		t.Error("a print signed by the renter verifies as the supplier's")
	}
	bad := append([]byte(nil), c.trade...)
	bad[len(bad)/2] ^= 1
	if _, err := VerifyTradePrint(bad); err == nil {
		t.Error("an altered print verifies")
	}
}
