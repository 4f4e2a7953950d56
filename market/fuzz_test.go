package market

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// The fuzz targets below take (data, resign). With resign false, data is
// an envelope, opened as it is: random bytes almost never carry a valid
// signature, so this explores the envelope and signature checks. With
// resign true, data is a payload: it is decoded, signed with the fixture's
// key (the Seal function fills in version and signer) and then opened, so
// the fuzzer reaches every field check. Seeds are valid records at the
// fixed clock testNow, in both forms.
//
// Invariants: never panic; a rejection returns no record and wraps exactly
// one named error; an accepted record satisfies the documented limits.
//
// Run one with a short minimization budget, or the fuzzer spends most of
// its time shrinking each new kilobyte-sized input:
//
//	go test ./market -run '^$' -fuzz '^FuzzOpenLease$' -fuzztime 10s -fuzzminimizetime 200x

// fuzzOpen runs one fuzz input through open, sealing it first with seal
// when resign is set.
func fuzzOpen[M proto.Message, R any](t *testing.T, data []byte, resign bool, msg M,
	seal func(M) ([]byte, error), open func([]byte, time.Time) (*R, error)) (*R, []byte) {
	t.Helper()
	if resign {
		if proto.Unmarshal(data, msg) != nil {
			return nil, nil
		}
		var err error
		if data, err = seal(msg); err != nil {
			return nil, nil
		}
	}
	r, err := open(data, testNow)
	if err != nil {
		if r != nil {
			t.Fatalf("returned a record with error %v", err)
		}
		if !wrapsOneNamed(err) {
			t.Fatalf("error %q does not wrap exactly one named error", err)
		}
		return nil, nil
	}
	return r, data
}

// payload is the protobuf encoding of a sealed record's payload.
func payload[M proto.Message](t testing.TB, rt p2p.RecordType, data []byte, msg M) []byte {
	t.Helper()
	b, err := proto.Marshal(decode(t, rt, data, msg))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// addSeeds adds each sealed record as an envelope and as a payload.
func addSeeds[M proto.Message](f *testing.F, rt p2p.RecordType, newMsg func() M, records ...[]byte) {
	for _, r := range records {
		f.Add(r, false)
		f.Add(payload(f, rt, r, newMsg()), true)
		f.Add(r[:len(r)/2], false)
	}
	f.Add([]byte{}, false)
	f.Add([]byte{}, true)
}

func checkWindowInvariant(t *testing.T, what string, createdMs, expiresMs int64) {
	t.Helper()
	created, expires := time.UnixMilli(createdMs), time.UnixMilli(expiresMs)
	if createdMs <= 0 || !expires.After(created) || expires.Sub(created) > MaxOrderLifetime ||
		created.After(testNow.Add(p2p.ClockSkew)) || !testNow.Before(expires) {
		t.Fatalf("accepted %s with created %d, expires %d at %d", what, createdMs, expiresMs, testNow.UnixMilli())
	}
}

func validTerms(count uint32, price int64, durationS uint32) bool {
	d := time.Duration(durationS) * time.Second
	return count >= 1 && count <= MaxCount && price > 0 && price <= MaxPriceMicros && d >= MinDuration && d <= MaxDuration
}

func checkAskInvariants(t *testing.T, a *Ask, data []byte) {
	t.Helper()
	checkWindowInvariant(t, "ask", a.CreatedMs, a.ExpiresMs)
	switch {
	case len(data) > MaxAskSize, !bytes.Equal(a.Raw, data), a.ID != IDOf(data):
		t.Fatal("accepted ask does not carry its envelope")
	case a.Version != p2p.RecordVersion, a.Nonce == 0, peer.ID(a.Ask.Supplier) != a.Supplier:
		t.Fatalf("accepted ask header: %+v", a.Ask)
	case !validTerms(a.Count, a.PriceMicros, a.MinDurationS), !validTerms(a.Count, a.PriceMicros, a.MaxDurationS), a.MinDurationS > a.MaxDurationS:
		t.Fatalf("accepted ask terms: %+v", a.Ask)
	case !validPricing(a.Pricing), checkModel(a.Model) != nil, len(a.Region) > MaxRegionBytes:
		t.Fatalf("accepted ask strings: %+v", a.Ask)
	case len(a.Addrs) != len(a.Ask.Addrs), len(a.Addrs) > MaxAddrs:
		t.Fatalf("accepted ask addrs: %d decoded of %d", len(a.Addrs), len(a.Ask.Addrs))
	}
}

func FuzzOpenAsk(f *testing.F) {
	fx := newFixture(f)
	addSeeds(f, AskType, func() *pb.Ask { return &pb.Ask{} }, fx.ask(f), fx.ask(f, func(m *pb.Ask) { m.Addrs, m.Pricing = nil, string(Auction) }))
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		a, data := fuzzOpen(t, data, resign, &pb.Ask{}, func(m *pb.Ask) ([]byte, error) { return SealAsk(m, fx.supplierKey) }, OpenAsk)
		if a != nil {
			checkAskInvariants(t, a, data)
		}
	})
}

