package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/clock"
	"github.com/gpumesh/gpumesh/clock/clocktest"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/light"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	vpb "github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// sellerConfig is a node config that sells gpus at prices.
func sellerConfig(t *testing.T, dir, gpus, region, pricing string, prices []string, bootstrap []string) Config {
	t.Helper()
	c := testConfig(t, dir, gpus, region, bootstrap)
	setKey(t, &c, "pricing", pricing)
	setKey(t, &c, "price", prices...)
	return c
}

// marketNet is a network of selling nodes plus a renter.
type marketNet struct {
	nodes []*Node
	rc    *light.Client
	rst   store.Store
}

func startMarketNet(t *testing.T, specs []Config) *marketNet {
	t.Helper()
	return startMarketNetClock(t, clock.Real(), specs)
}

// startMarketNetClock is startMarketNet with every node and the renter
// reading time from clk.
func startMarketNetClock(t *testing.T, clk clock.Clock, specs []Config) *marketNet {
	t.Helper()
	root := t.TempDir()
	var m marketNet
	for i, c := range specs {
		c.DataDir = filepath.Join(root, "n"+strconv.Itoa(i))
		if i > 0 {
			setKey(t, &c, "bootstrap", bootstrapOf(m.nodes[0])...)
		}
		m.nodes = append(m.nodes, startNode(t, c, WithClock(clk)))
	}
	for _, n := range m.nodes {
		if len(n.GPUs()) > 0 {
			waitAdvertised(t, n)
		}
	}
	// Wait until every seller's asks reached node 0's book.
	sellers := 0
	for _, n := range m.nodes {
		if n.Supplier() != nil {
			sellers++
		}
	}
	eventually(t, 20*time.Second, "asks in node 0's book", func() bool {
		seen := map[string]bool{}
		for _, a := range m.nodes[0].Book().Asks("") {
			seen[a.Supplier.String()] = true
		}
		return len(seen) >= sellers
	})
	m.rst = store.NewMemory()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := light.New(ctx, light.WithBootstrap(mustBootstrap(t, m.nodes[0])...), light.WithLogger(quiet()), light.WithStore(m.rst), light.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	m.rc = rc
	return &m
}

func priceOf(l *market.Lease) int64 {
	if l == nil {
		return 0
	}
	return l.PriceMicros
}

func supplierOf(l *market.Lease) string {
	if l == nil {
		return "nobody"
	}
	return l.Supplier.String()
}

// rent leases as `gpumesh rent --allow-unproven` does: these tests are
// about matching, on networks where nobody has been challenged.
func (m *marketNet) rent(t *testing.T, filter string, count int, maxPrice string) (*market.Lease, error) {
	t.Helper()
	max, err := money.ParseMicros(maxPrice)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return m.rc.Rent(ctx, market.RentRequest{AllowSimulated: true, Filter: mustFilter(t, filter), Count: count, Duration: time.Hour, MaxPrice: max, Wait: quoteWait, MinReputation: reputation.DefaultFloor, AllowUnproven: true})
}

// quoteWait bounds how long the tests' renters collect quotes. It is
// only a ceiling (a rent stops once every supplier with a matching ask
// has answered), so it is generous: beside stress-ng --cpu 2, with the
// package's other tests running, a supplier's quote once took over 3 s
// to arrive.
const quoteWait = 6 * time.Second

// TestRentEndToEnd leases over a six-node network of real libp2p hosts:
// the renter gets the cheapest acceptable quote, both sides keep the
// dual-signed lease, the supplier's capacity shrinks, the trade print
// reaches other nodes' price index, and an unmatched bid is explained.
func TestRentEndToEnd(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	m := startMarketNet(t, []Config{
		sellerConfig(t, "unset", "sim:h100-sxm:8", "eu-west", "fixed", []string{"h100-sxm=2.10"}, nil),
		sellerConfig(t, "unset", "sim:h100-sxm:4", "us-east", "fixed", []string{"h100-sxm=2.30"}, nil),
		sellerConfig(t, "unset", "sim:rtx4090:2", "us-east", "fixed", []string{"rtx4090=0.45"}, nil),
		sellerConfig(t, "unset", "sim:h100-sxm:1", "eu-west", "fixed", []string{"h100-sxm=1.00"}, nil),
		sellerConfig(t, "unset", "sim:l40s:2", "ap-south", "fixed", []string{"l40s=0.90"}, nil),
		testConfig(t, "unset", "none", "eu-west", nil),
	})
	cheap, h100 := m.nodes[3], m.nodes[0]

	// Two GPUs: the 1.00 supplier has only one, so the 2.10 one wins.
	l, err := m.rent(t, "model=h100-sxm", 2, "2.50")
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if l.Supplier != h100.ID() || l.PriceMicros != 2_100_000 || l.Count != 2 || len(l.GpuUuids) != 2 || l.Renter != m.rc.Network().Host.ID() {
		t.Fatalf("lease %+v from %s, want 2 × h100-sxm at 2.10 from %s", l.Lease, l.Supplier, h100.ID())
	}
	if got := l.End().Sub(l.Start()); got != time.Hour {
		t.Fatalf("lease lasts %s, want 1h", got)
	}
	// Both sides keep it; the supplier's capacity shrinks by two.
	eventually(t, 5*time.Second, "supplier keeps the confirmed lease", func() bool {
		ls, _ := leaseViews(h100.store, time.Now())
		return len(ls) == 1 && ls[0].State == "confirmed" && ls[0].LeaseID == l.ID.String()
	})
	if rl, _ := leaseViews(m.rst, time.Now()); len(rl) != 1 || rl[0].Role != "renter" {
		t.Fatalf("renter keeps %+v", rl)
	}
	if free := h100.Supplier().Ledger().Free("h100-sxm"); free != 6 {
		t.Fatalf("supplier has %d free, want 6", free)
	}
	// The trade print reaches a node that took no part and knows the
	// supplier's reputation.
	pass(t, m.nodes[5], h100, "h100-sxm", 8)
	eventually(t, 10*time.Second, "trade print in node 5's index", func() bool {
		p, ok := m.nodes[5].PriceIndex().Get("h100-sxm")
		return ok && p.Trades == 1 && p.LastMicros == 2_100_000
	})

	// One GPU: the 1.00 supplier is cheapest.
	l, err = m.rent(t, "model=h100-sxm", 1, "2.50")
	if err != nil || l.Supplier != cheap.ID() || l.PriceMicros != 1_000_000 {
		t.Fatalf("rent 1: lease at %d from %s, err %v; want one at 1.00 from %s", priceOf(l), supplierOf(l), err, cheap.ID())
	}

	// Now it is booked: a bid for 3 at most 2.00 matches nobody, and says why.
	_, err = m.rent(t, "model=h100-sxm", 3, "2.00")
	var nm *market.NoMatch
	if !errors.As(err, &nm) {
		t.Fatalf("err = %v, want NoMatch", err)
	}
	why := strings.Join(nm.Reasons, "; ")
	for _, want := range []string{"3 suppliers have h100-sxm", "fully booked", "cheapest free one asks 2.10 > your max 2.00"} {
		if !strings.Contains(why, want) {
			t.Errorf("reasons %q lack %q", why, want)
		}
	}
	_, err = m.rent(t, "model=h200", 1, "9")
	if !errors.As(err, &nm) || !strings.Contains(strings.Join(nm.Reasons, ";"), "no supplier offers h200") {
		t.Fatalf("model=h200: %v", err)
	}
}

// TestPricingModes checks what each mode quotes over the network.
func TestPricingModes(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:a100-80gb:4", "eu-west", "dynamic", []string{"a100-80gb=1.40"}, nil),
		sellerConfig(t, "unset", "sim:rtx4090:2", "us-east", "fixed", []string{"rtx4090=0.50"}, nil),
		sellerConfig(t, "unset", "sim:rtx4090:2", "us-east", "auction", []string{"rtx4090=0.60"}, nil),
	})
	// dynamic at zero utilization and no index: 0.8 × list.
	l, err := m.rent(t, "model=a100-80gb", 1, "2")
	if err != nil || l.PriceMicros != 1_120_000 {
		t.Fatalf("dynamic: lease at %d, err %v; want price 1.12", priceOf(l), err)
	}
	// With one of four leased, and the first trade (1.12) in its price
	// index, the base is (1.40 + 1.12) / 2 = 1.26 and the quote
	// 1.26 × (0.8 + 0.6 × 1/4) = 1.197.
	eventually(t, 5*time.Second, "first trade in the supplier's index", func() bool {
		_, ok := m.nodes[1].PriceIndex().Get("a100-80gb")
		return ok
	})
	l2, err := m.rent(t, "model=a100-80gb", 1, "2")
	if err != nil || l2.PriceMicros != 1_197_000 {
		t.Fatalf("dynamic after a lease: lease at %d, err %v", priceOf(l2), err)
	}
	// auction: undercuts the fixed 0.50 ask by 1%, below its own list 0.60,
	// once the fixed supplier's ask is listed in its book (a book lists an
	// ask only once it holds the supplier's profile).
	eventually(t, 30*time.Second, "the fixed ask listed in the auction supplier's book", func() bool {
		for _, a := range m.nodes[3].Book().Asks("rtx4090") {
			if a.Supplier == m.nodes[2].ID() {
				return true
			}
		}
		return false
	})
	l, err = m.rent(t, "model=rtx4090", 1, "1")
	if err != nil || l.PriceMicros != 495_000 || l.Supplier != m.nodes[3].ID() {
		t.Fatalf("auction: lease at %d from %s, err %v; want 0.495 from the auction supplier", priceOf(l), supplierOf(l), err)
	}
	// fixed: the list price (half its GPUs: at most half are leased with
	// no job on them).
	l, err = m.rent(t, "model=rtx4090 price<=0.50", 1, "0.50")
	if err != nil || l.PriceMicros != 500_000 || l.Supplier != m.nodes[2].ID() {
		t.Fatalf("fixed: lease at %d from %s, err %v; want 0.50 from the fixed supplier", priceOf(l), supplierOf(l), err)
	}
}

