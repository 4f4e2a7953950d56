// Package catalog is gpumesh's table of known GPU models: one [Profile] of
// datasheet figures per model, under a canonical slug such as "h100-sxm".
// It is a leaf: it imports nothing of this module and no GPU library, and
// every other package may import it.
//
// A map of the package:
//
//   - [Profile]: a model's slug, names, architecture, compute capability,
//     memory and bandwidth, and dense peak throughput (FP32, TF32, BF16,
//     INT8) and power.
//   - [Profiles], [Slugs], [Lookup], [Known]: the read-only table.
//   - [SlugForNVMLName]: the one place that maps the names NVML reports
//     to slugs.
//   - [Profile.TFLOPS] and [TFLOPS]: the one headline throughput figure
//     (dense BF16, or FP32 where there is no BF16) that offers show and
//     filters compare.
//
// All figures are integers; the table is never modified, and accessors
// hand out copies.
package catalog

import (
	"slices"
	"strings"
)

// Profile is the datasheet figures of one GPU model.
//
// Throughput figures are dense (without structured sparsity), peak, at
// boost clock, as the vendor's datasheet or architecture whitepaper states
// them. A zero TF32GFLOPS or BF16GFLOPS means the model has no such
// tensor-core mode (Turing). Where one slug covers several form factors
// (A100 SXM4 and PCIe), figures are those of the SXM part.
type Profile struct {
	Slug                string // canonical model slug, e.g. "h100-sxm"
	Name                string // marketing name, e.g. "NVIDIA H100 SXM5 80GB"
	Arch                string // "hopper", "ampere", "ada", "turing"
	MemoryGiB           int    // nominal memory (80 for H100 80GB)
	MemoryBandwidthGBps int    // peak memory bandwidth, GB/s
	CCMajor, CCMinor    int    // CUDA compute capability
	FP32GFLOPS          int    // FP32 (non-tensor), GFLOPS
	TF32GFLOPS          int    // TF32 tensor, dense, GFLOPS; 0 if unsupported
	BF16GFLOPS          int    // BF16 tensor with FP32 accumulate, dense, GFLOPS; 0 if unsupported
	INT8GOPS            int    // INT8 tensor, dense, GOPS
	TDPWatts            int    // maximum board / module power, W
	// NVMLNames are the names NVML reports for this model
	// (nvmlDeviceGetName), e.g. "NVIDIA H100 80GB HBM3".
	NVMLNames []string
}

