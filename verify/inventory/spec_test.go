package inventory

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	good := []struct {
		in   string
		want Spec
	}{
		{"auto", Spec{Mode: ModeAuto}},
		{"none", Spec{Mode: ModeNone}},
		{"  auto\n", Spec{Mode: ModeAuto}},
		{"sim:h100-sxm:8", Spec{Mode: ModeSim, Sim: []SimSpec{{"h100-sxm", 8}}}},
		{"sim:h100-sxm:8,a100-80gb:2", Spec{Mode: ModeSim, Sim: []SimSpec{{"h100-sxm", 8}, {"a100-80gb", 2}}}},
		{"sim:t4:1, rtx4090:64 ,l40s:3", Spec{Mode: ModeSim, Sim: []SimSpec{{"t4", 1}, {"rtx4090", 64}, {"l40s", 3}}}},
		{"sim:h200:064", Spec{Mode: ModeSim, Sim: []SimSpec{{"h200", 64}}}},
		{"sim:h100-sxm:64,h100-pcie:64,h200:64,a100-80gb:64", Spec{Mode: ModeSim, Sim: []SimSpec{{"h100-sxm", 64}, {"h100-pcie", 64}, {"h200", 64}, {"a100-80gb", 64}}}},
	}
	for _, tt := range good {
		got, err := ParseSpec(tt.in)
		if err != nil {
			t.Errorf("ParseSpec(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSpec(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}

	bad := []struct {
		in   string
		want []string // substrings of the error
	}{
		{"", []string{"empty", "want auto, none or sim:MODEL:COUNT"}},
		{"   ", []string{"empty"}},
		{"Auto", []string{`unknown mode "Auto"`}},
		{"gpu", []string{`unknown mode "gpu"`, "want auto, none or sim"}},
		{"nvml:0", []string{`unknown mode "nvml"`}},
		{"sim", []string{"no simulated gpus listed"}},
		{"sim:", []string{"empty entry", "MODEL:COUNT"}},
		{"sim:h100-sxm", []string{`entry "h100-sxm"`, "want MODEL:COUNT"}},
		{"sim:h100:8", []string{`unknown model "h100"`, "known models: a10, a100-40gb,", "h100-sxm", "t4"}},
		{"sim:H100-SXM:8", []string{`unknown model "H100-SXM"`}},
		{"sim:h100-sxm:0", []string{`entry "h100-sxm:0"`, `count "0"`, "1..64"}},
		{"sim:h100-sxm:65", []string{`count "65"`, "1..64"}},
		{"sim:h100-sxm:-1", []string{`count "-1"`}},
		{"sim:h100-sxm:+1", []string{`count "+1"`}},
		{"sim:h100-sxm:eight", []string{`count "eight"`}},
		{"sim:h100-sxm:", []string{`count ""`}},
		{"sim:h100-sxm:8:1", []string{`count "8:1"`}},
		{"sim:h100-sxm: 8", []string{`count " 8"`}},
		{"sim:h100-sxm:99999999999999999999", []string{`count "99999999999999999999"`}},
		{"sim:h100-sxm:8,", []string{"empty entry"}},
		{"sim:h100-sxm:8,,t4:1", []string{"empty entry"}},
		{"sim:h100-sxm:8,h100-sxm:2", []string{`model "h100-sxm" listed twice`}},
		{"sim:h100-sxm:64,h100-pcie:64,h200:64,a100-80gb:64,t4:1", []string{"more than 256 simulated gpus"}},
	}
	for _, tt := range bad {
		got, err := ParseSpec(tt.in)
		if err == nil {
			t.Errorf("ParseSpec(%q) = %+v, want an error", tt.in, got)
			continue
		}
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("ParseSpec(%q): error %v does not wrap ErrInvalidSpec", tt.in, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseSpec(%q) error %q lacks %q", tt.in, err, w)
			}
		}
	}
}

func TestSpecString(t *testing.T) {
	for in, want := range map[string]string{
		"auto":                           "auto",
		" none ":                         "none",
		"sim: h100-sxm:08 , a100-80gb:2": "sim:h100-sxm:8,a100-80gb:2",
	} {
		s, err := ParseSpec(in)
		if err != nil {
			t.Fatalf("ParseSpec(%q): %v", in, err)
		}
		if got := s.String(); got != want {
			t.Errorf("ParseSpec(%q).String() = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"auto", "none", "sim", "sim:", "sim:h100-sxm:8", "sim:h100-sxm:8,a100-80gb:2",
		"sim: t4:1 , l40s:064", "sim:h100:8", "sim:h100-sxm:0", "sim:h100-sxm:8,h100-sxm:1",
		"sim:h100-sxm:64,h100-pcie:64,h200:64,a100-80gb:64,t4:1", "", "auto:1", "sim:,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSpec(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("ParseSpec(%q): error %v does not wrap ErrInvalidSpec", in, err)
			}
			return
		}
		total := 0
		for _, sim := range s.Sim {
			if sim.Count < 1 || sim.Count > MaxSimCount {
				t.Fatalf("ParseSpec(%q): count %d out of range", in, sim.Count)
			}
			total += sim.Count
		}
		if total > MaxSimTotal {
			t.Fatalf("ParseSpec(%q): total %d > %d", in, total, MaxSimTotal)
		}
		again, err := ParseSpec(s.String())
		if err != nil {
			t.Fatalf("ParseSpec(%q) = %+v; re-parsing %q: %v", in, s, s.String(), err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("ParseSpec(%q) = %+v; re-parsing %q gives %+v", in, s, s.String(), again)
		}
	})
}