func FuzzOpenBid(f *testing.F) {
	fx := newFixture(f)
	addSeeds(f, BidType, func() *pb.Bid { return &pb.Bid{} }, fx.bid(f), fx.bid(f, func(m *pb.Bid) { m.Filter = "count>=2 price<=2.5 cc>=8.9 verified=true" }))
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		b, data := fuzzOpen(t, data, resign, &pb.Bid{}, func(m *pb.Bid) ([]byte, error) { return SealBid(m, fx.renterKey) }, OpenBid)
		if b == nil {
			return
		}
		checkWindowInvariant(t, "bid", b.CreatedMs, b.ExpiresMs)
		switch {
		case len(data) > MaxBidSize, !bytes.Equal(b.Raw, data), b.ID != IDOf(data), peer.ID(b.Bid.Renter) != b.Renter:
			t.Fatal("accepted bid does not carry its envelope and signer")
		case b.Version != p2p.RecordVersion, b.Nonce == 0, !validTerms(b.Count, b.MaxPriceMicros, b.DurationS):
			t.Fatalf("accepted bid: %+v", b.Bid)
		case len(b.Bid.Filter) > MaxBidFilterBytes, len(b.Addrs) == 0, len(b.Addrs) > MaxAddrs, len(b.Addrs) != len(b.Bid.Addrs):
			t.Fatalf("accepted bid filter or addrs: %+v", b.Bid)
		}
		if g, err := ParseFilter(b.Filter.String(), AnyModel()); err != nil || g.String() != b.Filter.String() {
			t.Fatalf("accepted filter %q does not round-trip: %v", b.Bid.Filter, err)
		}
	})
}

func checkQuoteInvariants(t *testing.T, q *Quote) {
	t.Helper()
	checkWindowInvariant(t, "quote", q.CreatedMs, q.ExpiresMs)
	switch {
	case len(q.Raw) > MaxQuoteSize, q.ID != IDOf(q.Raw), peer.ID(q.Quote.Supplier) != q.Supplier, peer.ID(q.Quote.Renter) != q.Renter, q.Renter.Validate() != nil:
		t.Fatal("accepted quote does not carry its envelope and peers")
	case q.Version != p2p.RecordVersion, q.Nonce == 0, !bytes.Equal(q.BidId, q.BidID[:]):
		t.Fatalf("accepted quote header: %+v", q.Quote)
	case q.Decline == "" && !validTerms(q.Count, q.PriceMicros, q.DurationS):
		t.Fatalf("accepted offer terms: %+v", q.Quote)
	case q.Decline != "" && (!Decline(q.Decline).Valid() || q.Count > MaxCount || q.PriceMicros < 0 || q.PriceMicros > MaxPriceMicros):
		t.Fatalf("accepted decline: %+v", q.Quote)
	case checkModel(q.Model) != nil, len(q.Region) > MaxRegionBytes, q.Free > MaxCount, q.MinPriceMicros < 0, q.MinPriceMicros > MaxPriceMicros:
		t.Fatalf("accepted quote fields: %+v", q.Quote)
	}
}

