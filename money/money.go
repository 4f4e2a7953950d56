// Package money is gpumesh's money type: [Micros], a whole number of
// micro-units of the price currency (1 unit = 1,000,000 micros), and its
// decimal text form, the one users type and read ("2.10").
//
// A map of the package:
//
//   - [Micros] and [Unit]: the type and one currency unit.
//   - [ParseMicros]: decimal text with at most six places, such as
//     "2.10", to Micros, exactly.
//   - [Micros.String]: Micros to text with at least two places.
//
// There are no floats here: parsing and formatting are exact. Micros is
// an int64 underneath, so wire records keep carrying plain int64 fields
// (converted where they are read and built) and JSON carries a plain
// number. money is a leaf: it imports nothing of the module, and every
// package may import it.
package money

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Micros is an amount of money in micro-units of the price currency;
// prices are Micros per GPU-hour.
type Micros int64

// Unit is one unit of the price currency.
const Unit Micros = 1_000_000

// Places is the number of decimal places of a micro-unit: amounts are
// written with at most this many.
const Places = 6

// ParseMicros parses a non-negative amount in currency units, written as
// digits with an optional fraction of at most six places ("2", "2.1",
// "0.000001"), exactly into micro-units. Leading and trailing white
// space is ignored; signs, exponents, grouping and a bare "." are not
// accepted.
func ParseMicros(s string) (Micros, error) {
	t := strings.TrimSpace(s)
	whole, frac, dot := strings.Cut(t, ".")
	if rest, neg := strings.CutPrefix(whole, "-"); neg && allDigits(rest) && (!dot || allDigits(frac)) {
		return 0, fmt.Errorf("negative amount %q (amounts are non-negative)", s)
	}
	if !allDigits(whole) || dot && !allDigits(frac) {
		return 0, fmt.Errorf("bad amount %q (want a non-negative decimal such as 2.50)", s)
	}
	if len(frac) > Places {
		return 0, fmt.Errorf("amount %q has %d decimal places; at most %d are allowed (1 micro-unit = 0.000001)", s, len(frac), Places)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/int64(Unit) {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	f := int64(0)
	for i := range Places {
		f *= 10
		if i < len(frac) {
			f += int64(frac[i] - '0')
		}
	}
	m := w * int64(Unit)
	if m > math.MaxInt64-f {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	return Micros(m + f), nil
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// String renders m in currency units with at least two decimal places
// and no trailing zeros beyond them: 2100000 → "2.10", 2123400 →
// "2.1234", -1500000 → "-1.50". ParseMicros(m.String()) gives back m for
// every m ≥ 0.
func (m Micros) String() string {
	sign := ""
	u := uint64(m)
	if m < 0 {
		sign, u = "-", -u
	}
	whole, frac := u/uint64(Unit), u%uint64(Unit)
	fs := strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	for len(fs) < 2 {
		fs += "0"
	}
	return sign + strconv.FormatUint(whole, 10) + "." + fs
}
