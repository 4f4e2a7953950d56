package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/p2ptest"
	p2ppb "github.com/gpumesh/gpumesh/p2p/pb"
	vpb "github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// attacker is a real libp2p host joined to boot that gossips on a market
// topic records signed by keys of its choosing, as a Sybil relay does.
type attacker struct {
	net   *p2p.Network
	topic *pubsub.Topic
}

func newAttacker(t *testing.T, boot *Node, topic string) *attacker {
	t.Helper()
	att, err := p2p.New(p2p.Config{Key: newTestKey(t), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: mustBootstrap(t, boot), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { att.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := att.Bootstrap(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Its own GossipSub, with no validator and a deep queue: it sends
	// whatever it likes, as fast as the link takes it.
	psCtx, stopPS := context.WithCancel(context.Background())
	t.Cleanup(stopPS) // before att.Close: cleanups run last first
	ps, err := pubsub.NewGossipSub(psCtx, att.Host, pubsub.WithFloodPublish(true), pubsub.WithPeerOutboundQueueSize(1<<14))
	if err != nil {
		t.Fatal(err)
	}
	// It publishes as the version 2 topics carry records: without
	// pubsub's signature, its author (from) whoever it names.
	if err := p2ptest.StripSignatures(ps, topic); err != nil {
		t.Fatal(err)
	}
	tp, err := ps.Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "attacker sees node 0 in the topic", func() bool {
		for _, p := range tp.ListPeers() {
			if p == boot.ID() {
				return true
			}
		}
		return false
	})
	return &attacker{net: att, topic: tp}
}

// publish gossips data as key's peer (the pubsub message's author,
// unsigned: StripSignatures).
func (a *attacker) publish(t *testing.T, data []byte, key crypto.PrivKey) {
	t.Helper()
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.topic.Publish(context.Background(), data, pubsub.WithSecretKeyAndPeerId(key, id)); err != nil {
		t.Fatal(err)
	}
}

func freshKey(t *testing.T) crypto.PrivKey {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// selfDealtPrint is a valid trade print of a lease between two keys of
// one attacker: supplier takes its own ask at price with renter's
// signature, for GPUs that exist nowhere.
func selfDealtPrint(t *testing.T, supplier, renter crypto.PrivKey, model string, price int64, i int) []byte {
	t.Helper()
	now := time.Now()
	sup, _ := peer.IDFromPrivateKey(supplier)
	ren, _ := peer.IDFromPrivateKey(renter)
	n := uint64(now.UnixNano()) + uint64(i)
	ask, err := market.SealAsk(&pb.Ask{Nonce: n, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
		Model: model, Count: 8, PriceMicros: price, MinDurationS: 60, MaxDurationS: 3600, Pricing: "fixed"}, supplier)
	if err != nil {
		t.Fatal(err)
	}
	prop, err := market.SealProposal(&pb.LeaseProposal{Supplier: []byte(sup), Nonce: n, CreatedMs: now.UnixMilli(),
		ExpiresMs: now.Add(30 * time.Second).UnixMilli(), Ask: ask, Model: model, Count: 1, PriceMicros: price, DurationS: 3600}, renter)
	if err != nil {
		t.Fatal(err)
	}
	id := market.IDOf(prop)
	lease, err := market.SealLease(&pb.Lease{Proposal: prop, Renter: []byte(ren), LeaseId: id[:], StartMs: now.UnixMilli(),
		EndMs: now.Add(time.Hour).UnixMilli(), Model: model, Count: 1, PriceMicros: price,
		GpuUuids: []string{fmt.Sprintf("GPU-sybil-%d", i)}, ConfirmByMs: now.Add(30 * time.Second).UnixMilli()}, supplier)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := market.SealTradePrint(&pb.TradePrint{Nonce: n, CreatedMs: now.UnixMilli(), Lease: lease}, supplier)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// pass has by attest that sup passed a challenge of gpus GPUs of model,
// so that by knows sup's reputation.
func pass(t *testing.T, by, sup *Node, model string, gpus uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := by.Attest(ctx, &vpb.Attestation{
		Subject: []byte(sup.ID()), Kind: reputation.KindChallenge, Passed: true, Reason: "test verdict",
		Gpus: gpus, Model: model, ChallengeId: make([]byte, 32), CreatedMs: time.Now().UnixMilli(),
	}); err != nil {
		t.Fatal(err)
	}
}

// TestSelfDealtPrintsDoNotMovePrices (issue 9, defect 5): two fresh keys
// (no profile, no GPUs, no reputation) gossip 15 valid trade prints of
// leases between themselves at 50.00. The price index and the dynamic
// supplier's quote do not move, while the prints of a profiled supplier
// count, once per supplier–renter pair.
func TestSelfDealtPrintsDoNotMovePrices(t *testing.T) {
	t.Parallel()
	const model = "a100-80gb"
	m := startMarketNet(t, []Config{
		sellerConfig(t, "unset", "sim:a100-80gb:4", "eu-west", "dynamic", []string{"a100-80gb=1.40"}, nil),
		sellerConfig(t, "unset", "sim:a100-80gb:3", "eu-west", "fixed", []string{"a100-80gb=0.80"}, nil),
	})
	dynamic, honest := m.nodes[0], m.nodes[1]
	// The dynamic supplier believes only prints of suppliers it knows.
	pass(t, dynamic, honest, model, 3)
	// Two real trades of one renter with the honest supplier: both count
	// only once (one supplier–renter pair within an hour).
	for i := range 2 {
		l, err := m.rent(t, "model="+model, 1, "5")
		if err != nil || l.Supplier != honest.ID() || l.PriceMicros != 800_000 {
			t.Fatalf("honest trade %d: lease at %d from %s, err %v; want 0.80 from %s", i, priceOf(l), supplierOf(l), err, honest.ID())
		}
	}
	eventually(t, 15*time.Second, "both honest prints at the dynamic supplier", func() bool { return dynamic.PriceIndex().Held(model) == 2 })
	if pp, ok := dynamic.PriceIndex().Get(model); !ok || pp.Trades != 1 || pp.MedianMicros != 800_000 {
		t.Fatalf("index after two trades of one pair = %+v, %v; want 1 trade at 0.80", pp, ok)
	}

	att := newAttacker(t, dynamic, market.TradesTopic)
	supplierKey := att.net.Host.Peerstore().PrivKey(att.net.Host.ID())
	renterKey := freshKey(t)
	for i := range 15 {
		att.publish(t, selfDealtPrint(t, supplierKey, renterKey, model, 50_000_000, i), supplierKey)
	}
	eventually(t, 20*time.Second, "the 15 self-dealt prints at the dynamic supplier", func() bool { return dynamic.PriceIndex().Held(model) == 17 })
	if got := dynamic.PriceIndex().Median(model); got != 800_000 {
		t.Fatalf("median after 15 self-dealt prints at 50.00 = %s, want 0.80", money.Micros(got).String())
	}
	if pp, _ := dynamic.PriceIndex().Get(model); pp.Trades != 1 || pp.MaxMicros != 800_000 {
		t.Fatalf("self-dealt prints count: %+v", pp)
	}

	// The honest supplier holds as many GPUs with no job on them as it
	// allows (two of three): the next renter gets the dynamic
	// supplier's quote, priced from the honest index only.
	pricer := dynamic.cfg.Pricer()
	want, _ := pricer.Quote(market.PriceInput{Model: model, Count: 1, DurationS: 3600, Index: 800_000})
	l, err := m.rent(t, "model="+model, 1, "5")
	if err != nil || l.Supplier != dynamic.ID() {
		t.Fatalf("rent from the dynamic supplier: lease from %s, err %v", supplierOf(l), err)
	}
	if l.PriceMicros != want {
		t.Fatalf("dynamic supplier quoted %s after the self-dealt prints, want %s", money.Micros(l.PriceMicros).String(), money.Micros(want).String())
	}
}

// TestSybilOrdersCannotFillTheBook (issue 9, defect 7): one relaying peer
// gossips 1,600 valid bids and 160 asks from 160 fresh keys: more asks
// than one relay may bring (MaxAsksPerRelay), more bids than one relay
// (MaxBidsPerRelay) and each author (MaxBidsPerRenter) may bring. Node 0's
// book stays within its caps, asks whose supplier has no profile are not
// listed, served or counted by rent's explanation, and the relay's score
// goes down, not up. Rent's default screen then leases from the proven
// supplier, not from a cheaper fresh one, and says why it leaves the
// fresh one out.
func TestSybilOrdersCannotFillTheBook(t *testing.T) {
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:h100-sxm:2", "eu-west", "fixed", []string{"h100-sxm=2.00"}, nil),
		sellerConfig(t, "unset", "sim:h100-sxm:2", "eu-west", "fixed", []string{"h100-sxm=1.00"}, nil),
	})
	victim, proven, fresh := m.nodes[0], m.nodes[1], m.nodes[2]

	att := newAttacker(t, victim, market.OrdersTopic)
	relay := att.net.Host.ID()
	now := time.Now()
	nonce := uint64(now.UnixNano())
	bid := func(key crypto.PrivKey) []byte {
		nonce++
		raw, err := market.SealBid(&pb.Bid{Nonce: nonce, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(5 * time.Minute).UnixMilli(),
			Filter: "model=t4", Count: 1, DurationS: 3600, MaxPriceMicros: 1_000_000,
			Addrs: [][]byte{att.net.Host.Addrs()[0].Bytes()}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	keys := make([]crypto.PrivKey, 160)
	if len(keys) <= market.MaxAsksPerRelay || len(keys)*10 <= market.MaxBidsPerRelay || 10 <= market.MaxBidsPerRenter {
		t.Fatal("the flood must exceed the caps it tests")
	}
	sent := 0
	for k := range keys {
		keys[k] = freshKey(t)
		ask, err := market.SealAsk(&pb.Ask{Nonce: nonce, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(5 * time.Minute).UnixMilli(),
			Model: "h100-sxm", Count: 8, PriceMicros: 100_000, MinDurationS: 60, MaxDurationS: 86400, Pricing: "fixed"}, keys[k])
		if err != nil {
			t.Fatal(err)
		}
		att.publish(t, ask, keys[k])
		for range 10 {
			att.publish(t, bid(keys[k]), keys[k])
			if sent++; sent%20 == 0 {
				time.Sleep(5 * time.Millisecond) // pace the flood so the victim validates rather than drops it
			}
		}
		if k == 0 {
			first, _ := peer.IDFromPrivateKey(keys[0])
			eventually(t, 10*time.Second, "the first Sybil's bids in node 0's book", func() bool {
				n := 0
				for _, b := range victim.Book().Bids("") {
					if b.Renter == first {
						n++
					}
				}
				return n >= market.MaxBidsPerRenter
			})
		}
	}
	// The relay is penalised for the bids over their authors' cap. A
	// loaded victim may have dropped much of the flood unread, so the
	// first Sybil, at its cap, keeps sending within its rate limit until
	// the penalty shows (pubsub refreshes scores every 5 s).
	eventually(t, 60*time.Second, "the relay's score below zero", func() bool {
		if s, ok := victim.net.PeerScores()[relay]; ok && s < 0 {
			return true
		}
		for range 5 {
			att.publish(t, bid(keys[0]), keys[0])
		}
		time.Sleep(500 * time.Millisecond)
		return false
	})
	// Honest nodes relay some of the flood too, each within its own cap.
	asks, bids := victim.Book().HeldFrom(relay)
	if asks > market.MaxAsksPerRelay || bids > market.MaxBidsPerRelay {
		t.Fatalf("node 0 holds %d asks and %d bids from one relay; caps %d and %d", asks, bids, market.MaxAsksPerRelay, market.MaxBidsPerRelay)
	}
	if asks, bids = victim.Book().Held(); asks > market.MaxAsksPerModel || bids > market.MaxBids {
		t.Fatalf("node 0 holds %d asks and %d bids; caps %d and %d", asks, bids, market.MaxAsksPerModel, market.MaxBids)
	}
	for _, a := range victim.Book().Asks("h100-sxm") {
		if a.Supplier != proven.ID() && a.Supplier != fresh.ID() {
			t.Fatalf("node 0 lists the ask of %s, which has no profile", a.Supplier)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	served, err := market.QueryBook(ctx, m.rc.Network().Host, victim.ID(), []string{"h100-sxm"}, time.Now())
	if err != nil || len(served) != 2 {
		t.Fatalf("node 0 serves %d h100-sxm asks (err %v), want the 2 of profiled suppliers", len(served), err)
	}

	// Node 0 (the renter's bootstrap, so trusted) passed one supplier.
	if _, err := victim.Attest(ctx, &vpb.Attestation{
		Subject: []byte(proven.ID()), Kind: reputation.KindChallenge, Passed: true, Reason: "test verdict",
		Gpus: 2, Model: "h100-sxm", ChallengeId: make([]byte, 32), CreatedMs: time.Now().UnixMilli(),
	}); err != nil {
		t.Fatal(err)
	}
	rent := func(maxPrice money.Micros) (*market.Lease, error) {
		return m.rc.Rent(ctx, market.RentRequest{AllowSimulated: true, Filter: mustFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour,
			MaxPrice: maxPrice, Wait: quoteWait, MinReputation: reputation.DefaultFloor})
	}
	// Below the proven supplier's price only the fresh one could serve:
	// the default screen leaves it out and says so, counting the two
	// profiled suppliers only.
	_, err = rent(1_500_000)
	var nm *market.NoMatch
	if !errors.As(err, &nm) {
		t.Fatalf("rent at most 1.50: err %v, want a NoMatch", err)
	}
	why := strings.Join(nm.Reasons, "; ")
	if !strings.Contains(why, "2 suppliers have h100-sxm") || !strings.Contains(why, "1 is unproven") {
		t.Fatalf("rent at most 1.50 explained %q; want the 2 profiled suppliers and the unproven one left out", why)
	}
	l, err := rent(3_000_000)
	if err != nil || l.Supplier != proven.ID() {
		t.Fatalf("rent at most 3.00: lease from %s (err %v), want the proven supplier %s, not the fresh %s", supplierOf(l), err, proven.ID(), fresh.ID())
	}
}

// TestRefusedSuppliersAreNotListed: a supplier the node's gater refuses
// (banned, or cut off for flooding gossip) has its asks unlisted while it
// is refused, whatever its profile claims, and listed again after.
func TestRefusedSuppliersAreNotListed(t *testing.T) {
	key := freshKey(t)
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	refused := true
	tv := newTrustView("self", time.Now, func(p peer.ID) bool { return refused && p == id })
	now := time.Now()
	raw, err := p2p.SealProfile(&p2ppb.Profile{Version: p2p.RecordVersion, Seq: 1, IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(),
		Gpus: []*p2ppb.GPU{{Model: "h100-sxm", Uuid: "GPU-1", MemoryBytes: 80 << 30}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := p2p.OpenProfile(raw, now)
	if err != nil {
		t.Fatal(err)
	}
	tv.observe(prof)
	if tv.ProfileHas(id, "h100-sxm", nil, 1) {
		t.Fatal("a refused supplier's ask is listed")
	}
	refused = false
	if !tv.ProfileHas(id, "h100-sxm", nil, 1) {
		t.Fatal("the supplier's ask is not listed once it is no longer refused")
	}
}
