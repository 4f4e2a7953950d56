package market_test

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
)

func TestParsePricingMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want market.PricingMode
		ok   bool
	}{
		{"fixed", market.Fixed, true},
		{"auction", market.Auction, true},
		{"dynamic", market.Dynamic, true},
		{" Dynamic ", market.Dynamic, true},
		{"", "", false},
		{"free", "", false},
	} {
		got, err := market.ParsePricingMode(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParsePricingMode(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseModelPrice(t *testing.T) {
	for _, tc := range []struct {
		in     string
		model  string
		micros money.Micros
		ok     bool
	}{
		{"h100-sxm=2.10", "h100-sxm", 2_100_000, true},
		{"a100-80gb=1", "a100-80gb", 1_000_000, true},
		{"h100-sxm", "", 0, false},
		{"=2.10", "", 0, false},
		{"h100-sxm=", "", 0, false},
		{"h100 sxm=2", "", 0, false},
		{"h100-sxm=two", "", 0, false},
	} {
		model, micros, err := market.ParseModelPrice(tc.in)
		if model != tc.model || micros != tc.micros || (err == nil) != tc.ok {
			t.Errorf("ParseModelPrice(%q) = %q, %d, %v; want %q, %d, ok=%v", tc.in, model, micros, err, tc.model, tc.micros, tc.ok)
		}
	}
}

// testPricer lists h100-sxm at 2.00 (floor by default 1.00) and a100-80gb
// at 1.00 with a floor of 0.90.
func testPricer(mode market.PricingMode) market.Pricer {
	return market.Pricer{
		Mode:  mode,
		List:  map[string]money.Micros{"h100-sxm": 2_000_000, "a100-80gb": 1_000_000},
		Floor: map[string]money.Micros{"a100-80gb": 900_000},
	}
}

func TestPricerQuote(t *testing.T) {
	const h100, a100 = "h100-sxm", "a100-80gb"
	for _, tc := range []struct {
		name        string
		mode        market.PricingMode
		in          market.PriceInput
		price       int64
		wantDecline string
	}{
		// fixed: the list price, declined above the max.
		{"fixed no max", market.Fixed, market.PriceInput{Model: h100}, 2_000_000, ""},
		{"fixed max above", market.Fixed, market.PriceInput{Model: h100, MaxPrice: 2_500_000}, 2_000_000, ""},
		{"fixed max equal", market.Fixed, market.PriceInput{Model: h100, MaxPrice: 2_000_000}, 2_000_000, ""},
		{"fixed max below", market.Fixed, market.PriceInput{Model: h100, MaxPrice: 1_999_999}, 2_000_000, "price"},
		{"fixed ignores competition", market.Fixed, market.PriceInput{Model: h100, Competing: []int64{1_000_000}}, 2_000_000, ""},
		{"unknown model", market.Fixed, market.PriceInput{Model: "b200"}, 0, "mismatch"},

		// auction: undercut the cheapest by 1%, within [floor, list].
		{"auction alone", market.Auction, market.PriceInput{Model: h100}, 2_000_000, ""},
		{"auction undercuts cheapest", market.Auction, market.PriceInput{Model: h100, Competing: []int64{1_800_000, 1_500_000, 0}}, 1_485_000, ""},
		{"auction rounds to micros", market.Auction, market.PriceInput{Model: h100, Competing: []int64{1_234_567}}, 1_222_221, ""},
		{"auction never above list", market.Auction, market.PriceInput{Model: h100, Competing: []int64{2_500_000}}, 2_000_000, ""},
		{"auction never below default floor", market.Auction, market.PriceInput{Model: h100, Competing: []int64{900_000}}, 1_000_000, ""},
		{"auction at the floor edge", market.Auction, market.PriceInput{Model: h100, Competing: []int64{1_010_101}}, 1_000_000, ""},
		{"auction never below set floor", market.Auction, market.PriceInput{Model: a100, Competing: []int64{800_000}}, 900_000, ""},
		{"auction max pulls down", market.Auction, market.PriceInput{Model: h100, MaxPrice: 1_500_000}, 1_500_000, ""},
		{"auction max below undercut", market.Auction, market.PriceInput{Model: h100, MaxPrice: 1_400_000, Competing: []int64{1_500_000}}, 1_400_000, ""},
		{"auction max above undercut", market.Auction, market.PriceInput{Model: h100, MaxPrice: 1_900_000, Competing: []int64{1_500_000}}, 1_485_000, ""},
		{"auction max at floor", market.Auction, market.PriceInput{Model: h100, MaxPrice: 1_000_000}, 1_000_000, ""},
		{"auction max below floor", market.Auction, market.PriceInput{Model: h100, MaxPrice: 999_999}, 1_000_000, "price"},
		{"auction max below set floor", market.Auction, market.PriceInput{Model: a100, MaxPrice: 899_999}, 900_000, "price"},

		// dynamic: base × (0.8 + 0.6u), within [floor, 2 × list].
		{"dynamic idle", market.Dynamic, market.PriceInput{Model: h100}, 1_600_000, ""},
		{"dynamic half busy", market.Dynamic, market.PriceInput{Model: h100, Utilization: 0.5}, 2_200_000, ""},
		{"dynamic full", market.Dynamic, market.PriceInput{Model: h100, Utilization: 1}, 2_800_000, ""},
		{"dynamic utilization above 1", market.Dynamic, market.PriceInput{Model: h100, Utilization: 7}, 2_800_000, ""},
		{"dynamic utilization below 0", market.Dynamic, market.PriceInput{Model: h100, Utilization: -1}, 1_600_000, ""},
		{"dynamic with index", market.Dynamic, market.PriceInput{Model: h100, Utilization: 0.5, Index: 1_000_000}, 1_650_000, ""},
		{"dynamic clamped to floor", market.Dynamic, market.PriceInput{Model: h100, Index: 1}, 1_000_000, ""},
		{"dynamic clamped to twice list", market.Dynamic, market.PriceInput{Model: h100, Utilization: 1, Index: 10_000_000}, 4_000_000, ""},
		{"dynamic max equal", market.Dynamic, market.PriceInput{Model: h100, Utilization: 0.5, MaxPrice: 2_200_000}, 2_200_000, ""},
		{"dynamic max below", market.Dynamic, market.PriceInput{Model: h100, Utilization: 0.5, MaxPrice: 2_100_000}, 2_200_000, "price"},
		{"dynamic ignores competition", market.Dynamic, market.PriceInput{Model: h100, Competing: []int64{1}}, 1_600_000, ""},
	} {
		price, decline := testPricer(tc.mode).Quote(tc.in)
		if price != tc.price || decline != tc.wantDecline {
			t.Errorf("%s: Quote = %d, %q; want %d, %q", tc.name, price, decline, tc.price, tc.wantDecline)
		}
	}
}

func TestPricerAskPrice(t *testing.T) {
	for _, tc := range []struct {
		mode        market.PricingMode
		model       string
		utilization float64
		index       int64
		want        int64
		ok          bool
	}{
		{market.Fixed, "h100-sxm", 0.9, 5_000_000, 2_000_000, true},
		{market.Auction, "h100-sxm", 0.9, 5_000_000, 2_000_000, true},
		{market.Dynamic, "h100-sxm", 0.5, 0, 2_200_000, true},
		{market.Dynamic, "h100-sxm", 0.5, 1_000_000, 1_650_000, true},
		{market.Dynamic, "a100-80gb", 0, 1, 900_000, true},
		{market.Fixed, "b200", 0, 0, 0, false},
	} {
		got, ok := testPricer(tc.mode).AskPrice(tc.model, tc.utilization, tc.index)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s AskPrice(%s, %g, %d) = %d, %v; want %d, %v", tc.mode, tc.model, tc.utilization, tc.index, got, ok, tc.want, tc.ok)
		}
	}
}
