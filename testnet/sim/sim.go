package sim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/clock/clocktest"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// Sim is one running simulation: the nodes on their fabric, the clock
// they share, and what the run has recorded. Start builds it; Run plays
// the workload; Close stops every node.
type Sim struct {
	cfg   Config
	w     *Workload
	clock *clocktest.Clock
	fab   *fabric
	meter *gossipMeter
	rep   *reputation.Book
	nodes []*simNode
	ids   []peer.ID
	bySup map[peer.ID]int // supplier's peer ID -> index in w.Suppliers

	mu     sync.Mutex
	leases []leaseRecord
	why    map[int]string // request ID -> why its last rent failed
	faults []string       // broken rules: leases not countersigned or kept
	// released counts leases the supplier released, unclaimed, before
	// the simulation started their job (see rent).
	released int

	// warmLeases are the leases made before the first slot (warm);
	// warmFailed counts those that could not be made.
	warmLeases []leaseRecord
	warmFailed int

	// grid is when slot 0 begins by the simulated clock; slot k begins
	// Slot*k later (boundary). offGrid counts what missed it: slots whose
	// renting ran past leaseMargin before the next boundary, and leases
	// that could not be sized to end on theirs.
	grid    time.Time
	offGrid int

	started   time.Time
	closeOnce sync.Once
	closeErr  error
}

// leaseRecord is one lease the market made, as the renter got it.
type leaseRecord struct {
	request  int
	slot     int
	slots    int // the slots it was asked for: slot .. slot+slots-1
	supplier int // index in Workload.Suppliers
	model    string
	price    int64
	uuids    []string
	start    int64 // ms, by the simulated clock
	end      int64
}

