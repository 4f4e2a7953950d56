package node

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job"
	jpb "github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/light"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// h100Seller is a node config selling gpus h100-sxm GPUs at 2.00, with
// extra config keys set as flags.
func h100Seller(t *testing.T, gpus string, extra map[string][]string) Config {
	t.Helper()
	flags := map[string][]string{
		"listen": {"/ip4/127.0.0.1/tcp/0"}, "api": {"127.0.0.1:0"}, "gpus": {gpus},
		"region": {"eu-west"}, "heartbeat_interval": {"200ms"}, "bootstrap_timeout": {"5s"},
		"pricing": {"fixed"}, "price": {"h100-sxm=2.00"},
	}
	for k, v := range extra {
		flags[k] = v
	}
	c, err := LoadConfig(Input{DataFlag: "unset", Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newRentClient is a renter with a fresh identity, bootstrapped on m's
// node 0.
func newRentClient(t *testing.T, m *marketNet) *light.Client {
	t.Helper()
	return newRentClientOf(t, m.nodes[0])
}

// newRentClientOf is a renter with a fresh identity, bootstrapped on n.
func newRentClientOf(t *testing.T, n *Node) *light.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := light.New(ctx, light.WithBootstrap(mustBootstrap(t, n)...), light.WithLogger(quiet()), light.WithStore(store.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func rentH100(t *testing.T, rc *light.Client, count int, d time.Duration) (*market.Lease, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return rc.Rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=h100-sxm"),
		Count: count, Duration: d, MaxPrice: 3_000_000, Wait: quoteWait, MinReputation: reputation.DefaultFloor})
}

// ownAsk is sup's current ask for h100-sxm, as its own book holds it.
func ownAsk(t *testing.T, sup *Node) *market.Ask {
	t.Helper()
	var ask *market.Ask
	eventually(t, 10*time.Second, "the supplier's own ask", func() bool {
		for _, a := range sup.Book().Asks("h100-sxm") {
			if a.Supplier == sup.ID() {
				ask = a
				return true
			}
		}
		return false
	})
	return ask
}

// proposeRaw sends a proposal taking ask for count GPUs from rc's host
// and reads the answer, leaving the stream open and unconfirmed.
func proposeRaw(t *testing.T, rc *light.Client, ask *market.Ask, count int, nonce uint64) (network.Stream, *pb.LeaseResponse) {
	t.Helper()
	h := rc.Network().Host
	now := time.Now()
	raw, err := market.SealProposal(&pb.LeaseProposal{
		Supplier: []byte(ask.Supplier), Nonce: nonce, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
		Ask: ask.Raw, Model: ask.Model, Count: uint32(count), PriceMicros: ask.PriceMicros, DurationS: 3600,
	}, h.Peerstore().PrivKey(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Reach the supplier at its ask's addresses, as Rent does: a light
	// client learns no address of a supplier by itself.
	if err := h.Connect(ctx, peer.AddrInfo{ID: ask.Supplier, Addrs: ask.Addrs}); err != nil {
		t.Fatal(err)
	}
	st, err := h.NewStream(ctx, ask.Supplier, market.LeaseProtocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Reset() })
	if err := p2p.WriteRaw(st, raw); err != nil {
		t.Fatal(err)
	}
	var resp pb.LeaseResponse
	if err := p2p.ReadMsg(st, market.LeaseType.MaxSize+1024, &resp); err != nil {
		t.Fatalf("proposal %d: no answer: %v", nonce, err)
	}
	return st, &resp
}

func supplierLease(t *testing.T, sup *Node, id market.ID) market.StoredLease {
	t.Helper()
	sl, err := market.GetLease(sup.store, id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return sl
}

// TestUnclaimedLeaseIsReleased: a throwaway identity rents every GPU of a
// supplier for as long as it allows and never starts a job. The supplier
// releases the lease after its claim window, says why, and an honest
// renter then gets the GPUs.
func TestUnclaimedLeaseIsReleased(t *testing.T) {
	t.Parallel() // waits on a claim window, not the CPU
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:3", map[string][]string{"claim_window": {"2s"}}),
	})
	sup := m.nodes[1]
	l, err := rentH100(t, m.rc, 2, 24*time.Hour)
	if err != nil {
		t.Fatalf("attacker's rent: %v", err)
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 1 {
		t.Fatalf("%d free while leased, want 1", free)
	}
	eventually(t, 30*time.Second, "the unclaimed lease's GPUs to be free again", func() bool {
		return sup.Supplier().Ledger().Free("h100-sxm") == 3
	})
	if sl := supplierLease(t, sup, l.ID); sl.State != "released" || !strings.HasPrefix(sl.Reason, "unclaimed: no job started") {
		t.Fatalf("supplier's record of the unclaimed lease: state %q, reason %q", sl.State, sl.Reason)
	}
	honest := newRentClient(t, m)
	eventually(t, 30*time.Second, "the freed GPUs re-posted in node 0's book", func() bool {
		for _, a := range m.nodes[0].Book().Asks("h100-sxm") {
			if a.Supplier == sup.ID() && a.Count == 3 {
				return true
			}
		}
		return false
	})
	hl, err := rentH100(t, honest, 2, time.Hour)
	if err != nil || hl.Supplier != sup.ID() {
		t.Fatalf("honest renter after the release: lease %v, err %v", hl, err)
	}
}

// TestUnconfirmedProposalsAreCapped: one renter proposes for four GPUs,
// one at a time, and never confirms. Only two of its proposals reserve
// anything, so an honest renter is not told "busy"; once its reservations
// lapse unconfirmed, its next proposal is refused without reserving.
func TestUnconfirmedProposalsAreCapped(t *testing.T) {
	t.Parallel()
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:6", nil),
	})
	sup := m.nodes[1]
	ask := ownAsk(t, sup)
	var held []network.Stream
	for i := range 4 {
		st, resp := proposeRaw(t, m.rc, ask, 1, uint64(100+i))
		switch {
		case i < market.MaxRenterHolds && len(resp.Lease) == 0:
			t.Fatalf("proposal %d refused: %q", i, resp.Refused)
		case i >= market.MaxRenterHolds && !strings.HasPrefix(resp.Refused, string(market.DeclineUnclaimed)+":"):
			t.Fatalf("proposal %d beyond the cap: refusal %q, lease %d bytes; want %q", i, resp.Refused, len(resp.Lease), market.DeclineUnclaimed)
		}
		held = append(held, st)
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 6-market.MaxRenterHolds {
		t.Fatalf("%d free while the attacker holds proposals, want %d", free, 6-market.MaxRenterHolds)
	}
	// One GPU, so that one stays free and the ask stays current.
	honest := newRentClient(t, m)
	if l, err := rentH100(t, honest, 1, time.Hour); err != nil || l.Supplier != sup.ID() {
		t.Fatalf("honest renter while the attacker re-proposes: lease %v, err %v", l, err)
	}
	for _, st := range held {
		st.Reset() // the attacker goes away without confirming
	}
	eventually(t, market.ConfirmWindow+10*time.Second, "both reservations lapsed", func() bool {
		ls, _ := leaseViews(sup.store, time.Now())
		lapsed := 0
		for _, l := range ls {
			if l.State == "lapsed" {
				lapsed++
			}
		}
		return lapsed == market.MaxRenterHolds
	})
	st, resp := proposeRaw(t, m.rc, ownAsk(t, sup), 1, 200)
	st.Reset()
	if !strings.HasPrefix(resp.Refused, string(market.DeclineUnclaimed)+":") {
		t.Fatalf("proposal after letting leases lapse: refusal %q, lease %d bytes; want %q", resp.Refused, len(resp.Lease), market.DeclineUnclaimed)
	}
}

// TestResentProposalKeepsItsLease: a renter re-sends the proposal of a
// confirmed lease it never starts a job on. The re-send is refused and
// the lease is still released after its claim window: it stays tracked.
func TestResentProposalKeepsItsLease(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:4", map[string][]string{"claim_window": {"2s"}}),
	})
	sup := m.nodes[1]
	l, err := rentH100(t, m.rc, 1, 24*time.Hour)
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := m.rc.Network().Host.NewStream(ctx, sup.ID(), market.LeaseProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Reset()
	if err := p2p.WriteRaw(st, l.Proposal.Raw); err != nil {
		t.Fatal(err)
	}
	var resp pb.LeaseResponse
	if err := p2p.ReadMsg(st, market.LeaseType.MaxSize+1024, &resp); err != nil {
		t.Fatalf("re-sent proposal: no answer: %v", err)
	}
	if len(resp.Lease) != 0 || !strings.Contains(resp.Refused, "already made lease") {
		t.Fatalf("re-sent proposal: refusal %q, lease %d bytes; want it refused as already made", resp.Refused, len(resp.Lease))
	}
	eventually(t, 30*time.Second, "the unclaimed lease released after the re-send", func() bool {
		return sup.Supplier().Ledger().Free("h100-sxm") == 4
	})
	if sl := supplierLease(t, sup, l.ID); sl.State != "released" {
		t.Fatalf("supplier's record of the lease: state %q, want released", sl.State)
	}
}

// TestFreshKeysHoldAtMostHalf: renters with fresh keys each propose for
// one GPU and never start a job. Together they hold at most half of the
// supplier's GPUs; the next proposal is declined busy, saying why.
func TestFreshKeysHoldAtMostHalf(t *testing.T) {
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:4", nil),
	})
	sup := m.nodes[1]
	ask := ownAsk(t, sup)
	for i := range 3 {
		rc := newRentClient(t, m)
		_, resp := proposeRaw(t, rc, ask, 1, uint64(300+i))
		switch {
		case i < 2 && len(resp.Lease) == 0:
			t.Fatalf("fresh renter %d refused: %q", i, resp.Refused)
		case i >= 2 && (len(resp.Lease) != 0 || !strings.HasPrefix(resp.Refused, string(market.DeclineBusy)+":") || !strings.Contains(resp.Refused, "held by leases with no job yet") || !strings.Contains(resp.Refused, "retry in")):
			t.Fatalf("fresh renter %d past half the GPUs: refusal %q, lease %d bytes; want %q saying why", i, resp.Refused, len(resp.Lease), market.DeclineBusy)
		}
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 2 {
		t.Fatalf("%d free while fresh keys hold proposals, want 2", free)
	}
}

// TestWholeSupplierLeasableWhenNothingIsHeld: the cap on all renters'
// holds leaves a whole machine leasable while nothing else is held, and
// then refuses a fresh key's hold on top of it.
func TestWholeSupplierLeasableWhenNothingIsHeld(t *testing.T) {
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:4", nil),
	})
	sup := m.nodes[1]
	ask := ownAsk(t, sup)
	if _, resp := proposeRaw(t, newRentClient(t, m), ask, 4, 400); len(resp.Lease) == 0 {
		t.Fatalf("a lease of all 4 GPUs with nothing held: refused %q", resp.Refused)
	}
	_, resp := proposeRaw(t, newRentClient(t, m), ask, 1, 401)
	if len(resp.Lease) != 0 || !strings.HasPrefix(resp.Refused, string(market.DeclineBusy)+":") {
		t.Fatalf("a fresh key on top of a whole-machine hold: refusal %q, lease %d bytes; want busy", resp.Refused, len(resp.Lease))
	}
}

