package money

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestParseMicros(t *testing.T) {
	tests := []struct {
		in   string
		want Micros
	}{
		{"0", 0},
		{"2", 2_000_000},
		{"2.1", 2_100_000},
		{"2.10", 2_100_000},
		{"2.100000", 2_100_000},
		{"2.1234", 2_123_400},
		{"0.000001", 1},
		{"0.00001", 10},
		{"1.000001", 1_000_001},
		{"0.1", 100_000},
		{"0.3", 300_000}, // 0.1+0.2 != 0.3 in floats; exact here
		{"12.345678", 12_345_678},
		{"007.5", 7_500_000},
		{" 3.50 ", 3_500_000},
		{"9223372036854.775807", math.MaxInt64},
	}
	for _, tt := range tests {
		got, err := ParseMicros(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseMicros(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseMicrosErrors(t *testing.T) {
	tests := []struct {
		in     string
		reason string
	}{
		{"", "bad amount"},
		{"  ", "bad amount"},
		{"abc", "bad amount"},
		{".5", "bad amount"},
		{"1.", "bad amount"},
		{".", "bad amount"},
		{"1,5", "bad amount"},
		{"1e6", "bad amount"},
		{"+1", "bad amount"},
		{"1.2.3", "bad amount"},
		{"--1", "bad amount"},
		{"-", "bad amount"},
		{"１", "bad amount"}, // a full-width digit is not an ASCII digit
		{"-1", "negative amount"},
		{"-0.5", "negative amount"},
		{"1.0000001", "7 decimal places; at most 6"},
		{"2.1234567", "7 decimal places; at most 6"},
		{"9223372036854.775808", "too large"},
		{"9223372036855", "too large"},
		{"99999999999999999999", "too large"},
	}
	for _, tt := range tests {
		got, err := ParseMicros(tt.in)
		if err == nil {
			t.Errorf("ParseMicros(%q) = %d, want an error containing %q", tt.in, got, tt.reason)
			continue
		}
		if !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("ParseMicros(%q): error %q, want it to contain %q", tt.in, err, tt.reason)
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		in   Micros
		want string
	}{
		{0, "0.00"},
		{1, "0.000001"},
		{10, "0.00001"},
		{100_000, "0.10"},
		{2_000_000, "2.00"},
		{2_100_000, "2.10"},
		{2_123_400, "2.1234"},
		{12_345_678, "12.345678"},
		{-1_500_000, "-1.50"},
		{-1, "-0.000001"},
		{math.MaxInt64, "9223372036854.775807"},
		{math.MinInt64, "-9223372036854.775808"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("Micros(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
	}
}

// TestJSONIsAPlainNumber guards the JSON contract: fields such as
// price_micros stay integers when their Go type is Micros.
func TestJSONIsAPlainNumber(t *testing.T) {
	b, err := json.Marshal(struct {
		P Micros `json:"price_micros,omitempty"`
		Q Micros `json:"q,omitempty"`
	}{P: 2_100_000})
	if err != nil || string(b) != `{"price_micros":2100000}` {
		t.Errorf("json.Marshal = %s, %v; want {\"price_micros\":2100000}", b, err)
	}
	var back struct {
		P Micros `json:"price_micros"`
	}
	if err := json.Unmarshal([]byte(`{"price_micros":1}`), &back); err != nil || back.P != 1 {
		t.Errorf("json.Unmarshal = %d, %v; want 1", back.P, err)
	}
}