// Start builds the network of cfg's workload: every node on one
// in-memory fabric, each dialling cfg.Degree random others, the
// auditors' attestations in the reputation book, and the suppliers'
// asks posted and gossiped. It returns once every node's order book
// lists most of them.
func Start(ctx context.Context, cfg Config) (_ *Sim, err error) {
	cfg = cfg.fill()
	s := &Sim{cfg: cfg, w: NewWorkload(cfg), clock: clocktest.New(), fab: newFabric(), bySup: map[peer.ID]int{}, why: map[int]string{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.meter = newGossipMeter(cfg.Nodes)
	keys := make([]crypto.PrivKey, cfg.Nodes)
	s.ids = make([]peer.ID, cfg.Nodes)
	for i := range keys {
		if keys[i], _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
			return nil, fmt.Errorf("sim: key: %w", err)
		}
		if s.ids[i], err = peer.IDFromPrivateKey(keys[i]); err != nil {
			return nil, fmt.Errorf("sim: key: %w", err)
		}
	}
	specs := map[int]*SupplierSpec{}
	uuids := map[peer.ID][]string{}
	cl := claims{}
	for k := range s.w.Suppliers {
		sp := &s.w.Suppliers[k]
		id := s.ids[sp.Node]
		specs[sp.Node], s.bySup[id] = sp, k
		for g := range sp.GPUs {
			uuids[id] = append(uuids[id], fmt.Sprintf("GPU-sim-%d-%d", sp.Node, g))
		}
		cl[id] = map[string]map[string]bool{sp.Model: {}}
		for _, u := range uuids[id] {
			cl[id][sp.Model][u] = true
		}
	}
	if s.rep, err = newReputation(s.clock.Now, s.w.Suppliers, s.ids, uuids); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	deps := nodeDeps{fab: s.fab, clock: s.clock, claims: cl, rep: s.rep, meter: s.meter, log: cfg.Log}
	s.nodes = make([]*simNode, cfg.Nodes)
	for i := range cfg.Nodes {
		if s.nodes[i], err = startNode(deps, i, keys[i], s.w.Regions[i], specs[i], uuids[s.ids[i]]); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	// GossipSub grafts its meshes on its heartbeat (every second): an
	// ask posted before then reaches only the supplier's own peers.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(meshWait):
	}
	for _, n := range s.nodes {
		n.run()
	}
	if err := s.awaitAsks(ctx); err != nil {
		return nil, err
	}
	if err := s.warm(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// warm makes the workload's warm leases (Workload.Warm) through the
// market's own lease protocol: each one GPU taken from its supplier's
// posted ask by a renter node (Renter.TakeAsk), and its job started,
// before the first slot, as if the market had run long before the
// measurement began. The central matcher starts with the same GPUs busy
// for the same slots: a warm lease that could not be made (the
// supplier busy or unreachable in time) is dropped from the workload,
// so both start alike; more than a tenth failing fails the start.
// They are not requests: no fill counts them.
func (s *Sim) warm(ctx context.Context) error {
	if len(s.w.Warm) == 0 {
		return nil
	}
	// The first slot begins two slots from now, so the warm leases
	// (sized to end on the boundaries after it) are made before it
	// begins: at 1000 nodes making them takes minutes of real time.
	s.grid = s.clock.Now().Add(2 * s.w.Slot)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	made := make([]bool, len(s.w.Warm))
	errs := make([]error, len(s.w.Warm))
	for i, wl := range s.w.Warm {
		sp := s.w.Suppliers[wl.Supplier]
		renter := s.nodes[s.w.Renters[i%len(s.w.Renters)]]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.takeWarm(ctx, renter, sp, wl)
			made[i] = errs[i] == nil
		})
	}
	wg.Wait()
	var kept []WarmLease
	for i, wl := range s.w.Warm {
		if made[i] {
			kept = append(kept, wl)
			continue
		}
		s.cfg.Log.Info("warm lease not made", "supplier", s.w.Suppliers[wl.Supplier].Node, "err", errs[i])
	}
	s.warmFailed = len(s.w.Warm) - len(kept)
	if s.warmFailed*10 > len(s.w.Warm) {
		return fmt.Errorf("sim: %d of %d warm leases could not be made, the last: %v", s.warmFailed, len(s.w.Warm), errors.Join(errs...))
	}
	s.w.Warm = kept
	return nil
}

// takeWarm leases one GPU of sp for wl.Slots from renter, at the ask the
// supplier holds as its own latest, trying again for a while (the ask
// being reposted, the supplier busy with other proposals).
func (s *Sim) takeWarm(ctx context.Context, renter *simNode, sp SupplierSpec, wl WarmLease) error {
	id := s.ids[sp.Node]
	var last error
	for range 30 {
		var ask *market.Ask
		for _, a := range s.nodes[sp.Node].book.Asks(sp.Model) {
			if a.Supplier == id && (ask == nil || a.CreatedMs > ask.CreatedMs) {
				ask = a
			}
		}
		if ask == nil {
			last = fmt.Errorf("supplier %s holds no ask of its own", id)
		} else {
			tctx, cancel := context.WithTimeout(ctx, leaseMargin)
			l, err := renter.renter.TakeAsk(tctx, ask, 1, s.leaseUntil(wl.Slots), market.Terms{})
			cancel()
			if err == nil {
				if _, err := s.nodes[sp.Node].supplier.Leases().Claim(l.ID); err != nil {
					return fmt.Errorf("claim: %w", err)
				}
				s.mu.Lock()
				s.warmLeases = append(s.warmLeases, leaseRecord{request: -1, slot: 0, slots: wl.Slots, supplier: wl.Supplier, model: l.Model,
					price: l.PriceMicros, uuids: l.GpuUuids, start: l.StartMs, end: l.EndMs})
				s.mu.Unlock()
				return nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return last
}

// connect has each node dial cfg.Degree random others (drawn from the
// seed), then waits until every node has a peer on the orders topic.
func (s *Sim) connect(ctx context.Context) error {
	rng := mrand.New(mrand.NewPCG(s.cfg.Seed, 0x5eed))
	dials := make([][]int, len(s.nodes))
	for i := range s.nodes {
		for range s.cfg.Degree {
			j := rng.IntN(len(s.nodes) - 1)
			if j >= i {
				j++
			}
			dials[i] = append(dials[i], j)
		}
	}
	errs := make([]error, len(s.nodes))
	var wg sync.WaitGroup
	for i, n := range s.nodes {
		wg.Go(func() {
			for _, j := range dials[i] {
				if err := n.host.Connect(ctx, peer.AddrInfo{ID: s.ids[j]}); err != nil {
					errs[i] = fmt.Errorf("sim: connect node %d to %d: %w", i, j, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.await(ctx, 30*time.Second, "every node to share the orders topic with a peer", func() bool {
		for _, n := range s.nodes {
			if len(n.orders.Peers()) == 0 {
				return false
			}
		}
		return true
	})
}

// meshWait is how long the nodes' meshes are given to form.
const meshWait = 3 * time.Second

// awaitAsks waits until every node's order book lists at least 90% of
// the suppliers' asks (an ask is one per supplier). A node whose book is
// still short after askWait syncs it from its peers, as a node that has
// just joined does (node.syncBook), and the wait begins again, at most
// askRounds times: on a saturated machine pubsub drops some of the
// asks' first gossip, and a peer synced from can miss some too.
func (s *Sim) awaitAsks(ctx context.Context) error {
	want := len(s.w.Suppliers) * 9 / 10
	full := func(n *simNode) bool {
		asks, _ := n.book.Len()
		return asks >= want
	}
	all := func() bool {
		for _, n := range s.nodes {
			if !full(n) {
				return false
			}
		}
		return true
	}
	for round := 1; ; round++ {
		err := s.await(ctx, askWait, fmt.Sprintf("every order book to list %d asks", want), all)
		if err == nil || ctx.Err() != nil || round == askRounds {
			return err
		}
		short := 0
		for _, n := range s.nodes {
			if !full(n) {
				short++
				n.syncBook(ctx, want)
			}
		}
		s.cfg.Log.Info("order books synced from peers", "short", short, "want", want)
	}
}

// askWait bounds each wait for the asks to spread, askRounds the waits.
const (
	askWait   = 20 * time.Second
	askRounds = 3
)

func (s *Sim) await(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("sim: timed out after %s waiting for %s", limit, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim: waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Run plays the workload slot by slot and returns what happened beside
// the central matcher. Slots lie on a grid of the simulated clock, each
// cfg.Slot long. Each slot: the suppliers due to leave go; the slot's
// new and retrying requests rent, each at its offset within
// cfg.RealSlot of real time; once all are done, the clock jumps to the
// next slot's boundary (firing lease ends, ask renewals and reposts) and
// gossip gets cfg.Settle. Every lease is sized to end leaseMargin or
// less before the boundary of the slot its length names (leaseUntil),
// so it holds its GPU for exactly the slots the central matcher counts.
func (s *Sim) Run(ctx context.Context) (*Result, error) {
	s.started = time.Now()
	simStart := s.clock.Now()
	if s.grid.IsZero() {
		s.grid = simStart
	} else if err := s.nextSlot(ctx, 0); err != nil {
		return nil, err
	}
	var open []Request
	next := 0
	var leaving sync.WaitGroup
	for slot := range s.w.Slots {
		slotStart := time.Now()
		for _, sp := range s.w.Suppliers {
			if sp.Leaves == slot {
				s.fab.leave(s.ids[sp.Node])
				leaving.Go(func() {
					n := s.nodes[sp.Node]
					n.stop(sp.Abrupt)
					if err := n.Close(); err != nil {
						s.cfg.Log.Debug("supplier left", "node", sp.Node, "err", err)
					}
				})
			}
		}
		for ; next < len(s.w.Requests) && s.w.Requests[next].Arrive == slot; next++ {
			open = append(open, s.w.Requests[next])
		}
		open = keepPatient(open, slot)
		filled := make([]bool, len(open))
		var wg sync.WaitGroup
		for i, r := range open {
			wg.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(slotStart.Add(time.Duration(r.Offset * float64(s.cfg.RealSlot))))):
				}
				filled[i] = s.rent(ctx, r, slot)
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sim: slot %d: %w", slot, err)
		}
		var still []Request
		for i, r := range open {
			if !filled[i] {
				still = append(still, r)
			}
		}
		open = still
		if err := s.nextSlot(ctx, slot+1); err != nil {
			return nil, err
		}
	}
	leaving.Wait()
	return s.result(time.Since(s.started), s.clock.Now().Sub(simStart)), nil
}

// leaseMargin bounds the real time a rent takes (and so the time from
// sizing a lease to its supplier's countersignature, which starts it):
// a lease sized by leaseUntil ends at most this long before its
// boundary.
const leaseMargin = 30 * time.Second

// maxJump bounds one jump of the clock. A supplier renews its ask at
// most 5 min (half its 10 min lifetime) after posting it, so at a jump
// its latest ask is under 5 min old: after one of 4 min it is still
// live, and the renewal the jump fires has a minute to gossip.
const maxJump = 4 * time.Minute

// boundary is when slot k begins by the simulated clock.
func (s *Sim) boundary(k int) time.Time { return s.grid.Add(time.Duration(k) * s.w.Slot) }

// leaseUntil is the duration a lease sized now asks for to end, once
// countersigned (within leaseMargin), by the boundary of slot k: its
// GPU is then free from slot k on, and held through slot k-1's renting.
// One that cannot be (a lease shorter than the market's minimum) is
// counted off the grid and asks for the minimum.
func (s *Sim) leaseUntil(k int) time.Duration {
	d := (s.boundary(k).Sub(s.clock.Now()) - leaseMargin).Truncate(time.Second)
	if d < market.MinDuration {
		s.missGrid()
		return market.MinDuration
	}
	return d
}

// missGrid counts one slot or lease off the grid.
func (s *Sim) missGrid() {
	s.mu.Lock()
	s.offGrid++
	s.mu.Unlock()
}

// nextSlot moves the clock to slot k's boundary, in jumps of at most
// maxJump with cfg.Settle of real time after each, so that the lease
// ends and ask renewals they fire have gossiped before slot k's renting.
// A slot whose renting ran to within leaseMargin of the boundary (so a
// lease of an earlier slot may have ended while it rented) is counted
// off the grid, and the grid moves on by the overrun.
func (s *Sim) nextSlot(ctx context.Context, k int) error {
	if late := s.clock.Now().Sub(s.boundary(k).Add(-leaseMargin)); late > 0 {
		s.missGrid()
		s.cfg.Log.Info("slot ran past its boundary", "slot", k-1, "late", late)
		s.grid = s.grid.Add(late)
	}
	for {
		left := s.boundary(k).Sub(s.clock.Now())
		if left > 0 {
			s.clock.Advance(min(left, maxJump))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim: before slot %d: %w", k, ctx.Err())
		case <-time.After(s.cfg.Settle):
		}
		if left <= maxJump {
			return nil
		}
	}
}

// rent runs one request through the renter of its node, as a node's
// job controller does (proven suppliers only, above the reputation
// floor), and, on a lease, checks it and starts its "job" (claims it at
// the supplier).
func (s *Sim) rent(ctx context.Context, r Request, slot int) bool {
	f, err := market.ParseFilter(r.Filter())
	if err != nil {
		s.fault("request %d: filter %q: %v", r.ID, r.Filter(), err)
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, leaseMargin)
	defer cancel()
	req := market.RentRequest{AllowSimulated: true,
		Filter: f, Count: 1, Duration: s.leaseUntil(slot + r.Slots), MaxPrice: r.MaxPrice, Wait: s.cfg.Wait,
		MinReputation: reputation.DefaultFloor,
	}
	req.ScreenBy(s.rep)
	l, err := s.nodes[r.Renter].renter.Rent(ctx, req)
	if err != nil {
		s.mu.Lock()
		s.why[r.ID] = err.Error()
		s.mu.Unlock()
		return false
	}
	k, ok := s.bySup[l.Supplier]
	if !ok {
		s.fault("request %d: leased from %s, no supplier of the simulation", r.ID, l.Supplier)
		return false
	}
	// The job starts at once, as a renter's node starts it on a new
	// lease. On a saturated machine, the real seconds between the lease
	// and this claim can pass its claim window (30 s to 1 min), and the
	// supplier has then rightly released it: no job, no fill, and the
	// request tries again while it is patient.
	if _, err := s.nodes[s.w.Suppliers[k].Node].supplier.Leases().Claim(l.ID); err != nil {
		s.mu.Lock()
		s.released++
		s.why[r.ID] = fmt.Sprintf("lease %s released before its job started (%s after the lease began, by the simulated clock): %v",
			l.ID.Short(), s.clock.Now().Sub(time.UnixMilli(l.StartMs)).Round(time.Second), err)
		s.mu.Unlock()
		return false
	}
	s.check(l, r, k)
	s.mu.Lock()
	s.leases = append(s.leases, leaseRecord{request: r.ID, slot: slot, slots: r.Slots, supplier: k, model: l.Model, price: l.PriceMicros,
		uuids: l.GpuUuids, start: l.StartMs, end: l.EndMs})
	s.mu.Unlock()
	return true
}

// check verifies a lease as a third party would: both signatures (the
// supplier's countersignature over the renter's signed proposal), the
// parties and terms, and that both sides keep it as confirmed.
func (s *Sim) check(l *market.Lease, r Request, k int) {
	now := s.clock.Now()
	again, err := market.OpenLease(l.Raw, now)
	switch {
	case err != nil:
		s.fault("lease %s: %v", l.ID.Short(), err)
		return
	case again.Renter != s.ids[r.Renter] || again.Proposal.Renter != s.ids[r.Renter] || again.Supplier != s.ids[s.w.Suppliers[k].Node]:
		s.fault("lease %s: parties %s/%s, want renter %s", l.ID.Short(), again.Renter, again.Supplier, s.ids[r.Renter])
		return
	case again.Model != r.Model || again.Count != 1 || money.Micros(again.PriceMicros) > r.MaxPrice:
		s.fault("lease %s: %s x%d at %d, asked %s x1 at most %d", l.ID.Short(), again.Model, again.Count, again.PriceMicros, r.Model, r.MaxPrice)
	}
	for _, side := range []struct {
		name string
		n    *simNode
	}{{"renter", s.nodes[r.Renter]}, {"supplier", s.nodes[s.w.Suppliers[k].Node]}} {
		st, err := market.GetLease(side.n.store, l.ID, now)
		if err != nil || st.State != market.LeaseConfirmed {
			s.fault("lease %s: the %s does not keep it confirmed (%v, %v)", l.ID.Short(), side.name, st.State, err)
		}
	}
}

func (s *Sim) fault(format string, args ...any) {
	s.mu.Lock()
	s.faults = append(s.faults, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// Close stops every node and the fabric. It is safe to call more than
// once.
func (s *Sim) Close() error {
	s.closeOnce.Do(func() {
		errs := make([]error, len(s.nodes))
		var wg sync.WaitGroup
		for i, n := range s.nodes {
			if n != nil {
				wg.Go(func() { errs[i] = n.Close() })
			}
		}
		wg.Wait()
		s.closeErr = errors.Join(append(errs, s.fab.Close())...)
	})
	return s.closeErr
}