// profiles is the read-only profile table, sorted by slug. It is never
// modified; accessors hand out copies.
var profiles = []Profile{
	{
		// A10 datasheet: FP32 31.2 TF, TF32 62.5 TF, BF16 125 TF,
		// INT8 250 TOPS (dense); GDDR6 600 GB/s; 150 W.
		Slug: "a10", Name: "NVIDIA A10", Arch: "ampere",
		MemoryGiB: 24, MemoryBandwidthGBps: 600, CCMajor: 8, CCMinor: 6,
		FP32GFLOPS: 31200, TF32GFLOPS: 62500, BF16GFLOPS: 125000, INT8GOPS: 250000,
		TDPWatts:  150,
		NVMLNames: []string{"NVIDIA A10"},
	},
	{
		// A100 datasheet: FP32 19.5 TF, TF32 156 TF, BF16 312 TF,
		// INT8 624 TOPS (dense); HBM2 1,555 GB/s; SXM4 400 W (PCIe 250 W).
		Slug: "a100-40gb", Name: "NVIDIA A100 40GB", Arch: "ampere",
		MemoryGiB: 40, MemoryBandwidthGBps: 1555, CCMajor: 8, CCMinor: 0,
		FP32GFLOPS: 19500, TF32GFLOPS: 156000, BF16GFLOPS: 312000, INT8GOPS: 624000,
		TDPWatts:  400,
		NVMLNames: []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"},
	},
	{
		// A100 80GB: HBM2e 2,039 GB/s on SXM4 (1,935 GB/s PCIe).
		Slug: "a100-80gb", Name: "NVIDIA A100 80GB", Arch: "ampere",
		MemoryGiB: 80, MemoryBandwidthGBps: 2039, CCMajor: 8, CCMinor: 0,
		FP32GFLOPS: 19500, TF32GFLOPS: 156000, BF16GFLOPS: 312000, INT8GOPS: 624000,
		TDPWatts: 400,
		// "NVIDIA A100-PCIE-80GB" is what go-nvml's mock reports for the
		// 80GB PCIe card; drivers report "NVIDIA A100 80GB PCIe".
		NVMLNames: []string{"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-80GB"},
	},
	{
		// H100 whitepaper: SXM5 FP32 66.9 TF, TF32 494.7 TF, BF16 989.4 TF,
		// INT8 1,978.9 TOPS (dense); HBM3 3.35 TB/s; up to 700 W.
		Slug: "h100-sxm", Name: "NVIDIA H100 SXM5 80GB", Arch: "hopper",
		MemoryGiB: 80, MemoryBandwidthGBps: 3350, CCMajor: 9, CCMinor: 0,
		FP32GFLOPS: 66900, TF32GFLOPS: 494700, BF16GFLOPS: 989400, INT8GOPS: 1978900,
		TDPWatts:  700,
		NVMLNames: []string{"NVIDIA H100 80GB HBM3"},
	},
	{
		// H100 whitepaper: PCIe FP32 51.2 TF, TF32 378 TF, BF16 756 TF,
		// INT8 1,513 TOPS (dense); HBM2e 2 TB/s; 350 W.
		Slug: "h100-pcie", Name: "NVIDIA H100 PCIe 80GB", Arch: "hopper",
		MemoryGiB: 80, MemoryBandwidthGBps: 2000, CCMajor: 9, CCMinor: 0,
		FP32GFLOPS: 51200, TF32GFLOPS: 378000, BF16GFLOPS: 756000, INT8GOPS: 1513000,
		TDPWatts:  350,
		NVMLNames: []string{"NVIDIA H100 PCIe"},
	},
	{
		// H200 datasheet: SXM compute as H100 SXM (TF32 989, BF16 1,979,
		// INT8 3,958 sparse); 141 GB HBM3e at 4.8 TB/s; up to 700 W.
		Slug: "h200", Name: "NVIDIA H200 SXM 141GB", Arch: "hopper",
		MemoryGiB: 141, MemoryBandwidthGBps: 4800, CCMajor: 9, CCMinor: 0,
		FP32GFLOPS: 66900, TF32GFLOPS: 494700, BF16GFLOPS: 989400, INT8GOPS: 1978900,
		TDPWatts: 700,
		// "NVIDIA H200 141GB HBM3e" is what go-nvml's mock (dgxh200) reports.
		NVMLNames: []string{"NVIDIA H200", "NVIDIA H200 141GB HBM3e"},
	},
	{
		// H200 datasheet: NVL FP32 60 TF, TF32 835, BF16 1,671, INT8 3,341
		// (sparse; halved here); 141 GB HBM3e at 4.8 TB/s; up to 600 W.
		Slug: "h200-nvl", Name: "NVIDIA H200 NVL 141GB", Arch: "hopper",
		MemoryGiB: 141, MemoryBandwidthGBps: 4800, CCMajor: 9, CCMinor: 0,
		FP32GFLOPS: 60000, TF32GFLOPS: 417500, BF16GFLOPS: 835500, INT8GOPS: 1670500,
		TDPWatts:  600,
		NVMLNames: []string{"NVIDIA H200 NVL"},
	},
	{
		// L40S datasheet: FP32 91.6 TF, TF32 183 TF, BF16 362.05 TF,
		// INT8 733 TOPS (dense); GDDR6 864 GB/s; 350 W.
		Slug: "l40s", Name: "NVIDIA L40S", Arch: "ada",
		MemoryGiB: 48, MemoryBandwidthGBps: 864, CCMajor: 8, CCMinor: 9,
		FP32GFLOPS: 91600, TF32GFLOPS: 183000, BF16GFLOPS: 362050, INT8GOPS: 733000,
		TDPWatts:  350,
		NVMLNames: []string{"NVIDIA L40S"},
	},
	{
		// GA102 (Ampere GeForce) whitepaper: RTX 3090 FP32 35.6 TF, TF32
		// 35.6 TF, BF16 (FP32 accumulate) 71 TF, INT8 284 TOPS (dense);
		// GDDR6X 936 GB/s; 350 W.
		Slug: "rtx3090", Name: "NVIDIA GeForce RTX 3090", Arch: "ampere",
		MemoryGiB: 24, MemoryBandwidthGBps: 936, CCMajor: 8, CCMinor: 6,
		FP32GFLOPS: 35600, TF32GFLOPS: 35600, BF16GFLOPS: 71000, INT8GOPS: 284000,
		TDPWatts:  350,
		NVMLNames: []string{"NVIDIA GeForce RTX 3090"},
	},
	{
		// Ada Lovelace whitepaper: RTX 4090 FP32 82.6 TF, TF32 82.6 TF,
		// BF16 (FP32 accumulate) 165.2 TF, INT8 660.6 TOPS (dense);
		// GDDR6X 1,008 GB/s; 450 W.
		Slug: "rtx4090", Name: "NVIDIA GeForce RTX 4090", Arch: "ada",
		MemoryGiB: 24, MemoryBandwidthGBps: 1008, CCMajor: 8, CCMinor: 9,
		FP32GFLOPS: 82600, TF32GFLOPS: 82600, BF16GFLOPS: 165200, INT8GOPS: 660600,
		TDPWatts:  450,
		NVMLNames: []string{"NVIDIA GeForce RTX 4090"},
	},
	{
		// T4 datasheet: FP32 8.1 TF, INT8 130 TOPS, GDDR6 320 GB/s, 70 W.
		// Turing tensor cores have no TF32 or BF16 mode.
		Slug: "t4", Name: "NVIDIA T4", Arch: "turing",
		MemoryGiB: 16, MemoryBandwidthGBps: 320, CCMajor: 7, CCMinor: 5,
		FP32GFLOPS: 8100, TF32GFLOPS: 0, BF16GFLOPS: 0, INT8GOPS: 130000,
		TDPWatts:  70,
		NVMLNames: []string{"Tesla T4", "NVIDIA T4"},
	},
}

