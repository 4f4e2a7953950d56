package market_test

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/pb"
)

func TestClaimWindow(t *testing.T) {
	const price = 3_600_000 // 1 micro per GPU-ms
	lease := func(count uint32, intervalMs uint32, credit int64) *market.Lease {
		return &market.Lease{
			Lease:    &pb.Lease{PriceMicros: price, Count: count},
			Proposal: &market.Proposal{LeaseProposal: &pb.LeaseProposal{ReceiptIntervalMs: intervalMs, CreditLimitMicros: credit}},
		}
	}
	for _, tt := range []struct {
		name    string
		l       *market.Lease
		ceiling time.Duration
		want    time.Duration
	}{
		{"default terms: at least MinClaimWindow", lease(4, 0, 0), time.Minute, market.MinClaimWindow},
		{"two long intervals, up to the ceiling", lease(1, 300_000, 0), time.Minute, time.Minute},
		{"two intervals above the minimum", lease(1, 20_000, 0), time.Minute, 40 * time.Second},
		{"the credit limit's worth of time", lease(2, 1_000, 2*45_000), time.Minute, 45 * time.Second},
		{"a huge credit limit", lease(1, 0, 1<<62), time.Minute, time.Minute},
		{"a ceiling below the minimum wins", lease(4, 0, 0), 2 * time.Second, 2 * time.Second},
	} {
		if got := tt.l.ClaimWindow(tt.ceiling); got != tt.want {
			t.Errorf("%s: ClaimWindow(%s) = %s, want %s", tt.name, tt.ceiling, got, tt.want)
		}
	}
}
