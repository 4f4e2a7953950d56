package market

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// testNow is a fixed clock, so records sealed by tests and fuzz seeds stay
// valid whenever they run.
var testNow = time.UnixMilli(1_800_000_000_000)

func newTestKey(t testing.TB) crypto.PrivKey {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func peerOf(t testing.TB, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// fixture builds valid, sealed market records between one supplier and one
// renter as of now: an ask and a bid, a quote answering the bid, a proposal
// accepting the quote (or taking the ask), the countersigned lease and its
// trade print. Each builder takes edits applied to the message before it
// is sealed; the *Msg methods return the unsealed message (version and
// signer field filled in) for tests that seal it some other way.
type fixture struct {
	supplierKey, renterKey crypto.PrivKey
	supplier, renter       peer.ID
	now                    time.Time
	nonce                  uint64
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{supplierKey: newTestKey(t), renterKey: newTestKey(t), now: testNow}
	f.supplier, f.renter = peerOf(t, f.supplierKey), peerOf(t, f.renterKey)
	return f
}

// nextNonce returns a fresh nonce.
func (f *fixture) nextNonce() uint64 {
	f.nonce++
	return f.nonce
}

func (f *fixture) ms(d time.Duration) int64 { return f.now.Add(d).UnixMilli() }

func edit[M any](m M, edits []func(M)) M {
	for _, e := range edits {
		e(m)
	}
	return m
}

// mustSeal fails t if sealing failed: mustSeal(t)(SealAsk(a, key)).
func mustSeal(t testing.TB) func([]byte, error) []byte {
	return func(data []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
}

// forge seals msg as a record of type rt with key exactly as it is: no
// field is filled in, so msg may name another signer or version.
func forge(t testing.TB, rt p2p.RecordType, msg proto.Message, key crypto.PrivKey) []byte {
	t.Helper()
	return mustSeal(t)(p2p.Seal(rt, msg, key))
}

// decode reads the payload of a sealed record without checking its fields.
func decode[M proto.Message](t testing.TB, rt p2p.RecordType, data []byte, msg M) M {
	t.Helper()
	if _, err := p2p.Open(rt, data, msg); err != nil {
		t.Fatalf("decode %s: %v", rt.Domain, err)
	}
	return msg
}

func (f *fixture) askMsg() *pb.Ask {
	return &pb.Ask{
		Version: p2p.RecordVersion, Supplier: []byte(f.supplier), Nonce: f.nextNonce(),
		CreatedMs: f.ms(0), ExpiresMs: f.ms(10 * time.Minute),
		Model: "h100-sxm", Count: 8, PriceMicros: 2_100_000, Region: "eu-west",
		MinDurationS: 60, MaxDurationS: 24 * 3600, Pricing: string(Fixed),
		Addrs: [][]byte{mustAddrBytes("/ip4/127.0.0.1/tcp/4001")}, Simulated: true,
	}
}

func (f *fixture) ask(t testing.TB, edits ...func(*pb.Ask)) []byte {
	t.Helper()
	return mustSeal(t)(SealAsk(edit(f.askMsg(), edits), f.supplierKey))
}

func (f *fixture) bidMsg() *pb.Bid {
	return &pb.Bid{
		Version: p2p.RecordVersion, Renter: []byte(f.renter), Nonce: f.nextNonce(),
		CreatedMs: f.ms(0), ExpiresMs: f.ms(10 * time.Minute),
		Filter: "model=h100-sxm region=eu-west", Count: 4, DurationS: 3600, MaxPriceMicros: 3_000_000,
		Addrs: [][]byte{mustAddrBytes("/ip4/127.0.0.1/tcp/4002")},
	}
}

func (f *fixture) bid(t testing.TB, edits ...func(*pb.Bid)) []byte {
	t.Helper()
	return mustSeal(t)(SealBid(edit(f.bidMsg(), edits), f.renterKey))
}

func (f *fixture) cancelMsg(order []byte) *pb.Cancel {
	id := IDOf(order)
	return &pb.Cancel{Version: p2p.RecordVersion, Signer: []byte(f.supplier), Nonce: f.nextNonce(), CreatedMs: f.ms(0), OrderId: id[:]}
}

// cancel withdraws order; it is signed by the supplier.
func (f *fixture) cancel(t testing.TB, order []byte, edits ...func(*pb.Cancel)) []byte {
	t.Helper()
	return mustSeal(t)(SealCancel(edit(f.cancelMsg(order), edits), f.supplierKey))
}

// quoteMsg offers the bid's count and duration of h100-sxm at 2.10.
func (f *fixture) quoteMsg(t testing.TB, bid []byte) *pb.Quote {
	t.Helper()
	b := decode(t, BidType, bid, &pb.Bid{})
	id := IDOf(bid)
	return &pb.Quote{
		Version: p2p.RecordVersion, Supplier: []byte(f.supplier), Renter: b.Renter, BidId: id[:],
		Nonce: f.nextNonce(), CreatedMs: f.ms(0), ExpiresMs: f.ms(30 * time.Second),
		Model: "h100-sxm", Count: b.Count, PriceMicros: 2_100_000, DurationS: b.DurationS,
		Region: "eu-west", Free: 8,
	}
}

func (f *fixture) quote(t testing.TB, bid []byte, edits ...func(*pb.Quote)) []byte {
	t.Helper()
	return mustSeal(t)(SealQuote(edit(f.quoteMsg(t, bid), edits), f.supplierKey))
}

// proposalMsg accepts quote on its terms.
func (f *fixture) proposalMsg(t testing.TB, quote []byte) *pb.LeaseProposal {
	t.Helper()
	q := decode(t, QuoteType, quote, &pb.Quote{})
	return &pb.LeaseProposal{
		Version: p2p.RecordVersion, Renter: []byte(f.renter), Supplier: q.Supplier,
		Nonce: f.nextNonce(), CreatedMs: f.ms(0), ExpiresMs: f.ms(30 * time.Second),
		Quote: quote, Model: q.Model, Count: q.Count, PriceMicros: q.PriceMicros, DurationS: q.DurationS,
	}
}

func (f *fixture) proposal(t testing.TB, quote []byte, edits ...func(*pb.LeaseProposal)) []byte {
	t.Helper()
	return mustSeal(t)(SealProposal(edit(f.proposalMsg(t, quote), edits), f.renterKey))
}

// askProposalMsg takes 2 GPUs of ask for an hour at its price.
func (f *fixture) askProposalMsg(t testing.TB, ask []byte) *pb.LeaseProposal {
	t.Helper()
	a := decode(t, AskType, ask, &pb.Ask{})
	return &pb.LeaseProposal{
		Version: p2p.RecordVersion, Renter: []byte(f.renter), Supplier: a.Supplier,
		Nonce: f.nextNonce(), CreatedMs: f.ms(0), ExpiresMs: f.ms(30 * time.Second),
		Ask: ask, Model: a.Model, Count: min(2, a.Count), PriceMicros: a.PriceMicros, DurationS: 3600,
	}
}

func (f *fixture) askProposal(t testing.TB, ask []byte, edits ...func(*pb.LeaseProposal)) []byte {
	t.Helper()
	return mustSeal(t)(SealProposal(edit(f.askProposalMsg(t, ask), edits), f.renterKey))
}

// leaseMsg countersigns proposal, starting now, with GPU UUIDs.
func (f *fixture) leaseMsg(t testing.TB, proposal []byte) *pb.Lease {
	t.Helper()
	p := decode(t, ProposalType, proposal, &pb.LeaseProposal{})
	id := IDOf(proposal)
	uuids := make([]string, p.Count)
	for i := range uuids {
		uuids[i] = "GPU-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	return &pb.Lease{
		Version: p2p.RecordVersion, Proposal: proposal, Supplier: p.Supplier, Renter: p.Renter, LeaseId: id[:],
		StartMs: f.ms(0), EndMs: f.ms(time.Duration(p.DurationS) * time.Second),
		Model: p.Model, Count: p.Count, PriceMicros: p.PriceMicros, GpuUuids: uuids,
		ConfirmByMs: f.ms(ConfirmWindow),
	}
}

func (f *fixture) lease(t testing.TB, proposal []byte, edits ...func(*pb.Lease)) []byte {
	t.Helper()
	return mustSeal(t)(SealLease(edit(f.leaseMsg(t, proposal), edits), f.supplierKey))
}

func (f *fixture) tradeMsg(lease []byte) *pb.TradePrint {
	return &pb.TradePrint{Version: p2p.RecordVersion, Supplier: []byte(f.supplier), Nonce: f.nextNonce(), CreatedMs: f.ms(0), Lease: lease}
}

func (f *fixture) trade(t testing.TB, lease []byte, edits ...func(*pb.TradePrint)) []byte {
	t.Helper()
	return mustSeal(t)(SealTradePrint(edit(f.tradeMsg(lease), edits), f.supplierKey))
}

// chain is one valid sequence of records, each embedding or answering the
// one before.
type chain struct {
	ask, bid, quote, proposal, lease, trade []byte
}

func (f *fixture) chain(t testing.TB) chain {
	t.Helper()
	var c chain
	c.ask = f.ask(t)
	c.bid = f.bid(t)
	c.quote = f.quote(t, c.bid)
	c.proposal = f.proposal(t, c.quote)
	c.lease = f.lease(t, c.proposal)
	c.trade = f.trade(t, c.lease)
	return c
}

func mustAddrBytes(s string) []byte { return ma.StringCast(s).Bytes() }

// namedErrors are the failures a record validation may report; every
// rejection wraps exactly one.
var namedErrors = []error{
	p2p.ErrTooLarge, p2p.ErrBadEnvelope, p2p.ErrMalformed, p2p.ErrUnsupported,
	p2p.ErrSignerMismatch, p2p.ErrExpired, p2p.ErrFutureDated, p2p.ErrStale,
	p2p.ErrRateLimited, ErrMismatch, ErrReplayed,
}

// checkErr reports whether err wraps want and no other named error.
func checkErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("got error %v, want %v", err, want)
		return
	}
	for _, e := range namedErrors {
		if e != want && errors.Is(err, e) {
			t.Errorf("error %v wraps %v as well as %v", err, e, want)
		}
	}
}

// wrapsOneNamed reports whether err wraps exactly one named error.
func wrapsOneNamed(err error) bool {
	n := 0
	for _, e := range namedErrors {
		if errors.Is(err, e) {
			n++
		}
	}
	return n == 1
}
