package market

import (
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/money"
)

func TestParseRentTerms(t *testing.T) {
	for _, c := range []struct {
		name     string
		count    int
		hours    float64
		maxPrice string
		want     RentTerms
		err      string
	}{
		{"valid", 2, 4, "2.50", RentTerms{Count: 2, Duration: 4 * time.Hour, MaxPrice: 2_500_000}, ""},
		{"hours rounded to the second", 1, 0.5001, "1", RentTerms{Count: 1, Duration: 30 * time.Minute, MaxPrice: money.Unit}, ""},
		{"most GPUs, longest lease", MaxCount, 720, "0.000001", RentTerms{Count: MaxCount, Duration: MaxDuration, MaxPrice: 1}, ""},
		{"no GPUs", 0, 1, "2", RentTerms{}, "count 0: want 1 to 256"},
		{"too many GPUs", MaxCount + 1, 1, "2", RentTerms{}, "count 257: want 1 to 256"},
		{"too short", 1, 0.001, "2", RentTerms{}, "hours 0.001: want 1m0s to 720h0m0s"},
		{"too long", 1, 721, "2", RentTerms{}, "hours 721: want 1m0s to 720h0m0s"},
		{"no hours", 1, 0, "2", RentTerms{}, "hours 0: want 1m0s to 720h0m0s"},
		{"no max price", 1, 1, "", RentTerms{}, ErrNoMaxPrice.Error()},
		{"bad max price", 1, 1, "two", RentTerms{}, `max_price "two": want a positive amount per GPU-hour, e.g. 2.50`},
		{"zero max price", 1, 1, "0.00", RentTerms{}, `max_price "0.00": want a positive amount per GPU-hour, e.g. 2.50`},
		{"negative max price", 1, 1, "-1", RentTerms{}, `max_price "-1": want a positive amount per GPU-hour, e.g. 2.50`},
		{"max price too high", 1, 1, "1000001", RentTerms{}, `max_price "1000001": want at most 1000000.00 per GPU-hour`},
		{"count checked before the price", 0, 1, "", RentTerms{}, "count 0: want 1 to 256"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseRentTerms(c.count, c.hours, c.maxPrice)
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("ParseRentTerms(%d, %g, %q) = %v, want error %q", c.count, c.hours, c.maxPrice, err, c.err)
				}
				var te *TermError
				if errors.As(err, &te) == errors.Is(err, ErrNoMaxPrice) {
					t.Fatalf("error %v: want either a *TermError or ErrNoMaxPrice", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseRentTerms(%d, %g, %q) = %+v, %v; want %+v", c.count, c.hours, c.maxPrice, got, err, c.want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Validate(%+v) = %v, want nil for parsed terms", got, err)
			}
		})
	}
}

func TestRentTermsValidate(t *testing.T) {
	ok := RentTerms{Count: 1, Duration: time.Hour, MaxPrice: money.Unit}
	for _, c := range []struct {
		name  string
		terms func(RentTerms) RentTerms
		err   string
	}{
		{"valid", func(t RentTerms) RentTerms { return t }, ""},
		{"no GPUs", func(t RentTerms) RentTerms { t.Count = 0; return t }, "count 0: want 1 to 256"},
		{"too short", func(t RentTerms) RentTerms { t.Duration = 30 * time.Second; return t }, "hours 0.008333333333333333: want 1m0s to 720h0m0s"},
		{"no price", func(t RentTerms) RentTerms { t.MaxPrice = 0; return t }, `max_price "0.00": want a positive amount per GPU-hour, e.g. 2.50`},
		{"negative price", func(t RentTerms) RentTerms { t.MaxPrice = -money.Unit; return t }, `max_price "-1.00": want a positive amount per GPU-hour, e.g. 2.50`},
		{"price too high", func(t RentTerms) RentTerms { t.MaxPrice = MaxPriceMicros + 1; return t }, `max_price "1000000.000001": want at most 1000000.00 per GPU-hour`},
	} {
		t.Run(c.name, func(t *testing.T) {
			terms := c.terms(ok)
			err := terms.Validate()
			if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
				t.Fatalf("Validate(%+v) = %v, want %q", terms, err, c.err)
			}
		})
	}
}
