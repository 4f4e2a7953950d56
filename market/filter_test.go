package market

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseFilter(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical String()
	}{
		{"", ""},
		{"   \t\n ", ""},
		{"model=h100-sxm", "model=h100-sxm"},
		{"  model=h100-sxm|a100-80gb   count>=8 ", "model=h100-sxm|a100-80gb count>=8"},
		{"VRAM>=80", "vram>=80"},
		{"cc>=8.9 cc<10", "cc>=8.9 cc<10"},
		{"price<=2.10", "price<=2.10"},
		{"price<0.000001", "price<0.000001"},
		{"rep>=0.95 uptime>99.5", "rep>=0.95 uptime>99.5"},
		{"tflops>500 free>0", "tflops>500 free>0"},
		{"verified=yes simulated!=1", "verified=yes simulated!=1"},
		{"region=EU-West|us-east", "region=EU-West|us-east"},
		{"model!=rtx4090|rtx3090", "model!=rtx4090|rtx3090"},
		{"count=2|4|8", "count=2|4|8"},
	}
	for _, tt := range tests {
		f, err := ParseFilter(tt.in)
		if err != nil {
			t.Errorf("ParseFilter(%q): unexpected error: %v", tt.in, err)
			continue
		}
		if got := f.String(); got != tt.want {
			t.Errorf("ParseFilter(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		again, err := ParseFilter(f.String())
		if err != nil || !reflect.DeepEqual(again, f) {
			t.Errorf("ParseFilter(%q) does not round-trip: got %#v, %v; want %#v", f.String(), again, err, f)
		}
	}
}

func TestParseFilterTerms(t *testing.T) {
	args := []string{"model=h100-sxm|a100-80gb", "vram>=80"} // as a shell splits them
	f, err := ParseFilter(strings.Join(args, " "))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key    string
		op     Op
		values []string
	}{
		{"model", OpEq, []string{"h100-sxm", "a100-80gb"}},
		{"vram", OpGe, []string{"80"}},
	}
	if len(f.Terms) != len(want) {
		t.Fatalf("got %d terms, want %d", len(f.Terms), len(want))
	}
	for i, w := range want {
		got := f.Terms[i]
		if got.Key != w.key || got.Op != w.op || !reflect.DeepEqual(got.Values, w.values) {
			t.Errorf("term %d = %s %s %q, want %s %s %q", i, got.Key, got.Op, got.Values, w.key, w.op, w.values)
		}
	}
}