// TestConcurrentProposalsNeverOverbook sends 50 proposals for one GPU each
// at once, from 10 renters, to a supplier of 8: exactly 4 leases (at most
// half its GPUs are held with no job on them), each GPU once. The others
// are refused as busy or (a renter holding MaxRenterHolds leases with no
// job) as unclaimed; a proposal on an ask
// the supplier replaced meanwhile is made again on its current ask, until
// it sells out and withdraws it.
func TestConcurrentProposalsNeverOverbook(t *testing.T) {
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:8", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
	})
	sup := m.nodes[1]
	current := func() *market.Ask {
		for _, a := range sup.Book().Asks("h100-sxm") {
			if a.Supplier == sup.ID() {
				return a
			}
		}
		return nil
	}
	ask := current()
	if ask == nil {
		t.Fatal("the supplier posts no ask")
	}
	renters := make([]*market.Renter, 10)
	for i := range renters {
		key := newTestKey(t)
		net, err := p2p.New(p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { net.Close() })
		// Connected beforehand, so that the proposals race each other
		// rather than the dials.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = net.Host.Connect(ctx, peer.AddrInfo{ID: ask.Supplier, Addrs: ask.Addrs})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		renters[i] = market.NewRenter(market.RenterConfig{Net: net, Key: key, Log: quiet()})
	}
	start := make(chan struct{})
	var (
		wg                   sync.WaitGroup
		leased, busy, capped atomic.Int32
		uuids                sync.Map
	)
	refused := func(err error, code market.Decline) bool {
		var nm *market.NoMatch
		return errors.As(err, &nm) && strings.Contains(nm.Error(), "refused: "+string(code)+":")
	}
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			<-start
			for a := ask; a != nil; a = current() {
				l, err := renters[i%len(renters)].TakeAsk(ctx, a, 1, time.Hour, market.Terms{})
				switch {
				case err == nil:
					leased.Add(1)
					if _, dup := uuids.LoadOrStore(l.GpuUuids[0], true); dup {
						t.Errorf("GPU %s leased twice", l.GpuUuids[0])
					}
				case refused(err, market.DeclineBusy):
					busy.Add(1)
				case refused(err, market.DeclineUnclaimed):
					capped.Add(1)
				case strings.Contains(err.Error(), "that ask was replaced"):
					continue
				default:
					t.Errorf("proposal: %v", err)
				}
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	if leased.Load() != 4 {
		t.Fatalf("%d leased, %d refused as busy, %d as unclaimed; want 4 leased", leased.Load(), busy.Load(), capped.Load())
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 4 {
		t.Fatalf("%d free after leasing half, want 4", free)
	}
}

// TestUnconfirmedReservationLapses plays a renter that vanishes after the
// supplier countersigns: the GPUs come back within the confirm window.
func TestUnconfirmedReservationLapses(t *testing.T) {
	t.Parallel() // waits on the confirm window, not the CPU
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:4", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
	})
	sup := m.nodes[1]
	ask := sup.Book().Asks("h100-sxm")[0]
	now := time.Now()
	raw, err := market.SealProposal(&pb.LeaseProposal{
		Supplier: []byte(sup.ID()), Nonce: 7, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
		Ask: ask.Raw, Model: "h100-sxm", Count: 2, PriceMicros: ask.PriceMicros, DurationS: 3600,
	}, m.rc.Network().Host.Peerstore().PrivKey(m.rc.Network().Host.ID()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.rc.Network().Host.Connect(ctx, peer.AddrInfo{ID: sup.ID(), Addrs: sup.Addrs()}); err != nil {
		t.Fatal(err)
	}
	st, err := m.rc.Network().Host.NewStream(ctx, sup.ID(), market.LeaseProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2p.WriteRaw(st, raw); err != nil {
		t.Fatal(err)
	}
	var resp pb.LeaseResponse
	if err := p2p.ReadMsg(st, market.LeaseType.MaxSize+1024, &resp); err != nil || len(resp.Lease) == 0 {
		t.Fatalf("no countersigned lease: %v %q", err, resp.Refused)
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 2 {
		t.Fatalf("%d free while reserved, want 2", free)
	}
	st.Reset() // the renter vanishes without confirming
	eventually(t, market.ConfirmWindow+5*time.Second, "reservation released", func() bool {
		return sup.Supplier().Ledger().Free("h100-sxm") == 4
	})
	ls, _ := leaseViews(sup.store, time.Now())
	if len(ls) != 1 || ls[0].State != "lapsed" {
		t.Fatalf("supplier's lease records: %+v, want one lapsed", ls)
	}
}

// TestSupplierRestartKeepsLeases restarts a supplier on its data dir: its
// leases and the capacity they hold survive, and its new ask says so.
func TestSupplierRestartKeepsLeases(t *testing.T) {
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:8", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
	})
	sup := m.nodes[1]
	l, err := m.rent(t, "model=h100-sxm", 3, "3")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "lease confirmed", func() bool {
		ls, _ := leaseViews(sup.store, time.Now())
		return len(ls) == 1 && ls[0].State == "confirmed"
	})
	cfg := sup.cfg
	if err := sup.Close(); err != nil {
		t.Fatal(err)
	}
	// Shutting down cancelled its ask, and Close returned only once a
	// peer's book had dropped it: no waiting here.
	if asks := m.nodes[0].Book().Asks("h100-sxm"); len(asks) != 0 {
		t.Fatalf("after the supplier's Close, node 0 still lists %d of its asks", len(asks))
	}
	again := startNode(t, cfg)
	if free := again.Supplier().Ledger().Free("h100-sxm"); free != 5 {
		t.Fatalf("after restart %d free, want 5", free)
	}
	ls, _ := leaseViews(again.store, time.Now())
	if len(ls) != 1 || ls[0].LeaseID != l.ID.String() || ls[0].State != "confirmed" {
		t.Fatalf("after restart leases %+v", ls)
	}
	reposted := func() bool {
		for _, a := range m.nodes[0].Book().Asks("h100-sxm") {
			if a.Supplier == again.ID() && a.Count == 5 {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !reposted() {
		if time.Now().After(deadline) {
			var own, seen []string
			for _, a := range again.Book().Asks("") {
				own = append(own, fmt.Sprintf("%s×%d", a.Model, a.Count))
			}
			for _, a := range m.nodes[0].Book().Asks("") {
				seen = append(seen, fmt.Sprintf("%s:%s×%d", a.Supplier.ShortString(), a.Model, a.Count))
			}
			asks, _ := m.nodes[0].Book().Len()
			t.Fatalf("timed out after 10s waiting for the re-posted ask for 5 at node 0: connected %v, orders-topic peers of the supplier %d, node 0 trusts its profile %v, the supplier's own asks %v, node 0's listed asks %v (%d held)",
				m.nodes[0].net.Host.Network().Connectedness(again.ID()), len(again.market.orders.Peers()),
				m.nodes[0].market.trust.ProfileHas(again.ID(), "h100-sxm", nil, 5), own, seen, asks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestForgedOrdersAreDropped has an attacker publish, on the orders topic
// without validating them itself, an ask naming another supplier, an
// expired ask, garbage, and another supplier's ask as its own; then a
// valid ask. Only the valid one reaches the books, and the attacker's
// score falls.
func TestForgedOrdersAreDropped(t *testing.T) {
	t.Parallel()
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:2", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
	})
	seller := m.nodes[1]
	att, err := p2p.New(p2p.Config{Key: newTestKey(t), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, PubSub: true, Bootstrap: mustBootstrap(t, m.nodes[0]), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := att.Bootstrap(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	topic, err := att.PubSub.Join(market.OrdersTopic)
	if err != nil {
		t.Fatal(err)
	}
	attKey := att.Host.Peerstore().PrivKey(att.Host.ID())
	now := time.Now()
	ask := func(supplier []byte, model string, created time.Time) *pb.Ask {
		return &pb.Ask{Version: 1, Supplier: supplier, Nonce: uint64(created.UnixNano()), CreatedMs: created.UnixMilli(),
			ExpiresMs: created.Add(time.Minute).UnixMilli(), Model: model, Count: 8, PriceMicros: 100_000,
			MinDurationS: 60, MaxDurationS: 3600, Pricing: "fixed", Addrs: [][]byte{att.Host.Addrs()[0].Bytes()}}
	}
	forged, _ := p2p.Seal(market.AskType, ask([]byte(seller.ID()), "h200", now), attKey)
	expired, _ := market.SealAsk(ask(nil, "h200", now.Add(-2*time.Minute)), attKey)
	theirs := seller.Book().Asks("h100-sxm")[0].Raw
	valid, _ := market.SealAsk(ask(nil, "t4", now), attKey)
	validBid, _ := market.SealBid(&pb.Bid{Nonce: uint64(now.UnixNano()) + 1, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
		Filter: "model=t4", Count: 1, DurationS: 3600, MaxPriceMicros: 1_000_000, Addrs: [][]byte{att.Host.Addrs()[0].Bytes()}}, attKey)
	eventually(t, 10*time.Second, "attacker in the orders mesh", func() bool { return len(topic.ListPeers()) > 0 })
	for _, msg := range [][]byte{forged, expired, []byte("garbage"), theirs, valid, validBid} {
		if err := topic.Publish(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the valid bid in node 0's book", func() bool { return len(m.nodes[0].Book().Bids("")) == 1 })
	// The valid ask is held but not listed: its supplier has no profile.
	if got := m.nodes[0].Book().Asks("t4"); len(got) != 0 {
		t.Fatalf("node 0 lists an ask of a supplier without a profile: %+v", got[0].Ask)
	}
	for _, n := range m.nodes {
		if got := n.Book().Asks("h200"); len(got) != 0 {
			t.Fatalf("node %s keeps forged or expired asks: %d", n.ID(), len(got))
		}
		for _, a := range n.Book().Asks("h100-sxm") {
			if a.Supplier != seller.ID() {
				t.Fatalf("node %s attributes an h100-sxm ask to %s", n.ID(), a.Supplier)
			}
		}
	}
	eventually(t, 10*time.Second, "attacker penalised", func() bool {
		for _, n := range m.nodes {
			if n.net.PeerScores()[att.Host.ID()] < 0 {
				return true
			}
		}
		return false
	})
}

// TestRentAvoidsFailedSupplier: a supplier that failed a challenge of a
// node the renter trusts (its bootstrap peer) is never picked while an
// honest one is available, even though it is cheaper; search shows why.
func TestRentAvoidsFailedSupplier(t *testing.T) {
	t.Parallel()
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:4", "eu-west", "fixed", []string{"h100-sxm=1.00"}, nil),
		sellerConfig(t, "unset", "sim:h100-sxm:4", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
	})
	auditor, impostor, honest := m.nodes[0], m.nodes[1], m.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range []struct {
		n      *Node
		passed bool
	}{{impostor, false}, {honest, true}} {
		_, err := auditor.Attest(ctx, &vpb.Attestation{
			Subject: []byte(v.n.ID()), Kind: reputation.KindChallenge, Passed: v.passed, Reason: "test verdict",
			Gpus: 4, Model: "h100-sxm", ChallengeId: make([]byte, 32), CreatedMs: time.Now().UnixMilli(),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The verdicts reach the other nodes by gossip.
	eventually(t, 10*time.Second, "attestations gossiped", func() bool { return honest.Reputation().Len() >= 2 })

	l, err := m.rent(t, "model=h100-sxm", 1, "3")
	if err != nil {
		t.Fatal(err)
	}
	if l.Supplier != honest.ID() {
		t.Fatalf("leased from %s, want the honest supplier %s (the cheaper one failed a challenge)", l.Supplier, honest.ID())
	}
	// Search shows the standing the renter's bootstrap node reports.
	lc, err := light.New(ctx, light.WithBootstrap(mustBootstrap(t, auditor)...), light.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	offers, err := lc.Search(ctx, mustFilter(t, "model=h100-sxm"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if o.Reputation == nil {
			t.Fatalf("offer without reputation: %+v", o)
		}
		if o.PeerID == impostor.ID().String() && *o.Reputation >= reputation.DefaultFloor {
			t.Fatalf("failed supplier at reputation %.2f", *o.Reputation)
		}
		if o.PeerID == honest.ID().String() && *o.Reputation <= reputation.DefaultFloor {
			t.Fatalf("passed supplier at reputation %.2f", *o.Reputation)
		}
	}
	// And a filter on reputation leaves the failed one out.
	if got, _ := lc.Search(ctx, mustFilter(t, "model=h100-sxm rep>=0.5")); len(got) != 1 || got[0].PeerID != honest.ID().String() {
		t.Fatalf("rep>=0.5 gives %+v", got)
	}
}

// TestFreedCapacityIsAdvertisedAtOnce: when a lease ends, the supplier
// re-posts its ask with the freed GPUs at once, not at the ask's next
// renewal (half of its 10 min lifetime). The nodes share a clock the test
// moves past the lease's end.
func TestFreedCapacityIsAdvertisedAtOnce(t *testing.T) {
	t.Parallel() // its own nodes and clock
	clk := clocktest.New()
	m := startMarketNetClock(t, clk, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:8", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
	})
	sup := m.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := m.rc.Rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=h100-sxm"), Count: 3, Duration: market.MinDuration, MaxPrice: 3_000_000, Wait: quoteWait})
	if err != nil {
		t.Fatal(err)
	}
	advertised := func(count uint32) func() bool {
		return func() bool {
			for _, a := range m.nodes[0].Book().Asks("h100-sxm") {
				if a.Supplier == sup.ID() && a.Count == count {
					return true
				}
			}
			return false
		}
	}
	eventually(t, 10*time.Second, "ask for the 5 GPUs left", advertised(5))
	if advertised(8)() {
		t.Fatal("the ask for all 8 GPUs is listed while 3 are leased")
	}
	// The lease ends; the ask for all 8 must follow within seconds (a
	// renewal would come 5 minutes after the last post).
	clk.Advance(l.End().Sub(clk.Now()))
	eventually(t, 15*time.Second, "ask for 8 GPUs after the lease ended", advertised(8))
}
