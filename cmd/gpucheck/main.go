// Command gpucheck checks gpumesh's CUDA prover (package verify/cuda) on
// a machine with an NVIDIA GPU: the driver and its devices, a small-size
// self-test of the chain and of the memory fold against the CPU
// reference, a full-size challenge of one GPU (challenge.RealParams of its
// catalog profile) timed by phase and checked by a CPU challenger, with
// the verifier's cost as a fraction of the prover's and the measured
// efficiency η, and a full-size memory proof. Each result is one JSON
// line on stdout; -md writes them as a report (bench/GPU.md). `make
// gpu-check` runs it through scripts/gpu-check.sh.
//
// Exit status: 0 when every check passed, 1 when one failed, 2 for bad
// flags, 3 when there is no NVIDIA GPU or driver.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/cuda"
)

func main() {
	// An interrupt (the script's timeout) cancels the checks; the report
	// of what ran is still written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is gpucheck's flags.
type config struct {
	lib      string
	device   int
	model    string
	smallN   int
	smallT   int
	kernel   cuda.Kernel
	full     bool
	mem      bool
	md       string
	gpusJSON string
	timeout  time.Duration
}

// parseFlags reads args into a config.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var kernel string
	fs := flag.NewFlagSet("gpucheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.lib, "lib", cuda.DefaultLibrary, "the CUDA driver library")
	fs.IntVar(&c.device, "device", 0, "the CUDA device of the full-size challenge and memory proof")
	fs.StringVar(&c.model, "model", "", "the catalog model of that device (default: from its name)")
	fs.IntVar(&c.smallN, "small-n", 256, "matrix size of the self-test")
	fs.IntVar(&c.smallT, "small-t", 4, "chain length of the self-test")
	fs.StringVar(&kernel, "kernel", "auto", "chain kernel: auto, simple, mma or tiled")
	fs.BoolVar(&c.full, "full", true, "run the full-size challenge")
	fs.BoolVar(&c.mem, "mem", true, "run the full-size memory proof")
	fs.StringVar(&c.md, "md", "", "write the results as a Markdown report to this file")
	fs.StringVar(&c.gpusJSON, "gpus-json", "", "the output of `gpumesh gpus --json`, for the report")
	fs.DurationVar(&c.timeout, "timeout", 6*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	k, err := cuda.ParseKernel(kernel)
	if err != nil {
		return c, err
	}
	c.kernel = k
	if c.smallN < challenge.MinN || c.smallN%8 != 0 || c.smallT < 1 {
		return c, fmt.Errorf("-small-n %d -small-t %d: want n a multiple of 8, at least %d, and t ≥ 1", c.smallN, c.smallT, challenge.MinN)
	}
	return c, nil
}

// report gathers the results, in order, for the JSON lines and the
// Markdown report.
type report struct {
	out     io.Writer
	results []any
	failed  bool
}

func (r *report) add(v any, ok bool) {
	r.results = append(r.results, v)
	if !ok {
		r.failed = true
	}
	b, _ := json.Marshal(v)
	fmt.Fprintln(r.out, string(b))
}

// errorResult is a check that could not run.
type errorResult struct {
	Check string `json:"check"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// driverResult describes the driver and its devices.
type driverResult struct {
	Check   string            `json:"check"` // "driver"
	OK      bool              `json:"ok"`
	Library string            `json:"library"`
	Version string            `json:"version"`
	Devices []cuda.DeviceInfo `json:"devices"`
	Models  []string          `json:"models"` // catalog slug per device, "" when unknown
	// TensorErrors is, per device, why the tensor-core kernels did not
	// load ("" when they did or the device has none).
	TensorErrors []string `json:"tensor_errors,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "gpucheck:", err)
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	rep := &report{out: stdout}
	code := check(ctx, cfg, rep, stderr)
	if cfg.md != "" && len(rep.results) > 0 {
		var gpus json.RawMessage
		if cfg.gpusJSON != "" {
			if b, err := os.ReadFile(cfg.gpusJSON); err == nil && json.Valid(b) {
				gpus = b
			}
		}
		if err := os.WriteFile(cfg.md, []byte(markdown(time.Now().UTC(), rep.results, gpus)), 0o644); err != nil {
			fmt.Fprintln(stderr, "gpucheck: write report:", err)
			return 1
		}
	}
	return code
}

// check runs the checks in order and returns the exit status.
func check(ctx context.Context, cfg config, rep *report, stderr io.Writer) int {
	drv, err := cuda.Open(cuda.Options{Library: cfg.lib})
	if err != nil {
		rep.add(errorResult{Check: "driver", Error: err.Error()}, false)
		if errors.Is(err, cuda.ErrNoCUDA) || errors.Is(err, cuda.ErrNoDevice) {
			fmt.Fprintf(stderr, "gpucheck: no NVIDIA GPU/driver: %v\n", err)
			return 3
		}
		fmt.Fprintln(stderr, "gpucheck:", err)
		return 1
	}
	defer drv.Close()
	dr := driverResult{Check: "driver", OK: true, Library: drv.Library(), Version: drv.VersionString()}
	var tensorErrs []string
	for _, d := range drv.Devices() {
		dr.Devices = append(dr.Devices, d.Info)
		slug, _ := catalog.SlugForNVMLName(d.Info.Name)
		dr.Models = append(dr.Models, slug)
		msg := ""
		if d.TensorErr != nil {
			msg = d.TensorErr.Error()
			dr.OK = false
		}
		tensorErrs = append(tensorErrs, msg)
	}
	if !dr.OK {
		dr.TensorErrors = tensorErrs
	}
	// A tensor-core module the JIT refused fails the check, and the rest
	// still runs (on the simple kernel).
	rep.add(dr, dr.OK)

	small := challenge.Params{N: cfg.smallN, T: cfg.smallT, K: min(cfg.smallN, challenge.RealK)}
	kernels := []cuda.Kernel{cfg.kernel}
	if cfg.kernel == cuda.KernelAuto {
		// Every kernel this device can run, the one auto picks last.
		kernels = []cuda.Kernel{cuda.KernelSimple, cuda.KernelMMA, cuda.KernelAuto}
		if small.N%128 != 0 || !tensorCores(drv) {
			kernels = []cuda.Kernel{cuda.KernelSimple}
		}
	}
	for _, k := range kernels {
		st, err := cuda.SelfTest(ctx, drv, small, k)
		if err != nil {
			rep.add(errorResult{Check: "selftest", Error: err.Error()}, false)
			continue
		}
		rep.add(st, st.Match)
	}
	for _, d := range drv.Devices() {
		ft, err := cuda.FoldSelfTest(ctx, d, challenge.MemParams{Buffers: 8, BufferBytes: 4 << 20, WindowBytes: 1 << 20, Rounds: 4, Checks: 4})
		if err != nil {
			rep.add(errorResult{Check: "foldtest", Error: err.Error()}, false)
			continue
		}
		rep.add(ft, ft.Match)
	}
	if !cfg.full && !cfg.mem {
		return exitCode(rep)
	}
	for _, r := range rep.results {
		if st, ok := r.(cuda.SelfTestResult); ok && !st.Match {
			// A prover that disagrees with the reference is not worth timing.
			return exitCode(rep)
		}
	}

	if cfg.device < 0 || cfg.device >= len(drv.Devices()) {
		rep.add(errorResult{Check: "challenge", Error: fmt.Sprintf("device %d of %d", cfg.device, len(drv.Devices()))}, false)
		return exitCode(rep)
	}
	dev := drv.Devices()[cfg.device]
	slug := cfg.model
	if slug == "" {
		slug = dr.Models[cfg.device]
	}
	profile, ok := catalog.Lookup(slug)
	if !ok {
		rep.add(errorResult{Check: "challenge", Error: fmt.Sprintf("device %q has no catalog model (pass -model)", dev.Info.Name)}, false)
		return exitCode(rep)
	}
	if dev.Info.TensorCoreInt8() && dev.TensorErr == nil {
		pk, err := cuda.MMAPeak(ctx, dev, profile)
		if err != nil {
			rep.add(errorResult{Check: "mma_peak", Error: err.Error()}, false)
		} else {
			rep.add(pk, pk.Match)
		}
	}
	if cfg.full {
		// A probe of one step (all K rows) sizes the full run: a slow
		// kernel or a slow CPU verifier gets a shorter chain (marked
		// real_t in the result) rather than overrunning the check's time.
		real := challenge.RealParams(profile)
		probe, err := cuda.RunChallenge(ctx, dev, profile, challenge.Params{N: real.N, T: 1, K: real.K}, cfg.kernel)
		if err != nil {
			rep.add(errorResult{Check: "challenge", Error: "probe: " + err.Error()}, false)
			return exitCode(rep)
		}
		probe.Check = "challenge-probe"
		rep.add(probe, probe.Verified)
		p := real
		if deadline, ok := ctx.Deadline(); ok {
			budget := time.Until(deadline) - memReserve(cfg)
			p.T = cuda.PlanT(probe, real.T, budget)
		}
		cr, err := cuda.RunChallenge(ctx, dev, profile, p, cfg.kernel)
		if err != nil {
			rep.add(errorResult{Check: "challenge", Error: err.Error()}, false)
		} else {
			rep.add(cr, cr.Verified && cr.Pass)
		}
	}
	if cfg.mem {
		mr, err := cuda.RunMemProof(ctx, dev, profile, challenge.RealMemParams(profile))
		if err != nil {
			rep.add(errorResult{Check: "memory", Error: err.Error()}, false)
		} else {
			rep.add(mr, mr.Verified && mr.Pass)
		}
	}
	return exitCode(rep)
}

// tensorCores reports whether every device runs the tensor-core kernels.
func tensorCores(drv *cuda.Driver) bool {
	for _, d := range drv.Devices() {
		if !d.Info.TensorCoreInt8() || d.TensorErr != nil {
			return false
		}
	}
	return true
}

// memReserve is the time kept for the memory proof after the challenge:
// filling up to 0.9 of the device's memory on the host and copying it.
func memReserve(cfg config) time.Duration {
	if !cfg.mem {
		return 10 * time.Second
	}
	return 90 * time.Second
}

func exitCode(rep *report) int {
	if rep.failed {
		return 1
	}
	return 0
}
