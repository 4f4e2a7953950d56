package market_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
)

// manualClock is a clock that moves only when a test says so.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testID derives a distinct ID from parts.
func testID(parts ...any) market.ID {
	return sha256.Sum256([]byte(fmt.Sprint(parts...)))
}

// ms is t in unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

type askSpec struct {
	supplier peer.ID
	model    string
	price    int64
	created  time.Time
	life     time.Duration
	nonce    uint64
}

func mkAsk(s askSpec) *market.Ask {
	if s.life == 0 {
		s.life = 10 * time.Minute
	}
	return &market.Ask{
		Ask: &pb.Ask{
			Version: 1, Supplier: []byte(s.supplier), Nonce: s.nonce,
			CreatedMs: ms(s.created), ExpiresMs: ms(s.created.Add(s.life)),
			Model: s.model, Count: 8, PriceMicros: s.price, Region: "eu-west",
		},
		ID:       testID("ask", s.supplier, s.model, s.price, ms(s.created), s.nonce),
		Supplier: s.supplier,
	}
}

func mkBid(t *testing.T, renter peer.ID, filter string, created time.Time, life time.Duration) *market.Bid {
	t.Helper()
	f, err := market.ParseFilter(filter, market.AnyModel()) // as OpenBid parses a peer's bid
	if err != nil {
		t.Fatalf("ParseFilter(%q): %v", filter, err)
	}
	return &market.Bid{
		Bid: &pb.Bid{
			Version: 1, Renter: []byte(renter), CreatedMs: ms(created), ExpiresMs: ms(created.Add(life)),
			Filter: filter, Count: 1, DurationS: 3600, MaxPriceMicros: 3_000_000,
		},
		ID:     testID("bid", renter, filter, ms(created)),
		Renter: renter,
		Filter: f,
	}
}

func mkCancel(signer peer.ID, order market.ID) *market.Cancel {
	return &market.Cancel{Cancel: &pb.Cancel{Signer: []byte(signer)}, ID: testID("cancel", order), Signer: signer, OrderID: order}
}

func askIDs(asks []*market.Ask) []market.ID {
	ids := make([]market.ID, len(asks))
	for i, a := range asks {
		ids[i] = a.ID
	}
	return ids
}

func TestBookAskReplacement(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	alice, bob := peer.ID("alice"), peer.ID("bob")
	first := mkAsk(askSpec{supplier: alice, model: "h100-sxm", price: 2_000_000, created: now, nonce: 5})
	sameTimeHigherNonce := mkAsk(askSpec{supplier: alice, model: "h100-sxm", price: 2_100_000, created: now, nonce: 6})
	sameTimeLowerNonce := mkAsk(askSpec{supplier: alice, model: "h100-sxm", price: 2_200_000, created: now, nonce: 4})
	later := mkAsk(askSpec{supplier: alice, model: "h100-sxm", price: 1_900_000, created: now.Add(time.Second), nonce: 1})
	earlier := mkAsk(askSpec{supplier: alice, model: "h100-sxm", price: 1_800_000, created: now.Add(-time.Second), nonce: 99})
	otherModel := mkAsk(askSpec{supplier: alice, model: "a100-80gb", price: 1_000_000, created: now, nonce: 7})
	otherSupplier := mkAsk(askSpec{supplier: bob, model: "h100-sxm", price: 2_500_000, created: now.Add(-time.Minute), nonce: 1})
	expired := mkAsk(askSpec{supplier: bob, model: "l4", price: 500_000, created: now.Add(-time.Hour), life: time.Hour})

	b := market.NewBook(clk.Now)
	steps := []struct {
		name string
		ask  *market.Ask
		want bool
		live []market.ID // Asks("h100-sxm") afterwards
	}{
		{"first", first, true, []market.ID{first.ID}},
		{"duplicate", first, false, []market.ID{first.ID}},
		{"same time, higher nonce replaces", sameTimeHigherNonce, true, []market.ID{sameTimeHigherNonce.ID}},
		{"same time, lower nonce refused", sameTimeLowerNonce, false, []market.ID{sameTimeHigherNonce.ID}},
		{"older copy of the replaced ask refused", first, false, []market.ID{sameTimeHigherNonce.ID}},
		{"later replaces", later, true, []market.ID{later.ID}},
		{"earlier refused despite higher nonce", earlier, false, []market.ID{later.ID}},
		{"other model kept apart", otherModel, true, []market.ID{later.ID}},
		{"other supplier kept apart", otherSupplier, true, []market.ID{later.ID, otherSupplier.ID}},
		{"expired refused", expired, false, []market.ID{later.ID, otherSupplier.ID}},
	}
	for _, st := range steps {
		if got := b.AddAsk(st.ask); got != st.want {
			t.Errorf("%s: AddAsk = %v, want %v", st.name, got, st.want)
		}
		if got := askIDs(b.Asks("h100-sxm")); !equalIDs(got, st.live) {
			t.Errorf("%s: Asks(h100-sxm) = %v, want %v", st.name, shortIDs(got), shortIDs(st.live))
		}
	}
	if _, ok := b.Ask(first.ID); ok {
		t.Errorf("Ask(replaced ask) found it")
	}
	if got, ok := b.Ask(later.ID); !ok || got != later {
		t.Errorf("Ask(live ask) = %v, %v; want the ask", got, ok)
	}
	if asks, bids := b.Len(); asks != 3 || bids != 0 {
		t.Errorf("Len = %d asks, %d bids; want 3, 0", asks, bids)
	}
	if b.AddAsk(nil) || b.AddAsk(&market.Ask{}) {
		t.Errorf("AddAsk accepted an empty ask")
	}
}

