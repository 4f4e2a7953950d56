package market

import (
	"time"

	"github.com/gpumesh/gpumesh/money"
)

// Offer is one supplier's GPUs of one model, as search shows it.
// The JSON names are a public contract.
type Offer struct {
	PeerID            string   `json:"peer_id"`
	Addrs             []string `json:"addrs"`
	Model             string   `json:"model"`              // canonical slug
	Name              string   `json:"name"`               // device name
	Count             int      `json:"count"`              // GPUs of this model at this supplier
	Free              int      `json:"free"`               // of which free, if known (else == Count)
	VRAMGiB           int      `json:"vram_gib"`           // memory per GPU
	ComputeCapability string   `json:"compute_capability"` // "major.minor", e.g. "9.0"
	// TFLOPS is dense BF16 TFLOPS from the device profile, rounded down.
	TFLOPS    int    `json:"tflops"`
	Region    string `json:"region"`
	Simulated bool   `json:"simulated"`
	Verified  bool   `json:"verified"`
	// PriceMicros is the price per GPU-hour; 0 = not advertised. In JSON
	// it is a plain integer of micro-units.
	PriceMicros money.Micros `json:"price_micros,omitempty"`
	// Reputation is 0..1; nil = unknown.
	Reputation *float64 `json:"reputation,omitempty"`
	// UptimePct is 0..100; nil = unknown.
	UptimePct *float64  `json:"uptime_pct,omitempty"`
	Version   string    `json:"version"`
	SeenAt    time.Time `json:"seen_at"`
	// JobLimits are the per-job limits from the supplier's profile; nil
	// when it states none (older suppliers).
	JobLimits *JobLimits `json:"job_limits,omitempty"`
}

// JobLimits are a supplier's per-job limits: what a job gets for a limit
// its spec leaves at 0, and the most a spec may ask.
type JobLimits struct {
	Default JobLimitSet `json:"default"`
	Max     JobLimitSet `json:"max"`
}

// JobLimitSet is one set of per-job limits; 0 means not set.
type JobLimitSet struct {
	MemoryBytes uint64 `json:"memory_bytes"`
	Procs       uint64 `json:"procs"`
	DiskBytes   uint64 `json:"disk_bytes"`
	OpenFiles   uint64 `json:"open_files"`
}