func FuzzOpenQuote(f *testing.F) {
	fx := newFixture(f)
	bid := fx.bid(f)
	addSeeds(f, QuoteType, func() *pb.Quote { return &pb.Quote{} }, fx.quote(f, bid),
		fx.quote(f, bid, func(m *pb.Quote) {
			m.Decline, m.Count, m.PriceMicros, m.MinPriceMicros = string(DeclinePrice), 0, 0, 9_000_000
		}))
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		q, _ := fuzzOpen(t, data, resign, &pb.Quote{}, func(m *pb.Quote) ([]byte, error) { return SealQuote(m, fx.supplierKey) }, OpenQuote)
		if q != nil {
			checkQuoteInvariants(t, q)
		}
	})
}

// checkProposalInvariants checks an accepted proposal against what it
// embeds; its time window is checked by the caller (a lease's proposal is
// checked as of its creation).
func checkProposalInvariants(t *testing.T, p *Proposal) {
	t.Helper()
	switch {
	case len(p.Raw) > MaxProposalSize, p.ID != IDOf(p.Raw), peer.ID(p.LeaseProposal.Renter) != p.Renter, peer.ID(p.LeaseProposal.Supplier) != p.Supplier:
		t.Fatal("accepted proposal does not carry its envelope and peers")
	case p.Version != p2p.RecordVersion, p.Nonce == 0, !validTerms(p.Count, p.PriceMicros, p.DurationS), checkModel(p.Model) != nil:
		t.Fatalf("accepted proposal: %+v", p.LeaseProposal)
	case (p.Quote == nil) == (p.Ask == nil):
		t.Fatal("accepted proposal without exactly one of quote and ask")
	case p.Quote != nil && (p.Quote.Supplier != p.Supplier || p.Quote.Renter != p.Renter || p.Quote.Decline != "" ||
		p.Quote.Model != p.Model || p.Quote.Count != p.Count || p.Quote.PriceMicros != p.PriceMicros || p.Quote.DurationS != p.DurationS):
		t.Fatalf("accepted proposal contradicts its quote: %+v, %+v", p.LeaseProposal, p.Quote.Quote)
	case p.Ask != nil && (p.Ask.Supplier != p.Supplier || p.Ask.Model != p.Model || p.Count > p.Ask.Count ||
		p.PriceMicros != p.Ask.PriceMicros || p.DurationS < p.Ask.MinDurationS || p.DurationS > p.Ask.MaxDurationS):
		t.Fatalf("accepted proposal contradicts its ask: %+v, %+v", p.LeaseProposal, p.Ask.Ask)
	}
	if p.Quote != nil && !bytes.Equal(p.Quote.Raw, p.LeaseProposal.Quote) || p.Ask != nil && !bytes.Equal(p.Ask.Raw, p.LeaseProposal.Ask) {
		t.Fatal("accepted proposal's embedded record is not what it carries")
	}
}

func FuzzOpenProposal(f *testing.F) {
	fx := newFixture(f)
	c := fx.chain(f)
	addSeeds(f, ProposalType, func() *pb.LeaseProposal { return &pb.LeaseProposal{} }, c.proposal, fx.askProposal(f, c.ask))
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		p, _ := fuzzOpen(t, data, resign, &pb.LeaseProposal{}, func(m *pb.LeaseProposal) ([]byte, error) { return SealProposal(m, fx.renterKey) }, OpenProposal)
		if p == nil {
			return
		}
		checkWindowInvariant(t, "proposal", p.CreatedMs, p.ExpiresMs)
		checkProposalInvariants(t, p)
		if p.Quote != nil {
			checkQuoteInvariants(t, p.Quote)
		} else {
			checkAskInvariants(t, p.Ask, p.Ask.Raw)
		}
	})
}