func TestBookReplacesExpiredAsk(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	newer := mkAsk(askSpec{supplier: "s", model: "l4", price: 1, created: now, life: time.Minute})
	b.AddAsk(newer)
	clk.Advance(2 * time.Minute)
	// An ask made before the expired one but still live takes its place.
	older := mkAsk(askSpec{supplier: "s", model: "l4", price: 2, created: now.Add(-time.Second), life: time.Hour})
	if !b.AddAsk(older) {
		t.Fatalf("AddAsk(live ask older than an expired one) = false, want true")
	}
	if got := askIDs(b.Asks("")); !equalIDs(got, []market.ID{older.ID}) {
		t.Errorf("Asks = %v, want only the live one", shortIDs(got))
	}
}

func TestBookCancelByAuthorOnly(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	ask := mkAsk(askSpec{supplier: "alice", model: "h100-sxm", price: 2_000_000, created: now})
	bid := mkBid(t, "renter", "model=h100-sxm", now, 10*time.Minute)
	b.AddAsk(ask)
	b.AddBid(bid)

	if b.Cancel(mkCancel("mallory", ask.ID)) {
		t.Errorf("Cancel(ask) by another peer = true, want false")
	}
	if b.Cancel(mkCancel("alice", bid.ID)) {
		t.Errorf("Cancel(bid) by the wrong peer = true, want false")
	}
	if asks, bids := b.Len(); asks != 1 || bids != 1 {
		t.Fatalf("after forged cancels Len = %d, %d; want 1, 1", asks, bids)
	}
	if !b.Cancel(mkCancel("alice", ask.ID)) {
		t.Errorf("Cancel(ask) by its supplier = false, want true")
	}
	if !b.Cancel(mkCancel("renter", bid.ID)) {
		t.Errorf("Cancel(bid) by its renter = false, want true")
	}
	if asks, bids := b.Len(); asks != 0 || bids != 0 {
		t.Fatalf("after cancels Len = %d, %d; want 0, 0", asks, bids)
	}
	if b.Cancel(mkCancel("alice", ask.ID)) {
		t.Errorf("second Cancel(ask) = true, want false")
	}

	// Tombstones: a late copy of a cancelled order is not re-added.
	if b.AddAsk(ask) {
		t.Errorf("AddAsk(cancelled ask) = true, want false")
	}
	if b.AddBid(bid) {
		t.Errorf("AddBid(cancelled bid) = true, want false")
	}
	if got := b.Bids("h100-sxm"); len(got) != 0 {
		t.Errorf("Bids after cancel = %d bids, want 0", len(got))
	}
	// The tombstone outlives nothing: at the order's expiry GC drops it.
	clk.Advance(10 * time.Minute)
	if n := b.GC(); n != 2 {
		t.Errorf("GC after expiry removed %d, want the 2 tombstones", n)
	}
}

