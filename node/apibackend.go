package node

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// apiBackend is the node as the API's handlers see it (api.Backend).
type apiBackend struct {
	n       *Node
	started time.Time // when the API started, for Health's uptime
}

var _ api.Backend = (*apiBackend)(nil)

func (b *apiBackend) Health() api.Health {
	n := b.n
	advertised := false
	select {
	case <-n.advertOK:
		advertised = true
	default:
	}
	h := api.Health{
		Status: "ok", PeerID: n.id.String(), Peers: len(n.net.Host.Network().Peers()),
		GPUs: len(n.gpus), Region: n.cfg.Region, Advertised: advertised,
		ProfileSeq: n.currentProfileSeq(), Version: Version,
		Uptime: n.now().Sub(b.started).Truncate(time.Second).String(),
	}
	for _, a := range n.Addrs() {
		h.Addrs = append(h.Addrs, a.String())
	}
	return h
}

// Peers lists connected peers and those heard from by heartbeat.
func (b *apiBackend) Peers() []api.Peer {
	n := b.n
	var peers []api.Peer
	byID := map[string]int{}
	for i, s := range n.peers.list(n.now()) {
		peers = append(peers, s.Peer)
		byID[s.ID.String()] = i
	}
	scores := n.net.PeerScores()
	for i := range peers {
		peers[i].Score = scores[peers[i].ID]
	}
	for _, id := range n.net.Host.Network().Peers() {
		i, ok := byID[id.String()]
		if !ok {
			peers = append(peers, api.Peer{ID: id, Score: scores[id]})
			i = len(peers) - 1
		}
		peers[i].Connected = true
		switch c := n.net.ConnTo(id); {
		case c.Direct:
			peers[i].Conn = "direct"
		case c.Relayed:
			peers[i].Conn = "relayed"
		}
		if d, ok := n.net.PunchTime(id); ok {
			peers[i].PunchMs = float64(d.Microseconds()) / 1000
		}
		if rtt := n.net.Host.Peerstore().LatencyEWMA(id); rtt > 0 {
			peers[i].LatencyMs = float64(rtt.Microseconds()) / 1000
		}
	}
	for i := range peers {
		s := n.verify.rep.Score(peers[i].ID)
		peers[i].Reputation, peers[i].Verified, peers[i].UptimePct = s.Reputation, s.Verified, s.UptimePct()
	}
	return peers
}

func (b *apiBackend) GPUs() []inventory.GPU { return b.n.gpus }

func (b *apiBackend) Offers(f market.Filter) ([]market.Offer, error) {
	ps, err := b.n.KnownProfiles()
	if err != nil {
		return nil, fmt.Errorf("known profiles: %w", err)
	}
	in := market.OfferInputs{Asks: b.n.market.book.Asks("")}
	if b.n.verify.rep != nil {
		in.Score = b.n.verify.rep.Standing
	}
	return market.MatchOffers(ps, f, in), nil
}

// Orders lists the live orders of the node's book that f accepts.
func (b *apiBackend) Orders(f market.Filter) api.Orders {
	n := b.n
	out := api.Orders{Asks: []api.OrderView{}, Bids: []api.OrderView{}}
	for _, a := range n.market.book.Asks("") {
		o := offerOfAsk(a)
		if ok, _ := f.Match(o); !ok {
			continue
		}
		out.Asks = append(out.Asks, api.OrderView{
			ID: a.ID.String(), Kind: "ask", Peer: a.Supplier.String(), Model: a.Model, Count: int(a.Count),
			PriceMicros: a.PriceMicros, Price: money.Micros(a.PriceMicros).String(), Region: a.Region,
			Pricing: a.Pricing, Simulated: a.Simulated, Created: a.Created().UTC(), Expires: a.Expires().UTC(),
		})
		if !a.Received.IsZero() {
			r := a.Received.UTC()
			out.Asks[len(out.Asks)-1].Received = &r
		}
	}
	models := f.Models()
	for _, bid := range n.market.book.Bids("") {
		if models != nil && !overlaps(models, bid.Filter.Models()) {
			continue
		}
		out.Bids = append(out.Bids, api.OrderView{
			ID: bid.ID.String(), Kind: "bid", Peer: bid.Renter.String(), Filter: bid.Filter.String(), Count: int(bid.Count),
			PriceMicros: bid.MaxPriceMicros, Price: money.Micros(bid.MaxPriceMicros).String(), DurationS: bid.DurationS,
			Created: bid.Created().UTC(), Expires: bid.Expires().UTC(),
		})
	}
	return out
}

