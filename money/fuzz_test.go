package money

import (
	"math"
	"strings"
	"testing"
)

// FuzzParseMicros checks that every amount ParseMicros accepts is
// non-negative and survives String then ParseMicros unchanged, and that
// its text differs from String's only by padding.
func FuzzParseMicros(f *testing.F) {
	for _, s := range []string{"0", "2.10", "2.1", "0.000001", " 3.50 ", "007.5", "9223372036854.775807",
		"9223372036854.775808", "-1", "1.0000001", "1e6", ".5", "1.", "", "１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMicros(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseMicros(%q): empty error message", s)
			}
			return
		}
		if m < 0 {
			t.Fatalf("ParseMicros(%q) = %d, negative", s, m)
		}
		text := m.String()
		again, err := ParseMicros(text)
		if err != nil || again != m {
			t.Fatalf("ParseMicros(%q) = %d; its String %q parses to %d, %v", s, m, text, again, err)
		}
		if strings.TrimLeft(strings.TrimSpace(s), "0") == "" && m != 0 {
			t.Fatalf("ParseMicros(%q) = %d, want 0", s, m)
		}
	})
}

// FuzzMicrosString checks that String then ParseMicros gives back every
// non-negative amount, and that a negative amount's text is its
// magnitude's with a "-".
func FuzzMicrosString(f *testing.F) {
	for _, m := range []int64{0, 1, 2_100_000, -1_500_000, math.MaxInt64, math.MinInt64} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		m := Micros(n)
		text := m.String()
		if m < 0 {
			if m != math.MinInt64 && text != "-"+(-m).String() {
				t.Fatalf("Micros(%d).String() = %q, want %q", n, text, "-"+(-m).String())
			}
			if _, err := ParseMicros(text); err == nil {
				t.Fatalf("ParseMicros(%q) accepted a negative amount", text)
			}
			return
		}
		back, err := ParseMicros(text)
		if err != nil || back != m {
			t.Fatalf("ParseMicros(Micros(%d).String() = %q) = %d, %v", n, text, back, err)
		}
	})
}
