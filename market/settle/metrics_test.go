package settle

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/store"
)

// TestLedgerMetrics: the Meters and Payers of ledgers opened WithMetrics
// count each receipt and voucher by side and outcome: issued, withheld,
// accepted, refused, and evidence.
func TestLedgerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	sup, ren := newNode(t), newNode(t)
	terms := testTerms(sup, ren)
	sled, err := OpenLedger(store.NewMemory(), WithMetrics(m.Settle))
	if err != nil {
		t.Fatal(err)
	}
	rled, err := OpenLedger(store.NewMemory(), WithMetrics(m.Settle))
	if err != nil {
		t.Fatal(err)
	}
	meter, err := NewMeter(sled, sup.key, terms)
	if err != nil {
		t.Fatal(err)
	}
	payer, err := NewPayer(rled, ren.key, terms)
	if err != nil {
		t.Fatal(err)
	}
	now := testStart
	full := testInterval.Milliseconds() * int64(terms.GPUs)
	issue := func() *Receipt {
		t.Helper()
		start := now
		now = now.Add(testInterval)
		r, err := meter.Issue(1, start, now, full, Usage{Measured: true, UtilPermille: 900}, nil, false, StateRunning)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	r1 := issue()
	v1, err := payer.Accept(r1.Raw, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meter.Accept(v1, now); err != nil {
		t.Fatal(err)
	}
	twin := sealReceipt(t, receiptMsg(r1, func(m *pb.Receipt) { m.UtilPermille = 100 }), sup)
	if _, err := payer.Accept(twin, 1, now); err == nil {
		t.Fatal("a second receipt for seq 1 accepted")
	}
	r2 := issue()
	if _, err := payer.Accept(r2.Raw, 2, now); err == nil {
		t.Fatal("a receipt of a stale attempt accepted")
	}
	if _, err := payer.Accept([]byte("garbage"), 1, now); err == nil {
		t.Fatal("garbage accepted as a receipt")
	}
	if _, err := meter.Accept([]byte("garbage"), now); err == nil {
		t.Fatal("garbage accepted as a voucher")
	}
	if _, err := meter.Issue(1, now, now.Add(time.Second), 10*full, Usage{Measured: true, UtilPermille: 900}, nil, false, StateRunning); err == nil {
		t.Fatal("inflated usage issued")
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[mf.GetName()+" "+l["side"]+" "+l["outcome"]] = s.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{
		"gpumesh_settle_receipts_total supplier issued":   2,
		"gpumesh_settle_receipts_total supplier withheld": 1,
		"gpumesh_settle_receipts_total renter accepted":   1,
		"gpumesh_settle_receipts_total renter refused":    2, // the stale attempt's, the garbage
		"gpumesh_settle_receipts_total renter evidence":   1, // the twin
		"gpumesh_settle_vouchers_total renter issued":     1,
		"gpumesh_settle_vouchers_total supplier accepted": 1,
		"gpumesh_settle_vouchers_total supplier refused":  1,
		"gpumesh_settle_vouchers_total supplier evidence": 0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}