func checkLeaseInvariants(t *testing.T, l *Lease) {
	t.Helper()
	p := l.Proposal
	switch {
	case len(l.Raw) > MaxLeaseSize, p == nil, l.ID != p.ID, l.ID != IDOf(l.Lease.Proposal), !bytes.Equal(l.LeaseId, l.ID[:]):
		t.Fatal("accepted lease is not named by its proposal")
	case peer.ID(l.Lease.Supplier) != l.Supplier, l.Supplier != p.Supplier, peer.ID(l.Lease.Renter) != l.Renter, l.Renter != p.Renter:
		t.Fatal("accepted lease's parties are not its proposal's")
	case l.Version != p2p.RecordVersion, l.Model != p.Model, l.Count != p.Count, l.PriceMicros != p.PriceMicros:
		t.Fatalf("accepted lease contradicts its proposal: %+v", l.Lease)
	case l.StartMs <= 0, l.EndMs-l.StartMs != int64(p.DurationS)*1000, l.ConfirmByMs < l.StartMs, l.Start().After(testNow.Add(p2p.ClockSkew)):
		t.Fatalf("accepted lease times: %+v", l.Lease)
	case len(l.GpuUuids) != 0 && len(l.GpuUuids) != int(l.Count):
		t.Fatalf("accepted lease with %d uuids for %d gpus", len(l.GpuUuids), l.Count)
	}
	checkProposalInvariants(t, p)
}

func FuzzOpenLease(f *testing.F) {
	fx := newFixture(f)
	c := fx.chain(f)
	addSeeds(f, LeaseType, func() *pb.Lease { return &pb.Lease{} }, c.lease, fx.lease(f, fx.askProposal(f, c.ask)))
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		l, _ := fuzzOpen(t, data, resign, &pb.Lease{}, func(m *pb.Lease) ([]byte, error) { return SealLease(m, fx.supplierKey) }, OpenLease)
		if l != nil {
			checkLeaseInvariants(t, l)
		}
	})
}

func FuzzOpenTradePrint(f *testing.F) {
	fx := newFixture(f)
	c := fx.chain(f)
	addSeeds(f, TradeType, func() *pb.TradePrint { return &pb.TradePrint{} }, c.trade)
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		tp, data := fuzzOpen(t, data, resign, &pb.TradePrint{}, func(m *pb.TradePrint) ([]byte, error) { return SealTradePrint(m, fx.supplierKey) }, OpenTradePrint)
		if tp == nil {
			return
		}
		created := time.UnixMilli(tp.CreatedMs)
		switch {
		case len(data) > MaxTradeSize, tp.ID != IDOf(data), tp.Lease == nil, tp.Supplier != tp.Lease.Supplier, peer.ID(tp.TradePrint.Supplier) != tp.Supplier:
			t.Fatal("accepted trade print not signed by its lease's supplier")
		case tp.Version != p2p.RecordVersion, tp.Nonce == 0, created.After(testNow.Add(p2p.ClockSkew)), !created.After(testNow.Add(-MaxOrderLifetime)):
			t.Fatalf("accepted trade print: %+v", tp.TradePrint)
		}
		checkLeaseInvariants(t, tp.Lease)
	})
}

func FuzzOrderValidator(f *testing.F) {
	fx := newFixture(f)
	c := fx.chain(f)
	for _, r := range [][]byte{c.ask, c.bid, fx.cancel(f, c.ask), c.quote, c.trade} {
		f.Add(r)
		f.Add(r[:len(r)-1])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, author := range []peer.ID{fx.supplier, fx.renter} {
			v := NewOrderValidator(func() time.Time { return testNow }, rate.Inf, 1)
			got, err := v.Check(author, data)
			if err != nil {
				if got != nil || !wrapsOneNamed(err) {
					t.Fatalf("rejection returned %v, error %q", got, err)
				}
				continue
			}
			var signer peer.ID
			switch r := got.(type) {
			case *Ask:
				checkAskInvariants(t, r, data)
				signer = r.Supplier
			case *Bid:
				signer = r.Renter
			case *Cancel:
				signer = r.Signer
			default:
				t.Fatalf("accepted a %T", got)
			}
			if signer != author {
				t.Fatalf("accepted a record of %s published by %s", signer, author)
			}
			if _, err := v.Check(author, data); !errors.Is(err, ErrReplayed) || !wrapsOneNamed(err) {
				t.Fatalf("second delivery: %v, want a replay", err)
			}
		}
	})
}
