package catalog

import (
	"regexp"
	"slices"
	"testing"
)

var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// archCC is the compute capability major version (and, where an
// architecture has only one, minor version) each architecture must have.
var archCC = map[string]struct {
	major, minor int // minor < 0: any
	tf32BF16     bool
}{
	"turing": {7, 5, false},
	"ampere": {8, -1, true},
	"ada":    {8, 9, true},
	"hopper": {9, 0, true},
}

func TestProfilesSane(t *testing.T) {
	ps := Profiles()
	if len(ps) < 10 {
		t.Fatalf("got %d profiles, want at least 10", len(ps))
	}
	slugs := map[string]bool{}
	names := map[string]string{} // normalized NVML name -> slug
	for _, p := range ps {
		t.Run(p.Slug, func(t *testing.T) {
			if !slugRE.MatchString(p.Slug) {
				t.Errorf("slug %q does not match %s", p.Slug, slugRE)
			}
			if slugs[p.Slug] {
				t.Errorf("duplicate slug %q", p.Slug)
			}
			slugs[p.Slug] = true
			if p.Name == "" {
				t.Error("empty Name")
			}
			a, ok := archCC[p.Arch]
			if !ok {
				t.Fatalf("unknown arch %q", p.Arch)
			}
			if p.CCMajor != a.major || (a.minor >= 0 && p.CCMinor != a.minor) {
				t.Errorf("compute capability %d.%d does not fit arch %s", p.CCMajor, p.CCMinor, p.Arch)
			}
			for field, v := range map[string]int{
				"MemoryGiB":           p.MemoryGiB,
				"MemoryBandwidthGBps": p.MemoryBandwidthGBps,
				"FP32GFLOPS":          p.FP32GFLOPS,
				"INT8GOPS":            p.INT8GOPS,
				"TDPWatts":            p.TDPWatts,
			} {
				if v <= 0 {
					t.Errorf("%s = %d, want > 0", field, v)
				}
			}
			if a.tf32BF16 {
				if p.TF32GFLOPS < p.FP32GFLOPS {
					t.Errorf("TF32 %d < FP32 %d on a tensor-core arch", p.TF32GFLOPS, p.FP32GFLOPS)
				}
				if p.BF16GFLOPS < p.FP32GFLOPS {
					t.Errorf("BF16 %d < FP32 %d on a tensor-core arch", p.BF16GFLOPS, p.FP32GFLOPS)
				}
				// BF16 tensor throughput is twice TF32 on every
				// architecture here; a ratio far off means a sparse
				// figure slipped in.
				if p.TF32GFLOPS > 0 {
					if r := p.BF16GFLOPS * 100 / p.TF32GFLOPS; r < 190 || r > 210 {
						t.Errorf("BF16 %d / TF32 %d = %d%%, want about 200%%", p.BF16GFLOPS, p.TF32GFLOPS, r)
					}
				}
				if p.INT8GOPS < p.BF16GFLOPS {
					t.Errorf("INT8 %d < BF16 %d", p.INT8GOPS, p.BF16GFLOPS)
				}
			} else if p.TF32GFLOPS != 0 || p.BF16GFLOPS != 0 {
				t.Errorf("arch %s has no TF32/BF16 tensor mode, got TF32 %d BF16 %d", p.Arch, p.TF32GFLOPS, p.BF16GFLOPS)
			}
			// Sanity bounds catch unit slips (TFLOPS typed as GFLOPS,
			// sparse figures, MB for GB).
			if p.FP32GFLOPS < 1000 || p.FP32GFLOPS > 200000 {
				t.Errorf("FP32GFLOPS %d out of range", p.FP32GFLOPS)
			}
			if p.MemoryGiB > 512 || p.MemoryBandwidthGBps > 20000 || p.TDPWatts > 1500 {
				t.Errorf("memory %d GiB / %d GB/s / %d W out of range", p.MemoryGiB, p.MemoryBandwidthGBps, p.TDPWatts)
			}
			if len(p.NVMLNames) == 0 {
				t.Error("no NVML names")
			}
			for _, n := range p.NVMLNames {
				key := normalizeNVMLName(n)
				if other, dup := names[key]; dup {
					t.Errorf("NVML name %q also maps to %q", n, other)
				}
				names[key] = p.Slug
				if got, ok := SlugForNVMLName(n); !ok || got != p.Slug {
					t.Errorf("SlugForNVMLName(%q) = %q, %v; want %q, true", n, got, ok, p.Slug)
				}
			}
		})
	}
}

func TestRequiredSlugs(t *testing.T) {
	for _, s := range []string{"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "l40s", "rtx4090", "rtx3090", "a10", "t4"} {
		p, ok := Lookup(s)
		if !ok {
			t.Errorf("Lookup(%q): not found", s)
			continue
		}
		if p.Slug != s {
			t.Errorf("Lookup(%q).Slug = %q", s, p.Slug)
		}
	}
	if _, ok := Lookup("h100"); ok {
		t.Error(`Lookup("h100") found a profile, want none`)
	}
}