func TestBookCancelBeforeOrder(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	ask := mkAsk(askSpec{supplier: "alice", model: "l4", price: 1, created: now})
	other := mkAsk(askSpec{supplier: "bob", model: "l4", price: 1, created: now})

	// A cancel that outruns its order over gossip still binds it...
	if b.Cancel(mkCancel("alice", ask.ID)) {
		t.Errorf("Cancel(unknown order) = true, want false")
	}
	if b.AddAsk(ask) {
		t.Errorf("AddAsk after its author's cancel = true, want false")
	}
	// ...but only an order by the cancel's signer.
	if b.Cancel(mkCancel("mallory", other.ID)) {
		t.Errorf("Cancel(unknown order) = true, want false")
	}
	if !b.AddAsk(other) {
		t.Errorf("AddAsk after someone else's cancel = false, want true")
	}
}

func TestBookExpiry(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	short := mkAsk(askSpec{supplier: "a", model: "h100-sxm", price: 1_000_000, created: now, life: time.Minute})
	long := mkAsk(askSpec{supplier: "b", model: "h100-sxm", price: 2_000_000, created: now, life: time.Hour})
	shortBid := mkBid(t, "r1", "model=h100-sxm", now, time.Minute)
	longBid := mkBid(t, "r2", "", now, time.Hour)
	for _, a := range []*market.Ask{short, long} {
		if !b.AddAsk(a) {
			t.Fatalf("AddAsk(%s) = false", a.ID.Short())
		}
	}
	for _, x := range []*market.Bid{shortBid, longBid} {
		if !b.AddBid(x) {
			t.Fatalf("AddBid(%s) = false", x.ID.Short())
		}
	}
	if b.AddBid(shortBid) {
		t.Errorf("AddBid(duplicate) = true, want false")
	}

	clk.Advance(time.Minute) // expiry is exclusive: at ExpiresMs the order is gone
	if got := askIDs(b.Asks("h100-sxm")); !equalIDs(got, []market.ID{long.ID}) {
		t.Errorf("Asks after expiry = %v, want only the long one", shortIDs(got))
	}
	if _, ok := b.Ask(short.ID); ok {
		t.Errorf("Ask(expired) found it")
	}
	if _, err := b.FindAsk(short.ID.String()[:10]); !errors.Is(err, market.ErrAskNotFound) {
		t.Errorf("FindAsk(expired) error = %v, want ErrAskNotFound", err)
	}
	if got := b.Bids("h100-sxm"); len(got) != 1 || got[0] != longBid {
		t.Errorf("Bids after expiry = %d bids, want only the long one", len(got))
	}
	if asks, bids := b.Len(); asks != 1 || bids != 1 {
		t.Errorf("Len after expiry = %d, %d; want 1, 1", asks, bids)
	}
	if n := b.GC(); n != 2 {
		t.Errorf("GC removed %d, want 2", n)
	}
	if n := b.GC(); n != 0 {
		t.Errorf("second GC removed %d, want 0", n)
	}
	clk.Advance(time.Hour)
	if n := b.GC(); n != 2 {
		t.Errorf("GC after everything expired removed %d, want 2", n)
	}
	if asks, bids := b.Len(); asks != 0 || bids != 0 {
		t.Errorf("Len at the end = %d, %d; want 0, 0", asks, bids)
	}
}

func TestBookAsksOrdering(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	cheapNew := mkAsk(askSpec{supplier: "a", model: "h100-sxm", price: 1_500_000, created: now})
	cheapOld := mkAsk(askSpec{supplier: "b", model: "h100-sxm", price: 1_500_000, created: now.Add(-time.Minute)})
	dear := mkAsk(askSpec{supplier: "c", model: "h100-sxm", price: 3_000_000, created: now.Add(-time.Hour + time.Second), life: time.Hour})
	cheapest := mkAsk(askSpec{supplier: "d", model: "a100-80gb", price: 900_000, created: now})
	for _, a := range []*market.Ask{dear, cheapNew, cheapest, cheapOld} {
		b.AddAsk(a)
	}
	for _, tc := range []struct {
		model string
		want  []market.ID
	}{
		{"h100-sxm", []market.ID{cheapOld.ID, cheapNew.ID, dear.ID}},
		{"a100-80gb", []market.ID{cheapest.ID}},
		{"", []market.ID{cheapest.ID, cheapOld.ID, cheapNew.ID, dear.ID}},
		{"l4", nil},
	} {
		if got := askIDs(b.Asks(tc.model)); !equalIDs(got, tc.want) {
			t.Errorf("Asks(%q) = %v, want %v", tc.model, shortIDs(got), shortIDs(tc.want))
		}
	}
}