func TestParseFilterErrors(t *testing.T) {
	tests := []struct {
		in     string
		index  int
		term   string
		reason string // substring of the reason
	}{
		{"gpu=h100", 1, "gpu=h100", `unknown key "gpu" (valid keys: model, region, count`},
		{"count>=1 vram80", 2, "vram80", "missing operator"},
		{"reach=nat", 1, "reach=nat", `unknown reach "nat" (known: public, punchable, relay-only, unknown)`},
		{"=80", 1, "=80", "missing key"},
		{"vram>=", 1, "vram>=", "empty value (want e.g. vram>=80)"},
		{"model=a||b", 1, "model=a||b", `empty alternative in "a||b"`},
		{"model=a|", 1, "model=a|", "empty alternative"},
		{"vram>=8x", 1, "vram>=8x", `bad number "8x" for vram`},
		{"vram>=.5", 1, "vram>=.5", "bad number"},
		{"vram>=1e3", 1, "vram>=1e3", "bad number"},
		{"count>-1", 1, "count>-1", "negative number -1 for count"},
		{"price<-0.5", 1, "price<-0.5", "negative amount"},
		{"count>=1.5", 1, "count>=1.5", "whole number"},
		{"count>=99999999999999999999", 1, "count>=99999999999999999999", "too large"},
		{"price<=2.1234567", 1, "price<=2.1234567", "7 decimal places; at most 6"},
		{"price<=9223372036855", 1, "price<=9223372036855", "too large"},
		{"model<h100", 1, "model<h100", "operator < is not valid for model, a string (use = or !=)"},
		{"region>=eu", 1, "region>=eu", "not valid for region"},
		{"verified>0", 1, "verified>0", "not valid for verified, a bool"},
		{"vram>=40|80", 1, "vram>=40|80", "alternatives (|) need = or !=, not >="},
		{"verified=maybe", 1, "verified=maybe", `"maybe" is not a bool (want true, false, yes, no, 1 or 0)`},
		{"cc>=9.x", 1, "cc>=9.x", `bad compute capability "9.x" (want N.M or N`},
		{"cc>=8.9.1", 1, "cc>=8.9.1", "bad compute capability"},
		{"cc>=99999.0", 1, "cc>=99999.0", "too large"},
		{"vram>>80", 1, "vram>>80", `invalid operator ">>" (want one of = != < <= > >=)`},
		{"vram=>80", 1, "vram=>80", `invalid operator "=>"`},
		{"vram!80", 1, "vram!80", `invalid operator "!"`},
		{"model==h100", 1, "model==h100", `invalid operator "=="`},
		{"rep>1.5", 1, "rep>1.5", "rep is between 0 and 1, not 1.5"},
		{"uptime>=100.1", 1, "uptime>=100.1", "between 0 and 100"},
		{"region=eu west", 2, "west", "missing operator"},
		{"region=eu,us", 1, "region=eu,us", `invalid character ','`},
		{"model=h\xff", 1, "model=h\xff", "not valid UTF-8"},
	}
	for _, tt := range tests {
		_, err := ParseFilter(tt.in)
		var fe *FilterError
		if !errors.As(err, &fe) {
			t.Errorf("ParseFilter(%q): error %v, want a *FilterError", tt.in, err)
			continue
		}
		if fe.Index != tt.index || fe.Term != tt.term {
			t.Errorf("ParseFilter(%q): error names term %d %q, want %d %q", tt.in, fe.Index, fe.Term, tt.index, tt.term)
		}
		if !strings.Contains(fe.Reason, tt.reason) {
			t.Errorf("ParseFilter(%q): reason %q, want it to contain %q", tt.in, fe.Reason, tt.reason)
		}
		if msg := err.Error(); !strings.Contains(msg, tt.term) && !strings.Contains(msg, "\\xff") {
			t.Errorf("ParseFilter(%q): error %q does not mention the term", tt.in, msg)
		}
	}
}

func TestFilterErrorMessage(t *testing.T) {
	_, err := ParseFilter("model=h100-sxm count>=1 vram>>80")
	want := `filter term 3 "vram>>80": invalid operator ">>" (want one of = != < <= > >=)`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

func TestParseFilterLimits(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		reason string
	}{
		{"too long", "model=" + strings.Repeat("a", MaxFilterBytes), "the limit is 4096"},
		{"too many terms", strings.Repeat("count>=1 ", MaxFilterTerms+1), "filter has 33 terms; the limit is 32"},
	}
	for _, tt := range tests {
		_, err := ParseFilter(tt.in)
		var fe *FilterError
		if !errors.As(err, &fe) || !strings.Contains(fe.Reason, tt.reason) || fe.Index != 0 {
			t.Errorf("%s: error %v, want a *FilterError with index 0 and %q", tt.name, err, tt.reason)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "filter: ") {
			t.Errorf("%s: error %q, want prefix %q", tt.name, err, "filter: ")
		}
	}
	if _, err := ParseFilter(strings.Repeat("count>=1 ", MaxFilterTerms)); err != nil {
		t.Errorf("%d terms: unexpected error %v", MaxFilterTerms, err)
	}
}

