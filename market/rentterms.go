package market

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/money"
)

// RentTerms are what a renter asks to rent: how many GPUs, for how long,
// and the most it pays for each per hour. The CLI, the local API and the
// node's job controller all check them here, with the same messages.
type RentTerms struct {
	Count    int
	Duration time.Duration
	MaxPrice money.Micros // per GPU-hour
}

// ErrNoMaxPrice is returned by ParseRentTerms for terms without a max
// price (the rest of the terms are valid): a bid needs one, taking a
// posted ask at its price does not.
var ErrNoMaxPrice = errors.New("max_price is required (per GPU-hour, e.g. 2.50)")

// TermError is a rent term out of bounds: which term (count, hours or
// max_price), its value as given, and what is wanted instead.
type TermError struct {
	Term  string
	Value string
	Want  string
}

func (e *TermError) Error() string { return e.Term + " " + e.Value + ": " + e.Want }

// ParseRentTerms reads rent terms as a user gives them: a GPU count, a
// lease length in hours (rounded to the second) and a max price per
// GPU-hour in currency units ("2.50"). The terms are checked in that
// order; a missing max price is ErrNoMaxPrice, a bad term a *TermError.
func ParseRentTerms(count int, hours float64, maxPrice string) (RentTerms, error) {
	t := RentTerms{Count: count, Duration: time.Duration(hours * float64(time.Hour)).Round(time.Second)}
	t.MaxPrice, _ = money.ParseMicros(maxPrice) // a bad amount stays 0, which check refuses with its text
	return t, t.check(strconv.FormatFloat(hours, 'g', -1, 64), maxPrice)
}

// Validate checks the terms against the market's bounds: 1 to MaxCount
// GPUs, MinDuration to MaxDuration, a price above zero and at most
// MaxPriceMicros. The error is a *TermError.
func (t RentTerms) Validate() error {
	return t.check(strconv.FormatFloat(t.Duration.Hours(), 'g', -1, 64), t.MaxPrice.String())
}

// check is Validate with the hours and max price as the user wrote them
// ("" for a price not given).
func (t RentTerms) check(hours, price string) error {
	switch {
	case t.Count < 1 || t.Count > MaxCount:
		return &TermError{Term: "count", Value: strconv.Itoa(t.Count), Want: fmt.Sprintf("want 1 to %d", MaxCount)}
	case t.Duration < MinDuration || t.Duration > MaxDuration:
		return &TermError{Term: "hours", Value: hours, Want: fmt.Sprintf("want %s to %s", MinDuration, MaxDuration)}
	case price == "":
		return ErrNoMaxPrice
	case t.MaxPrice <= 0:
		return &TermError{Term: "max_price", Value: strconv.Quote(price), Want: "want a positive amount per GPU-hour, e.g. 2.50"}
	case t.MaxPrice > MaxPriceMicros:
		return &TermError{Term: "max_price", Value: strconv.Quote(price), Want: fmt.Sprintf("want at most %s per GPU-hour", money.Micros(MaxPriceMicros))}
	}
	return nil
}