// TestLeaseLongerThanMaxLeaseIsDeclined: a supplier grants leases up to
// its max_lease (24 h by default), says so in its ask, and declines a
// month-long bid with "duration".
func TestLeaseLongerThanMaxLeaseIsDeclined(t *testing.T) {
	t.Parallel()
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:4", nil),
	})
	sup := m.nodes[1]
	if a := ownAsk(t, sup); a.MaxDurationS != 24*3600 {
		t.Fatalf("ask max_duration_s = %d, want %d (max_lease 24h)", a.MaxDurationS, 24*3600)
	}
	l, err := rentH100(t, m.rc, 4, 720*time.Hour)
	var nm *market.NoMatch
	if !errors.As(err, &nm) || !strings.Contains(nm.Error(), "does not lease for 720h") {
		t.Fatalf("a 720 h rent: lease %v, err %v; want a duration decline", l, err)
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 4 {
		t.Fatalf("%d free after the declined rent, want 4", free)
	}
}

// TestRentingOftenKeepsGettingQuotes: one renter rents twelve times back
// to back, more than market.MaxBidsPerRenter within a bid's lifetime.
// Each rent withdraws its bid as it returns, so every bid passes the
// books' per-renter cap and gets the supplier's answer (here a duration
// decline, which leases nothing).
func TestRentingOftenKeepsGettingQuotes(t *testing.T) {
	t.Parallel() // waits on rent's quote windows, not the CPU
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		h100Seller(t, "sim:h100-sxm:4", nil),
	})
	ownAsk(t, m.nodes[1])
	for i := range 12 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := m.rc.Rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=h100-sxm"),
			Count: 1, Duration: 720 * time.Hour, MaxPrice: 3_000_000, Wait: time.Second, MinReputation: reputation.DefaultFloor})
		cancel()
		var nm *market.NoMatch
		if !errors.As(err, &nm) || !strings.Contains(nm.Error(), "does not lease for 720h") {
			t.Fatalf("rent %d: err %v; want the supplier's duration decline", i, err)
		}
	}
}