func TestParseFilterKnowsTheCatalog(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{"model=h100-sxm|a100-80gb", ""},
		{"model!=a100-80gb", ""},
		{"model=h100-sxm|rtx4090 vram>=24", ""},
		{"region=eu", ""},
		{"model=h100", `unknown model "h100" (known: a10, a100-40gb, a100-80gb, h100-pcie, h100-sxm,`},
		{"model!=a100-80gb|rtx-9999", `unknown model "rtx-9999"`},
	}
	for _, tt := range tests {
		for _, opts := range [][]FilterOption{nil, {AnyModel()}} {
			_, err := ParseFilter(tt.in, opts...)
			switch {
			case (tt.wantErr == "" || opts != nil) && err != nil:
				t.Errorf("ParseFilter(%q, %d options): unexpected error %v", tt.in, len(opts), err)
			case tt.wantErr != "" && opts == nil && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ParseFilter(%q): error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
		}
	}
}

func ptr(f float64) *float64 { return &f }

// sampleOffers returns offers keyed by a short name.
func sampleOffers() map[string]Offer {
	return map[string]Offer{
		"h100": {
			PeerID: "12D3KooWh100", Model: "h100-sxm", Name: "NVIDIA H100 80GB HBM3",
			Count: 8, Free: 6, VRAMGiB: 80, ComputeCapability: "9.0", TFLOPS: 989,
			Region: "eu-west", Verified: true, PriceMicros: 2_100_000,
			Reputation: ptr(0.97), UptimePct: ptr(99.9), Reach: "public",
		},
		"4090": {
			PeerID: "12D3KooW4090", Model: "rtx4090", Name: "NVIDIA GeForce RTX 4090",
			Count: 1, Free: 1, VRAMGiB: 24, ComputeCapability: "8.9", TFLOPS: 165,
			Region: "US-East", Simulated: true, Reach: "relay-only",
		},
		"a6000": {
			PeerID: "12D3KooWa6000", Model: "rtx-a6000", Count: 2, Free: 0, VRAMGiB: 48,
			ComputeCapability: "8.6", TFLOPS: 154, Region: "us-east", PriceMicros: 1,
			Reputation: ptr(0.5),
		},
		"odd": {PeerID: "12D3KooWodd", Model: "mystery", Count: 1, Free: 1, ComputeCapability: "n/a"},
	}
}