func TestProfilesSortedAndCopied(t *testing.T) {
	ps := Profiles()
	slugs := Slugs()
	if !slices.IsSorted(slugs) {
		t.Errorf("Slugs() not sorted: %v", slugs)
	}
	if len(ps) != len(slugs) {
		t.Fatalf("len(Profiles()) = %d, len(Slugs()) = %d", len(ps), len(slugs))
	}
	for i := range ps {
		if ps[i].Slug != slugs[i] {
			t.Errorf("Profiles()[%d].Slug = %q, Slugs()[%d] = %q", i, ps[i].Slug, i, slugs[i])
		}
	}

	// Mutating what we were handed must not change the table.
	ps[0].MemoryGiB = -1
	ps[0].NVMLNames[0] = "mutated"
	slugs[0] = "mutated"
	again := Profiles()
	if again[0].MemoryGiB == -1 || again[0].NVMLNames[0] == "mutated" || Slugs()[0] == "mutated" {
		t.Error("Profiles()/Slugs() share memory with the table")
	}
	p, _ := Lookup("h100-sxm")
	p.NVMLNames[0] = "mutated"
	if q, _ := Lookup("h100-sxm"); q.NVMLNames[0] == "mutated" {
		t.Error("Lookup shares NVMLNames with the table")
	}
}

func TestSlugForNVMLName(t *testing.T) {
	tests := []struct {
		name   string
		want   string
		wantOK bool
	}{
		{"NVIDIA H100 80GB HBM3", "h100-sxm", true},
		{"nvidia h100 80gb hbm3", "h100-sxm", true},
		{"  NVIDIA   H100 80GB\tHBM3 ", "h100-sxm", true},
		{"H100 80GB HBM3", "h100-sxm", true},
		{"NVIDIA H100 PCIe", "h100-pcie", true},
		{"NVIDIA H200", "h200", true},
		{"NVIDIA H200 141GB HBM3e", "h200", true}, // go-nvml mock dgxh200
		{"NVIDIA H200 NVL", "h200-nvl", true},
		{"NVIDIA A100-SXM4-40GB", "a100-40gb", true},
		{"Mock NVIDIA A100-SXM4-40GB", "a100-40gb", true}, // go-nvml mock dgxa100
		{"NVIDIA A100-PCIE-40GB", "a100-40gb", true},
		{"NVIDIA A100-SXM4-80GB", "a100-80gb", true},
		{"NVIDIA A100 80GB PCIe", "a100-80gb", true},
		{"NVIDIA L40S", "l40s", true},
		{"NVIDIA GeForce RTX 4090", "rtx4090", true},
		{"NVIDIA GeForce RTX 3090", "rtx3090", true},
		{"NVIDIA A10", "a10", true},
		{"Tesla T4", "t4", true},
		{"tesla   t4", "t4", true},

		{"", "", false},
		{"   ", "", false},
		{"NVIDIA", "", false},
		{"NVIDIA ", "", false},
		{"NVIDIA H100", "", false},
		{"NVIDIA A100", "", false},
		{"NVIDIA A10G", "", false},
		{"NVIDIA L40", "", false},
		{"NVIDIA GeForce RTX 4090 D", "", false},
		{"NVIDIANVIDIA H100 PCIe", "", false},
		{"h100-sxm", "", false}, // a slug is not an NVML name
		{"AMD Instinct MI300X", "", false},
	}
	for _, tt := range tests {
		got, ok := SlugForNVMLName(tt.name)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("SlugForNVMLName(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestKnown(t *testing.T) {
	for _, s := range Slugs() {
		if !Known(s) {
			t.Errorf("Known(%q) = false for a listed slug", s)
		}
	}
	for _, s := range []string{"", "h100", "H100-SXM", "NVIDIA H100 80GB HBM3", "h100-sxm "} {
		if Known(s) {
			t.Errorf("Known(%q) = true, want false", s)
		}
	}
}

func TestTFLOPS(t *testing.T) {
	tests := []struct {
		slug string
		want int
	}{
		{"h100-sxm", 989},  // dense BF16 989.4 TF
		{"a100-80gb", 312}, // dense BF16 312 TF
		{"l40s", 362},      // 362.05 TF, rounded down
		{"rtx3090", 71},
		{"t4", 8}, // Turing: no BF16, FP32 8.1 TF
		{"h100", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := TFLOPS(tt.slug); got != tt.want {
			t.Errorf("TFLOPS(%q) = %d, want %d", tt.slug, got, tt.want)
		}
	}
	for _, p := range Profiles() {
		if got := p.TFLOPS(); got <= 0 || got != TFLOPS(p.Slug) {
			t.Errorf("%s: Profile.TFLOPS() = %d, TFLOPS(slug) = %d; want equal and > 0", p.Slug, got, TFLOPS(p.Slug))
		}
	}
}