func TestBookBidsByModel(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	h100 := mkBid(t, "r1", "model=h100-sxm", now, time.Hour)
	either := mkBid(t, "r2", "model=h100-sxm|a100-80gb", now.Add(time.Second), time.Hour)
	anyModel := mkBid(t, "r3", "vram>=40", now.Add(2*time.Second), time.Hour)
	notH100 := mkBid(t, "r4", "model!=h100-sxm", now.Add(3*time.Second), time.Hour)
	none := mkBid(t, "r5", "model=h100-sxm model=l4", now.Add(4*time.Second), time.Hour)
	for _, x := range []*market.Bid{none, notH100, anyModel, either, h100} {
		if !b.AddBid(x) {
			t.Fatalf("AddBid(%q) = false", x.Filter.String())
		}
	}
	for _, tc := range []struct {
		model string
		want  []*market.Bid
	}{
		{"h100-sxm", []*market.Bid{h100, either, anyModel, notH100}},
		{"a100-80gb", []*market.Bid{either, anyModel, notH100}},
		{"l4", []*market.Bid{anyModel, notH100}},
		{"", []*market.Bid{h100, either, anyModel, notH100, none}},
	} {
		got := b.Bids(tc.model)
		if !equalBids(got, tc.want) {
			t.Errorf("Bids(%q) = %v, want %v", tc.model, bidFilters(got), bidFilters(tc.want))
		}
	}
	if !b.Cancel(mkCancel("r2", either.ID)) {
		t.Fatalf("Cancel(bid) = false")
	}
	if got, want := b.Bids("a100-80gb"), []*market.Bid{anyModel, notH100}; !equalBids(got, want) {
		t.Errorf("Bids(a100-80gb) after cancel = %v, want %v", bidFilters(got), bidFilters(want))
	}
}

func TestBookFindAsk(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	a1 := mkAsk(askSpec{supplier: "a", model: "l4", price: 1, created: now})
	a2 := mkAsk(askSpec{supplier: "b", model: "l4", price: 1, created: now})
	a3 := mkAsk(askSpec{supplier: "c", model: "l4", price: 1, created: now})
	// a1 and a2 share their first 9 hex digits; a3 is distinct.
	a1.ID = market.ID{0xab, 0xcd, 0xef, 0x01, 0x20}
	a2.ID = market.ID{0xab, 0xcd, 0xef, 0x01, 0x2f}
	a3.ID = market.ID{0x12, 0x34, 0x56, 0x78, 0x9a}
	for _, a := range []*market.Ask{a1, a2, a3} {
		b.AddAsk(a)
	}
	for _, tc := range []struct {
		prefix  string
		want    *market.Ask
		wantErr error // nil: any error when want is nil
	}{
		{"12345678", a3, nil},
		{"123456789A", a3, nil},
		{a1.ID.String(), a1, nil},
		{"abcdef012", nil, market.ErrAmbiguousPrefix},
		{"abcdef0120", a1, nil},
		{"abcdef012f", a2, nil},
		{"ffffffff", nil, market.ErrAskNotFound},
		{"1234567", nil, nil},  // too short
		{"1234567g", nil, nil}, // not hex
		{a1.ID.String() + "0", nil, nil},
	} {
		got, err := b.FindAsk(tc.prefix)
		switch {
		case tc.want != nil && (err != nil || got != tc.want):
			t.Errorf("FindAsk(%q) = %v, %v; want ask %s", tc.prefix, got, err, tc.want.ID.Short())
		case tc.want == nil && err == nil:
			t.Errorf("FindAsk(%q) = %s, want an error", tc.prefix, got.ID.Short())
		case tc.want == nil && tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("FindAsk(%q) error = %v, want %v", tc.prefix, err, tc.wantErr)
		}
	}
}

func TestBookConcurrent(t *testing.T) {
	clk := newManualClock()
	now := clk.Now()
	b := market.NewBook(clk.Now)
	template := mkBid(t, "r", "model=l4", now, time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				s := peer.ID(fmt.Sprintf("s%d-%d", g, i%20))
				b.AddAsk(mkAsk(askSpec{supplier: s, model: "l4", price: int64(i + 1), created: now.Add(time.Duration(i) * time.Millisecond)}))
				bid := *template
				bid.Renter, bid.ID = s, testID("bid", g, i)
				b.AddBid(&bid)
				b.Asks("l4")
				b.Bids("l4")
				b.Len()
				if i%50 == 0 {
					b.GC()
				}
			}
		})
	}
	wg.Wait()
	if asks, _ := b.Len(); asks != 8*20 {
		t.Errorf("Len = %d asks, want %d (one per supplier and model)", asks, 8*20)
	}
}