func TestMatch(t *testing.T) {
	offers := sampleOffers()
	tests := []struct {
		filter string
		offer  string
		ok     bool
		reason string
	}{
		{"", "odd", true, ""},
		{"vram>=80", "h100", true, ""},
		{"vram>=80", "4090", false, "vram>=80: has 24"},
		{"model=h100-sxm|a100-80gb", "h100", true, ""},
		{"model=h100-sxm|a100-80gb", "4090", false, "model=h100-sxm|a100-80gb: has rtx4090"},
		{"model!=h100-sxm|a100-80gb", "4090", true, ""},
		{"model!=rtx4090|h100-sxm", "h100", false, "model!=rtx4090|h100-sxm: has h100-sxm"},
		// compute capability compares as (major, minor).
		{"cc>=8.9", "h100", true, ""},
		{"cc>=8.9", "4090", true, ""},
		{"cc>=8.9", "a6000", false, "cc>=8.9: has 8.6"},
		{"cc>8.9", "4090", false, "cc>8.9: has 8.9"},
		{"cc=9", "h100", true, ""},
		{"cc<9", "4090", true, ""},
		{"cc>=8.10", "4090", false, "cc>=8.10: has 8.9"},
		{"cc>=1", "odd", false, "cc>=1: compute capability unknown"},
		// price is exact micros.
		{"price=2.1", "h100", true, ""},
		{"price=2.100000", "h100", true, ""},
		{"price<2.1", "h100", false, "price<2.1: has 2.10"},
		{"price<=2.099999", "h100", false, "price<=2.099999: has 2.10"},
		{"price=0.000001", "a6000", true, ""},
		{"price<1", "4090", false, "price<1: price not advertised"},
		{"price!=5", "4090", false, "price!=5: price not advertised"},
		// absent reputation and uptime.
		{"rep>=0.9", "h100", true, ""},
		{"rep>=0.9", "a6000", false, "rep>=0.9: has 0.5"},
		{"rep>=0", "4090", false, "rep>=0: reputation unknown"},
		{"uptime>=99.9", "h100", true, ""},
		{"uptime>=50", "a6000", false, "uptime>=50: uptime unknown"},
		// bools.
		{"verified=true", "h100", true, ""},
		{"verified=no", "h100", false, "verified=no: has true"},
		{"simulated=0", "4090", false, "simulated=0: has true"},
		{"simulated!=YES", "h100", true, ""},
		{"verified=true|false", "4090", true, ""},
		// region is case-insensitive.
		{"region=us-east", "4090", true, ""},
		{"region=US-EAST", "a6000", true, ""},
		{"region!=us-east", "4090", false, "region!=us-east: has US-East"},
		{"region=eu-west", "odd", false, "region=eu-west: region unknown"},
		// reach, as the profile states it.
		{"reach=public|punchable", "h100", true, ""},
		{"reach!=relay-only", "4090", false, "reach!=relay-only: has relay-only"},
		{"reach=public", "odd", false, "reach=public: reach unknown"},
		// counts and numbers.
		{"count>=8 free>=4", "h100", true, ""},
		{"free>0", "a6000", false, "free>0: has 0"},
		{"count=1|2", "a6000", true, ""},
		{"tflops>=500.5", "h100", true, ""},
		{"tflops>165", "4090", false, "tflops>165: has 165"},
		// the first failing term is named.
		{"vram>=24 cc>=9 price<=3", "4090", false, "cc>=9: has 8.9"},
	}
	for _, tt := range tests {
		f, err := ParseFilter(tt.filter)
		if err != nil {
			t.Fatalf("ParseFilter(%q): %v", tt.filter, err)
		}
		ok, reason := f.Match(offers[tt.offer])
		if ok != tt.ok || reason != tt.reason {
			t.Errorf("%q.Match(%s) = %v, %q; want %v, %q", tt.filter, tt.offer, ok, reason, tt.ok, tt.reason)
		}
	}
}

func TestMatchHandBuiltTerm(t *testing.T) {
	o := sampleOffers()["h100"]
	tests := []struct {
		term   Term
		ok     bool
		reason string
	}{
		{Term{Key: "vram", Op: OpGe, Values: []string{"80"}}, true, ""},
		{Term{Key: "VRAM", Op: OpGt, Values: []string{"80"}}, false, "VRAM>80: has 80"},
		{Term{Key: "gpu", Op: OpEq, Values: []string{"x"}}, false, `gpu=x: unknown key "gpu"`},
		{Term{Key: "vram", Values: []string{"80"}}, false, "vramOp(0)80: invalid operator"},
	}
	for _, tt := range tests {
		ok, reason := Filter{Terms: []Term{tt.term}}.Match(o)
		if ok != tt.ok || !strings.HasPrefix(reason, tt.reason) {
			t.Errorf("Match with %#v = %v, %q; want %v, %q…", tt.term, ok, reason, tt.ok, tt.reason)
		}
	}
}

func TestModels(t *testing.T) {
	tests := []struct {
		filter string
		want   []string
	}{
		{"", nil},
		{"vram>=80", nil},
		{"model!=rtx4090", nil},
		{"model=h100-sxm", []string{"h100-sxm"}},
		{"model=h100-sxm|a100-80gb|h100-sxm", []string{"a100-80gb", "h100-sxm"}},
		{"model=h100-sxm|a100-80gb model!=a100-80gb", []string{"h100-sxm"}},
		{"model=h100-sxm|a100-80gb model=a100-80gb|rtx4090", []string{"a100-80gb"}},
		{"model=h100-sxm model=rtx4090", []string{}},
		{"model=h100-sxm model!=h100-sxm", []string{}},
	}
	for _, tt := range tests {
		f, err := ParseFilter(tt.filter)
		if err != nil {
			t.Fatalf("ParseFilter(%q): %v", tt.filter, err)
		}
		got := f.Models()
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q.Models() = %#v, want %#v", tt.filter, got, tt.want)
		}
	}
}