// jobSpec is a one-GPU job that sleeps.
func jobSpec(t *testing.T) *job.Spec {
	t.Helper()
	s, err := job.EncodeSpec(&jpb.JobSpec{JobId: job.NewJobID(), Argv: []string{"sleep", "60"}, Gpus: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startJob opens a session on l for spec as renter and returns the stream
// and the supplier's refusal ("" when the job started).
func startJob(t *testing.T, renter *Node, l *market.Lease, spec *job.Spec) (network.Stream, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := renter.Network().Host.NewStream(ctx, l.Supplier, job.SessionProtocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Reset() })
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	w, err := job.Handshake(st, &jpb.Hello{Lease: l.Raw, Attempt: 1, SpecSize: uint32(len(spec.Raw))}, spec.Raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st, w.Refused
}

// TestJobStartedLateIsBilledFromLeaseStart: a renter that holds a lease a
// while before starting its job pays for that time: the first receipt
// covers the lease from its start, and the renter's checks accept it.
func TestJobStartedLateIsBilledFromLeaseStart(t *testing.T) {
	t.Parallel() // waits on its job's sleeps, not the CPU
	jn := startJobNet(t, time.Minute)
	spec := jobSpec(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := jn.renter.rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=rtx4090"), Count: 1, Duration: time.Hour, MaxPrice: 1_000_000,
		Terms: market.Terms{JobSpecHash: spec.Hash[:], ReceiptInterval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	const held = 3 * time.Second
	eventually(t, 10*time.Second, "the lease to be held a while", func() bool { return time.Since(l.Start()) > held })
	st, refused := startJob(t, jn.renter, l, spec)
	if refused != "" {
		t.Fatalf("job start refused: %q", refused)
	}
	var first []byte
	for first == nil {
		var f jpb.ServerFrame
		if err := p2p.ReadMsg(st, job.MaxFrameSize, &f); err != nil {
			t.Fatalf("no receipt: %v", err)
		}
		if r, ok := f.Body.(*jpb.ServerFrame_Receipt); ok {
			first = r.Receipt
		}
	}
	r, err := settle.OpenReceipt(first)
	if err != nil {
		t.Fatal(err)
	}
	if r.Seq != 1 || r.StartMs != l.StartMs || r.GpuMs < held.Milliseconds() {
		t.Fatalf("first receipt: seq %d over [%d, %d] ms for %d gpu-ms; want seq 1 from the lease's start %d ms, at least %d gpu-ms",
			r.Seq, r.StartMs, r.EndMs, r.GpuMs, l.StartMs, held.Milliseconds())
	}
	p, err := settle.NewPayer(jn.renter.Ledger(), jn.renter.key, settle.TermsOf(l, spec.JobId))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Accept(first, 1, time.Now()); err != nil {
		t.Fatalf("the renter refuses the first receipt: %v", err)
	}
}

// TestJobOnReleasedLeaseIsRefused: once a supplier has released a lease
// no job started on, its GPUs are free and a job can no longer start on
// it.
func TestJobOnReleasedLeaseIsRefused(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	root := t.TempDir()
	boot := testConfig(t, filepath.Join(root, "boot"), "none", "eu-west", nil)
	bn := startNode(t, boot)
	sc := h100Seller(t, "sim:h100-sxm:1", map[string][]string{"claim_window": {"2s"}})
	sc.DataDir, sc.AuditInterval = filepath.Join(root, "sup"), 0
	setKey(t, &sc, "bootstrap", bootstrapOf(bn)...)
	sup := startNode(t, sc)
	rcfg := testConfig(t, filepath.Join(root, "renter"), "none", "eu-west", bootstrapOf(bn))
	rcfg.AuditInterval = 0
	renter := startNode(t, rcfg)
	waitAdvertised(t, sup)
	eventually(t, 20*time.Second, "the ask in the renter's book", func() bool { return len(renter.Book().Asks("h100-sxm")) == 1 })
	spec := jobSpec(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := renter.rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=h100-sxm"), Count: 1, Duration: time.Hour, MaxPrice: 3_000_000,
		Terms: market.Terms{JobSpecHash: spec.Hash[:]}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the unclaimed lease released", func() bool {
		return sup.Supplier().Ledger().Free("h100-sxm") == 1
	})
	_, refused := startJob(t, renter, l, spec)
	if !strings.Contains(refused, "released") || !strings.Contains(refused, "unclaimed") {
		t.Fatalf("job on a released lease: refusal %q, want it released as unclaimed", refused)
	}
	if free := sup.Supplier().Ledger().Free("h100-sxm"); free != 1 {
		t.Fatalf("%d free after the refused start, want 1", free)
	}
}

// TestLeaseConfigBounds: max_lease and claim_window take only values the
// market can honour, with defaults of 24h and 60s.
func TestLeaseConfigBounds(t *testing.T) {
	c, err := LoadConfig(Input{Home: "/h"})
	if err != nil || c.MaxLease != 24*time.Hour || c.ClaimWindow != time.Minute {
		t.Fatalf("defaults: max_lease %s, claim_window %s, err %v", c.MaxLease, c.ClaimWindow, err)
	}
	for _, tt := range []struct{ key, value, want string }{
		{"max_lease", "721h", "max_lease from flag:--max-lease"},
		{"max_lease", "30s", "not a duration between 1m0s and 720h0m0s"},
		{"max_lease", "forever", "max_lease"},
		{"claim_window", "0", "claim_window from flag:--claim-window"},
		{"claim_window", "2h", "not a duration between 1s and 1h"},
	} {
		_, err := LoadConfig(Input{Home: "/h", Flags: map[string][]string{tt.key: {tt.value}}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s = %s: err %v, want it to contain %q", tt.key, tt.value, err, tt.want)
		}
	}
}