func equalIDs(a, b []market.ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func shortIDs(ids []market.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Short()
	}
	return out
}

func equalBids(a, b []*market.Bid) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func bidFilters(bs []*market.Bid) string {
	out := make([]string, len(bs))
	for i, x := range bs {
		out[i] = fmt.Sprintf("%q", x.Filter.String())
	}
	return "[" + strings.Join(out, " ") + "]"
}

// benchModels spread a full book's asks so that no model is over
// MaxAsksPerModel.
var benchModels = []string{"h100-sxm", "a100-80gb", "l40s", "h200"}

// realisticAsk builds an ask the size of one decoded from gossip: a real
// Ed25519 peer ID, two multiaddrs and a ~300-byte signed envelope; ask i
// is of model benchModels[i/MaxAsksPerModel].
func realisticAsk(tb testing.TB, i int, now time.Time) *market.Ask {
	tb.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	pid, err := peer.IDFromPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	addrs := []ma.Multiaddr{
		ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/udp/4001/quic-v1", i>>16&255, i>>8&255, i&255)),
		ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", i>>16&255, i>>8&255, i&255)),
	}
	raw := make([]byte, 300)
	rand.Read(raw)
	var id market.ID
	binary.BigEndian.PutUint64(id[:], uint64(i))
	copy(id[8:], raw)
	binAddrs := make([][]byte, len(addrs))
	for j, a := range addrs {
		binAddrs[j] = a.Bytes()
	}
	return &market.Ask{
		Ask: &pb.Ask{
			Version: 1, Supplier: []byte(pid), Nonce: uint64(i), CreatedMs: ms(now), ExpiresMs: ms(now.Add(time.Hour)),
			Model: benchModels[i/market.MaxAsksPerModel%len(benchModels)], Count: 8, PriceMicros: 2_000_000 + int64(i%1000), Region: "eu-west",
			MinDurationS: 60, MaxDurationS: 86400, Pricing: "fixed", Addrs: binAddrs,
		},
		ID:       id,
		Supplier: pid,
		Addrs:    addrs,
		Raw:      raw,
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkBookMemoryFull reports what a full book (MaxAsks live asks,
// MaxAsksPerModel of each of four models) costs in heap, orders
// included: B/order and the total in MiB.
func BenchmarkBookMemoryFull(b *testing.B) {
	const n = market.MaxAsks
	now := time.Now()
	var perOrder, total float64
	for b.Loop() {
		before := heapInUse()
		book := market.NewBook(func() time.Time { return now })
		for i := range n {
			if !book.AddAsk(realisticAsk(b, i, now)) {
				b.Fatalf("AddAsk(%d) = false", i)
			}
		}
		after := heapInUse()
		if asks, _ := book.Len(); asks != n {
			b.Fatalf("Len = %d, want %d", asks, n)
		}
		runtime.KeepAlive(book)
		total = float64(after) - float64(before)
		perOrder = total / n
	}
	b.ReportMetric(perOrder, "B/order")
	b.ReportMetric(total/(1<<20), "MiB")
}

// BenchmarkBookAddAsk measures AddAsk on a full book (MaxAsks suppliers'
// asks) in steady state: each call brings a supplier's newer ask, which
// replaces its older one.
func BenchmarkBookAddAsk(b *testing.B) {
	const n = market.MaxAsks
	now := time.Now()
	book := market.NewBook(func() time.Time { return now })
	base := make([]*market.Ask, n)
	for i := range base {
		base[i] = realisticAsk(b, i, now.Add(-time.Minute))
		book.AddAsk(base[i])
	}
	next := make([]*market.Ask, 0, 1<<16)
	for i := range cap(next) {
		a := *base[i%n]
		p := proto.Clone(a.Ask).(*pb.Ask)
		p.Nonce, p.CreatedMs = uint64(n+i), ms(now)+int64(i/n)
		a.Ask = p
		binary.BigEndian.PutUint64(a.ID[:], uint64(n+i))
		next = append(next, &a)
	}
	i := 0
	for b.Loop() {
		if i == len(next) {
			b.StopTimer()
			book = market.NewBook(func() time.Time { return now })
			for _, a := range base {
				book.AddAsk(a)
			}
			i = 0
			b.StartTimer()
		}
		if !book.AddAsk(next[i]) {
			b.Fatalf("AddAsk(newer ask %d) = false", i)
		}
		i++
	}
}
