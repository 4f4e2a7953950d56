package node

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/verify/inventory"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// The Explorer's data (api.ExplorerData): what the network publishes, as
// this node received and checked it: heartbeats (the peer table), asks
// and bids (the order book), trade prints (the price index) and
// attestations (the reputation book). Nothing private: no job, log, key,
// path or token, and the node's own leases stay behind the token.

const (
	// explorerRecent is how recent a heartbeat must be for the summary
	// to count its node.
	explorerRecent = 10 * time.Minute
	// explorerDays is the length of a supplier's uptime series.
	explorerDays = 30
	// explorerCacheFor is how long the checked attestations are reused:
	// pages poll every few seconds, and each read checks every
	// signature again.
	explorerCacheFor = 2 * time.Second
)

// explorer implements api.ExplorerData for a node.
type explorer struct {
	n *Node
	b *apiBackend

	mu     sync.Mutex
	att    []*reputation.Attestation // checked, newest first
	attAt  time.Time
	attErr error
}

func newExplorer(n *Node, b *apiBackend) *explorer { return &explorer{n: n, b: b} }

// attestations are every attestation the node keeps, checked again,
// newest first (reused for explorerCacheFor).
func (e *explorer) attestations() []*reputation.Attestation {
	rep := e.n.verify.rep
	if rep == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if now := time.Now(); e.att == nil || now.Sub(e.attAt) >= explorerCacheFor {
		e.att, e.attAt = rep.List("", 0), now
	}
	return e.att
}

// suppliersData is what the rows of every supplier are made of.
type suppliersData struct {
	peers  map[peer.ID]api.Peer
	asks   map[peer.ID][]*market.Ask
	prints map[peer.ID][]market.Print
	trades int                                 // prints that count, of every model
	last   map[peer.ID]*reputation.Attestation // latest challenge
}

func (e *explorer) gather() suppliersData {
	d := suppliersData{peers: map[peer.ID]api.Peer{}, asks: map[peer.ID][]*market.Ask{},
		prints: map[peer.ID][]market.Print{}, last: map[peer.ID]*reputation.Attestation{}}
	for _, p := range e.b.Peers() {
		d.peers[p.ID] = p
	}
	for _, a := range e.n.market.book.Asks("") {
		d.asks[a.Supplier] = append(d.asks[a.Supplier], a)
	}
	for _, p := range e.n.market.index.Prints("") {
		d.trades++
		if p.Supplier != "" {
			d.prints[p.Supplier] = append(d.prints[p.Supplier], p)
		}
	}
	for _, a := range e.attestations() { // newest first
		if a.Kind == reputation.KindChallenge && d.last[a.Subject] == nil {
			d.last[a.Subject] = a
		}
	}
	return d
}

// isSupplier: the peer has GPUs by its heartbeats, or a live ask.
func (d suppliersData) isSupplier(id peer.ID) bool {
	return d.peers[id].GPUsTotal > 0 || len(d.asks[id]) > 0
}

