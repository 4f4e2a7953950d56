package metrics

import (
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// series reads every series of reg: "name{k=v,...}" (labels sorted, as
// Gather gives them) to its value.
func series(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			key += "}"
			out[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// TestSeriesStartAtZero: New creates every series of the counters with
// fixed labels at zero, and a topic's when it is joined; nothing else.
func TestSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Gossip.Topic("/t/1")
	got := series(t, reg)
	count := map[string]int{}
	for k, v := range got {
		if v != 0 {
			t.Errorf("%s = %v, want 0", k, v)
		}
		name, _, _ := strings.Cut(k, "{")
		count[name]++
	}
	want := map[string]int{
		"gpumesh_gossip_received_total": 1, "gpumesh_gossip_accepted_total": 1, "gpumesh_gossip_published_total": 1,
		"gpumesh_gossip_rejected_total": len(Reasons),
		"gpumesh_market_quotes_total":   7, "gpumesh_market_leases_total": 9, "gpumesh_market_gangs_total": 3,
		"gpumesh_settle_receipts_total": 5, "gpumesh_settle_vouchers_total": 4,
		"gpumesh_challenges_total":       len(Verdicts),
		"gpumesh_profiles_fetched_total": 2,
	}
	if !maps.Equal(count, want) {
		t.Fatalf("series per metric = %v, want %v", count, want)
	}
	for _, k := range []string{
		"gpumesh_market_quotes_total{outcome=sent,side=supplier}",
		"gpumesh_market_leases_total{outcome=released,side=supplier}",
		"gpumesh_settle_vouchers_total{outcome=issued,side=renter}",
		"gpumesh_gossip_rejected_total{reason=replay,topic=/t/1}",
	} {
		if _, ok := got[k]; !ok {
			t.Errorf("no series %s", k)
		}
	}
}

// TestRejectedCountedUnderItsReason: a refused record counts as received
// and under its reason; an unknown reason counts as other; an accepted one
// as received and accepted.
func TestRejectedCountedUnderItsReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Gossip
	g.Rejected("/t/1", ReasonReplay)
	g.Rejected("/t/1", ReasonReplay)
	g.Rejected("/t/1", Reason("made-up"))
	g.Accepted("/t/1")
	g.Published("/t/2")
	got := series(t, reg)
	for k, want := range map[string]float64{
		"gpumesh_gossip_received_total{topic=/t/1}":               4,
		"gpumesh_gossip_accepted_total{topic=/t/1}":               1,
		"gpumesh_gossip_rejected_total{reason=replay,topic=/t/1}": 2,
		"gpumesh_gossip_rejected_total{reason=other,topic=/t/1}":  1,
		"gpumesh_gossip_published_total{topic=/t/2}":              1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if _, ok := got["gpumesh_gossip_rejected_total{reason=made-up,topic=/t/1}"]; ok {
		t.Error("an unknown reason got a series of its own")
	}
}

// TestCounters: each counting method moves its own series.
func TestCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Market.Quote(Supplier, QuoteSent)
	m.Market.Lease(Renter, LeaseConfirmed)
	m.Settle.Receipt(Renter, Evidence)
	m.Settle.Voucher(Supplier, Accepted)
	m.Audit.Challenge(Passed)
	got := series(t, reg)
	for _, k := range []string{
		"gpumesh_market_quotes_total{outcome=sent,side=supplier}",
		"gpumesh_market_leases_total{outcome=confirmed,side=renter}",
		"gpumesh_settle_receipts_total{outcome=evidence,side=renter}",
		"gpumesh_settle_vouchers_total{outcome=accepted,side=supplier}",
		"gpumesh_challenges_total{verdict=passed}",
	} {
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1", k, got[k])
		}
	}
	if got["gpumesh_market_leases_total{outcome=confirmed,side=supplier}"] != 0 {
		t.Error("the supplier's confirmed leases moved with the renter's")
	}
}

// TestNilCountsNothing: the parts take nil for no metrics.
func TestNilCountsNothing(t *testing.T) {
	var (
		g *Gossip
		m *Market
		s *Settle
		a *Audit
	)
	g.Topic("t")
	g.Accepted("t")
	g.Rejected("t", ReasonOther)
	g.Published("t")
	m.Quote(Supplier, QuoteSent)
	m.Lease(Renter, LeaseFailed)
	s.Receipt(Supplier, Issued)
	s.Voucher(Renter, Issued)
	a.Challenge(Error)
}

// TestNoGlobalState: two sets of metrics live in two registries, and one
// registry takes one set only.
func TestNoGlobalState(t *testing.T) {
	r1, r2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	m1, err := New(r1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(r2); err != nil {
		t.Fatal(err)
	}
	m1.Audit.Challenge(Failed)
	if got := series(t, r2)["gpumesh_challenges_total{verdict=failed}"]; got != 0 {
		t.Fatalf("registry 2 counts registry 1's challenge: %v", got)
	}
	if _, err := New(r1); err == nil {
		t.Fatal("a second set registered in one registry")
	}
}

// TestWatchedGauges: the gauges read at scrape time report every state
// given, at zero when none is in it, and any other the source reports.
func TestWatchedGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]int64{"running": 2}
	if err := m.WatchJobs([]string{"running", "failed"}, func() map[string]int64 { return maps.Clone(jobs) }); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchAttempts([]string{"running"}, func() map[string]int64 { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchStore(func() (int64, int64) { return 10, 20 }); err != nil {
		t.Fatal(err)
	}
	got := series(t, reg)
	for k, want := range map[string]float64{
		"gpumesh_jobs{state=running}":         2,
		"gpumesh_jobs{state=failed}":          0,
		"gpumesh_job_attempts{state=running}": 0,
		"gpumesh_store_size_bytes{part=lsm}":  10,
		"gpumesh_store_size_bytes{part=vlog}": 20,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	jobs["failed"], jobs["odd"] = 1, 3
	got = series(t, reg)
	if got["gpumesh_jobs{state=failed}"] != 1 || got["gpumesh_jobs{state=odd}"] != 3 {
		t.Fatalf("after a change: %v", got)
	}
	if err := m.WatchJobs(nil, func() map[string]int64 { return nil }); err == nil {
		t.Fatal("gpumesh_jobs registered twice")
	}
}

// TestProfilesFetched: Fetched counts by source; nil Profiles count
// nothing (and do not panic).
func TestProfilesFetched(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Profiles.Fetched(FromDirectory)
	m.Profiles.Fetched(FromDirectory)
	m.Profiles.Fetched(FromDHT)
	var none *Profiles
	none.Fetched(FromDHT)
	got := series(t, reg)
	if d, h := got["gpumesh_profiles_fetched_total{source=directory}"], got["gpumesh_profiles_fetched_total{source=dht}"]; d != 2 || h != 1 {
		t.Fatalf("directory %v, dht %v; want 2 and 1", d, h)
	}
}