// offerOfAsk describes an ask as an offer, with the device-profile
// attributes of its model, so that filters apply to asks as to search.
func offerOfAsk(a *market.Ask) market.Offer {
	o := market.Offer{
		PeerID: a.Supplier.String(), Model: a.Model, Count: int(a.Count), Free: int(a.Count),
		Region: a.Region, Simulated: a.Simulated, PriceMicros: money.Micros(a.PriceMicros),
	}
	if prof, ok := catalog.Lookup(a.Model); ok {
		o.VRAMGiB, o.TFLOPS = prof.MemoryGiB, prof.TFLOPS()
		o.ComputeCapability = fmt.Sprintf("%d.%d", prof.CCMajor, prof.CCMinor)
	}
	return o
}

func overlaps(a, b []string) bool {
	if b == nil {
		return true
	}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

func (b *apiBackend) Leases() ([]api.LeaseView, error) { return leaseViews(b.n.store, b.n.now()) }

func (b *apiBackend) Prices() []market.PricePoint { return b.n.market.index.All() }

func (b *apiBackend) Capacity() []market.Capacity {
	if b.n.market.supplier == nil {
		return nil
	}
	return b.n.market.supplier.Ledger().Capacity()
}

// Reputation lists every peer the node has attestations about.
func (b *apiBackend) Reputation() []api.ReputationView {
	out := []api.ReputationView{}
	for id, s := range b.n.verify.rep.Scores() {
		out = append(out, api.ReputationView{PeerID: id.String(), Score: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

func (b *apiBackend) Challenge(ctx context.Context, id peer.ID, model string) (api.ChallengeReport, error) {
	return b.n.ChallengePeer(ctx, id, model)
}

func (b *apiBackend) Jobs() api.JobService {
	if b.n.jobs.ctrl == nil {
		return nil // not a nil *job.Controller in an interface
	}
	return b.n.jobs.ctrl
}

func (b *apiBackend) Receipts(lease string) ([]settle.Report, error) {
	if b.n.jobs.ledger == nil {
		return nil, api.ErrNotStarted
	}
	return Receipts(b.n.jobs.ledger, lease, b.n.now())
}

func (b *apiBackend) Redeemable() ([]api.Redeemable, error) {
	if b.n.jobs.ledger == nil {
		return nil, api.ErrNotStarted
	}
	return Redeemable(b.n.jobs.ledger)
}

// Redeemable lists the chain vouchers led keeps, decoded and checked.
func Redeemable(led *settle.Ledger) ([]api.Redeemable, error) {
	var out []api.Redeemable
	err := led.EachChainVoucher(func(lease market.ID, nonce uint64, kept []byte) error {
		d, cv, err := chainpay.DecodeRedeemable(kept)
		if err != nil {
			return fmt.Errorf("lease %s: %w", lease.Short(), err)
		}
		out = append(out, api.Redeemable{
			LeaseID: lease.String(), Nonce: nonce, CumMicros: money.Micros(cv.CumMicros),
			Renter: cv.Renter.String(), Supplier: cv.Supplier.String(),
			ChainID: d.ChainID.String(), Contract: d.Contract.String(), Raw: hex.EncodeToString(kept),
		})
		return nil
	})
	return out, err
}

func (b *apiBackend) Doctor(ctx context.Context) api.DoctorReport { return b.n.Doctor(ctx) }

// Receipts verifies the bills of the leases in led whose ID starts with
// prefix (all when empty).
func Receipts(led *settle.Ledger, prefix string, now time.Time) ([]settle.Report, error) {
	ids, err := led.Leases()
	if err != nil {
		return nil, err
	}
	out := []settle.Report{}
	for _, id := range ids {
		if prefix != "" && !strings.HasPrefix(id.String(), strings.ToLower(prefix)) {
			continue
		}
		rep, err := led.Verify(id, now)
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	if prefix != "" && len(out) == 0 {
		return nil, fmt.Errorf("no receipts for a lease starting with %q", prefix)
	}
	return out, nil
}