func TestOpString(t *testing.T) {
	want := map[Op]string{OpEq: "=", OpNe: "!=", OpLt: "<", OpLe: "<=", OpGt: ">", OpGe: ">=", 0: "Op(0)"}
	for op, s := range want {
		if got := op.String(); got != s {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), got, s)
		}
	}
}

func TestFilterRealOnly(t *testing.T) {
	real, sim := Offer{Model: "h100-sxm"}, Offer{Model: "h100-sxm", Simulated: true}
	for _, tc := range []struct {
		filter    string
		allow     bool
		wantAdded bool
		wantSim   bool // whether the simulated offer then matches
	}{
		{"model=h100-sxm", false, true, false},
		{"", false, true, false},
		{"model=h100-sxm", true, false, true},
		{"simulated=true", false, false, true},
		{"simulated!=false", false, false, true},
		{"simulated=false", true, false, false},
	} {
		f, added := mustParseFilter(t, tc.filter).RealOnly(tc.allow)
		if added != tc.wantAdded {
			t.Errorf("%q allow=%v: added = %v, want %v", tc.filter, tc.allow, added, tc.wantAdded)
		}
		if ok, _ := f.Match(sim); ok != tc.wantSim {
			t.Errorf("%q allow=%v: simulated offer matches = %v, want %v", tc.filter, tc.allow, ok, tc.wantSim)
		}
		if ok, _ := f.Match(real); ok == (tc.filter == "simulated=true" || tc.filter == "simulated!=false") {
			t.Errorf("%q allow=%v: real offer matches = %v", tc.filter, tc.allow, ok)
		}
		if g, err := ParseFilter(f.String()); err != nil || g.String() != f.String() {
			t.Errorf("%q: canonical form %q does not parse back: %v", tc.filter, f.String(), err)
		}
	}
}

// TestFilterHardwareKeys: pcie, nvlink, cuda and membw match what the
// profile says of the GPUs, and an offer that does not say fails them.
func TestFilterHardwareKeys(t *testing.T) {
	links := func(n int) *int { return &n }
	h100 := Offer{Model: "h100-sxm", PCIeGen: 5, PCIeWidth: 16, NVLinks: links(18), CUDAVersion: "12.8", MemBandwidthGBps: 3350}
	l40s := Offer{Model: "l40s", PCIeGen: 4, PCIeWidth: 16, NVLinks: links(0), CUDAVersion: "12.4", MemBandwidthGBps: 864}
	unknown := Offer{Model: "h100-sxm"}
	for _, tc := range []struct {
		filter                string
		h100, l40s, unknownOK bool
	}{
		{"pcie>=5", true, false, false},
		{"pcie>=4", true, true, false},
		{"nvlink>=1", true, false, false},
		{"nvlink=0", false, true, false},
		{"cuda>=12.4", true, true, false},
		{"cuda>=12.5", true, false, false},
		{"cuda>=13", false, false, false},
		{"membw>=2000", true, false, false},
		{"membw<1000 pcie=4", false, true, false},
	} {
		f := mustParseFilter(t, tc.filter)
		for _, c := range []struct {
			name string
			o    Offer
			want bool
		}{{"h100", h100, tc.h100}, {"l40s", l40s, tc.l40s}, {"unknown", unknown, tc.unknownOK}} {
			if ok, why := f.Match(c.o); ok != c.want {
				t.Errorf("%q on %s: %v (%s), want %v", tc.filter, c.name, ok, why, c.want)
			}
		}
	}
	for _, bad := range []string{"cuda>=twelve", "pcie>=4.5", "nvlink>=-1", "membw>=fast"} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("ParseFilter(%q) = nil error", bad)
		}
	}
	if _, err := ParseFilter("cuda>=x"); err == nil || !strings.Contains(err.Error(), "bad cuda version") {
		t.Errorf("cuda>=x: %v, want a bad cuda version error", err)
	}
}