func (d suppliersData) ids() []peer.ID {
	seen := map[peer.ID]bool{}
	for id := range d.peers {
		seen[id] = true
	}
	for id := range d.asks {
		seen[id] = true
	}
	var out []peer.ID
	for id := range seen {
		if d.isSupplier(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (e *explorer) row(d suppliersData, id peer.ID) api.SupplierRow {
	p := d.peers[id]
	r := api.SupplierRow{
		PeerID: id.String(), Region: p.Region, Software: p.Software, GPUsTotal: int(p.GPUsTotal), GPUsFree: int(p.GPUsFree),
		Models: []api.ModelCount{}, LastSeen: p.LastSeen, Connected: p.Connected,
	}
	if id == e.n.id {
		r.Region, r.Software, r.GPUsTotal, r.LastSeen, r.Connected = e.n.cfg.Region, "gpumesh/"+Version, len(e.n.gpus), e.n.now().UTC(), true
		r.Simulated = slices.ContainsFunc(e.n.gpus, func(g inventory.GPU) bool { return g.Simulated })
		r.GPUsFree = 0
		for _, c := range e.b.Capacity() {
			r.GPUsFree += c.Free
		}
	}
	byModel := map[string]int{}
	for _, a := range d.asks[id] {
		byModel[a.Model] += int(a.Count)
		r.Simulated = r.Simulated || a.Simulated
		r.Asks++
		if r.CheapestMicros == 0 || a.PriceMicros < r.CheapestMicros {
			r.CheapestMicros = a.PriceMicros
		}
		if r.Region == "" {
			r.Region = a.Region
		}
	}
	for m, c := range byModel {
		r.Models = append(r.Models, api.ModelCount{Model: m, Count: c})
	}
	slices.SortFunc(r.Models, func(a, b api.ModelCount) int { return cmp.Compare(a.Model, b.Model) })
	// Peers carries the standing of each peer it lists; the standing of
	// this node, and of a supplier known only by its asks, is asked for.
	_, listed := d.peers[id]
	r.Reputation, r.Verified, r.UptimePct = p.Reputation, p.Verified, p.UptimePct
	if rep := e.n.verify.rep; rep != nil && (!listed || id == e.n.id) {
		s := rep.Score(id)
		r.Reputation, r.Verified, r.UptimePct = s.Reputation, s.Verified, s.UptimePct()
	}
	if a := d.last[id]; a != nil {
		r.LastVerdict = &api.Verdict{Model: a.Model, Passed: a.Passed, Reason: a.Reason, Challenger: a.Attester.String(), Time: a.Created().UTC()}
	}
	for _, p := range d.prints[id] {
		r.LeasesServed++
		r.GPUHoursServed += p.GPUHours
	}
	return r
}

func (e *explorer) Suppliers() []api.SupplierRow {
	d := e.gather()
	var out []api.SupplierRow
	for _, id := range e.withSelf(d) {
		out = append(out, e.row(d, id))
	}
	return out
}

// withSelf is every supplier, this node among them when it sells.
func (e *explorer) withSelf(d suppliersData) []peer.ID {
	ids := d.ids()
	if e.n.market.supplier != nil && len(e.n.gpus) > 0 && !slices.Contains(ids, e.n.id) {
		ids = append(ids, e.n.id)
		slices.Sort(ids)
	}
	return ids
}

func (e *explorer) Summary() api.ExplorerSummary {
	n := e.n
	now := n.now()
	d := e.gather()
	s := api.ExplorerSummary{PeerID: n.id.String(), Time: now.UTC(), Nodes: 1, Models: []api.ModelSummary{}, Regions: []api.RegionCount{}}
	for _, p := range d.peers {
		if now.Sub(p.LastSeen) <= explorerRecent {
			s.Nodes++
		}
	}
	regions := map[string]*api.RegionCount{}
	for _, id := range e.withSelf(d) {
		r := e.row(d, id)
		s.Suppliers++
		s.GPUs.Total += r.GPUsTotal
		s.GPUs.Free += r.GPUsFree
		if r.Verified {
			s.VerifiedSuppliers++
		}
		rc := regions[r.Region]
		if rc == nil {
			rc = &api.RegionCount{Region: r.Region}
			regions[r.Region] = rc
		}
		rc.Suppliers++
		rc.GPUs += r.GPUsTotal
	}
	s.GPUs.Leased = max(s.GPUs.Total-s.GPUs.Free, 0)
	for _, rc := range regions {
		s.Regions = append(s.Regions, *rc)
	}
	slices.SortFunc(s.Regions, func(a, b api.RegionCount) int { return cmp.Compare(a.Region, b.Region) })

	models := map[string]*api.ModelSummary{}
	get := func(m string) *api.ModelSummary {
		if models[m] == nil {
			models[m] = &api.ModelSummary{Model: m}
		}
		return models[m]
	}
	suppliersOf := map[string]map[peer.ID]bool{}
	for sup, asks := range d.asks {
		for _, a := range asks {
			ms := get(a.Model)
			ms.Asks++
			ms.GPUs += int(a.Count)
			if ms.CheapestMicros == 0 || a.PriceMicros < ms.CheapestMicros {
				ms.CheapestMicros = a.PriceMicros
			}
			if suppliersOf[a.Model] == nil {
				suppliersOf[a.Model] = map[peer.ID]bool{}
			}
			suppliersOf[a.Model][sup] = true
			s.Asks++
		}
	}
	for _, pp := range n.market.index.All() {
		ms := get(pp.Model)
		ms.Trades, ms.LastMicros, ms.VWAPMicros = pp.Trades, pp.LastMicros, pp.VWAPMicros
	}
	for m, ms := range models {
		ms.Suppliers = len(suppliersOf[m])
		s.Models = append(s.Models, *ms)
	}
	slices.SortFunc(s.Models, func(a, b api.ModelSummary) int { return cmp.Compare(a.Model, b.Model) })
	s.Bids = len(n.market.book.Bids(""))
	s.Trades = d.trades
	s.Attestations = len(e.attestations())
	return s
}

func (e *explorer) Supplier(id peer.ID) (api.SupplierDetail, error) {
	d := e.gather()
	if !slices.Contains(e.withSelf(d), id) && d.last[id] == nil {
		return api.SupplierDetail{}, fmt.Errorf("supplier %s: %w", id, api.ErrNotFound)
	}
	sd := api.SupplierDetail{Supplier: e.row(d, id), Asks: []api.OrderView{}, VouchedBy: []string{}}
	for _, o := range e.b.Orders(market.Filter{}).Asks {
		if o.Peer == id.String() {
			sd.Asks = append(sd.Asks, o)
		}
	}
	var about []*reputation.Attestation
	for _, a := range e.attestations() {
		if a.Subject == id {
			about = append(about, a)
		}
	}
	sd.Attestations = attestationViews(about, api.MaxExplorerList)
	sd.Uptime = uptimeSeries(about, e.n.now())
	latest := map[peer.ID]bool{} // challengers seen, newest first
	for _, a := range about {
		if a.Kind != reputation.KindChallenge || latest[a.Attester] {
			continue
		}
		latest[a.Attester] = true
		if a.Passed {
			sd.VouchedBy = append(sd.VouchedBy, a.Attester.String())
		}
	}
	slices.Sort(sd.VouchedBy)
	prints := d.prints[id]
	sd.Trades = make([]api.TradeView, 0, min(len(prints), api.MaxExplorerList))
	for i := len(prints) - 1; i >= 0 && len(sd.Trades) < api.MaxExplorerList; i-- {
		sd.Trades = append(sd.Trades, tradeView(prints[i]))
	}
	if rep := e.n.verify.rep; rep != nil {
		sd.Reputation = rep.Score(id)
	}
	return sd, nil
}

func (e *explorer) Trades(model string) []api.TradeView {
	prints := e.n.market.index.Prints(model)
	out := make([]api.TradeView, 0, len(prints))
	for _, p := range prints {
		out = append(out, tradeView(p))
	}
	return out
}

func (e *explorer) Attestations(subject peer.ID) []api.AttestationView {
	all := e.attestations()
	if subject == "" {
		return attestationViews(all, api.MaxExplorerList)
	}
	var about []*reputation.Attestation
	for _, a := range all {
		if a.Subject == subject {
			about = append(about, a)
		}
	}
	return attestationViews(about, api.MaxExplorerList)
}

func (e *explorer) Book() api.Orders { return e.b.Orders(market.Filter{}) }

// tradeView shows a print, its signature checked again.
func tradeView(p market.Print) api.TradeView {
	v := api.TradeView{
		ID: p.LeaseID.Short(), Model: p.Model, Supplier: p.Supplier.String(), Count: p.Count, PriceMicros: p.PriceMicros,
		Price: money.Micros(p.PriceMicros).String(), GPUHours: p.GPUHours, Time: p.At.UTC(),
	}
	if p.Raw != nil {
		signer, err := market.VerifyTradePrint(p.Raw)
		v.SignatureOK = err == nil && signer == p.Supplier
	}
	return v
}

// attestationViews shows at most limit of as, which List checked.
func attestationViews(as []*reputation.Attestation, limit int) []api.AttestationView {
	out := make([]api.AttestationView, 0, min(len(as), limit))
	for _, a := range as[:min(len(as), limit)] {
		out = append(out, api.AttestationView{
			ID: a.ID.Short(), Challenger: a.Attester.String(), Subject: a.Subject.String(), Kind: a.Kind, Model: a.Model,
			Passed: a.Passed, Reason: a.Reason, GPUs: int(a.Gpus), MeasuredMilliOps: a.MeasuredMilliOps,
			ExpectedMilliOps: a.ExpectedMilliOps, Time: a.Created().UTC(), SignatureOK: true,
		})
	}
	return out
}

// uptimeSeries is a supplier's uptime checks per UTC day over the last
// explorerDays days, oldest first, from the uptime attestations about it.
func uptimeSeries(about []*reputation.Attestation, now time.Time) []api.UptimeDay {
	today := now.UTC().Truncate(24 * time.Hour)
	days := make([]api.UptimeDay, explorerDays)
	for i := range days {
		days[i].Day = today.AddDate(0, 0, i-explorerDays+1).Format(time.DateOnly)
	}
	for _, a := range about {
		if a.Kind != reputation.KindUptime {
			continue
		}
		i := explorerDays - 1 - int(today.Sub(a.Created().UTC().Truncate(24*time.Hour))/(24*time.Hour))
		if i < 0 || i >= explorerDays {
			continue
		}
		days[i].Checks++
		if a.Passed {
			days[i].Passed++
		}
	}
	for i := range days {
		if days[i].Checks > 0 {
			pct := 100 * float64(days[i].Passed) / float64(days[i].Checks)
			days[i].Pct = &pct
		}
	}
	return days
}