func (p Profile) clone() Profile {
	p.NVMLNames = slices.Clone(p.NVMLNames)
	return p
}

// Profiles returns every known device profile, sorted by slug. The result
// is a copy; callers may modify it.
func Profiles() []Profile {
	out := make([]Profile, len(profiles))
	for i, p := range profiles {
		out[i] = p.clone()
	}
	slices.SortFunc(out, func(a, b Profile) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

// Slugs returns the slugs of every known device profile, sorted.
func Slugs() []string {
	out := make([]string, len(profiles))
	for i, p := range profiles {
		out[i] = p.Slug
	}
	slices.Sort(out)
	return out
}

// Lookup returns the profile with the given slug.
func Lookup(slug string) (Profile, bool) {
	for _, p := range profiles {
		if p.Slug == slug {
			return p.clone(), true
		}
	}
	return Profile{}, false
}

// Known reports whether slug names a profile.
func Known(slug string) bool {
	for _, p := range profiles {
		if p.Slug == slug {
			return true
		}
	}
	return false
}

// TFLOPS is the model's headline throughput in whole TFLOPS: dense BF16
// tensor throughput, or FP32 where the model has no BF16 mode (Turing).
// Offers carry it and the filter key tflops compares it.
func (p Profile) TFLOPS() int {
	if p.BF16GFLOPS > 0 {
		return p.BF16GFLOPS / 1000
	}
	return p.FP32GFLOPS / 1000
}

// TFLOPS is the headline throughput of the model with the given slug (see
// [Profile.TFLOPS]), 0 for an unknown slug.
func TFLOPS(slug string) int {
	p, ok := Lookup(slug)
	if !ok {
		return 0
	}
	return p.TFLOPS()
}

// SlugForNVMLName maps a device name as NVML reports it to a profile slug.
// The match ignores case, leading, trailing and repeated whitespace, and a
// leading "NVIDIA " (so "nvidia  h100 80gb hbm3" and "H100 80GB HBM3" both
// match "NVIDIA H100 80GB HBM3"). A leading "Mock ", which go-nvml's mock
// servers prepend to some names, is ignored as well.
func SlugForNVMLName(name string) (string, bool) {
	want := normalizeNVMLName(name)
	if want == "" {
		return "", false
	}
	for _, p := range profiles {
		for _, n := range p.NVMLNames {
			if normalizeNVMLName(n) == want {
				return p.Slug, true
			}
		}
	}
	return "", false
}

// normalizeNVMLName lower-cases name, collapses whitespace and drops the
// vendor prefixes SlugForNVMLName tolerates.
func normalizeNVMLName(name string) string {
	s := strings.Join(strings.Fields(strings.ToLower(name)), " ")
	s = strings.TrimPrefix(s, "mock ")
	s = strings.TrimPrefix(s, "nvidia ")
	return s
}
