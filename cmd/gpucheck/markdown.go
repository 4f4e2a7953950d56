package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/verify/cuda"
)

// markdown renders the results as bench/GPU.md: a table per kind of
// check, then every JSON line as printed.
func markdown(now time.Time, results []any, gpus json.RawMessage) string {
	var b strings.Builder
	b.WriteString("# GPU check\n\n")
	fmt.Fprintf(&b, "Written by `make gpu-check` (cmd/gpucheck) on %s. Every figure below was measured by that run.\n\n", now.Format("2006-01-02 15:04 MST"))
	var ceiling float64 // mma.sync's TOPS, when measured
	for _, r := range results {
		if v, ok := r.(cuda.PeakResult); ok && v.Match {
			ceiling = v.TOPS
		}
	}
	for _, r := range results {
		switch v := r.(type) {
		case cuda.PeakResult:
			fmt.Fprintf(&b, "## mma.sync ceiling (%s, device %d)\n\n%.0f TOPS, %.3f of the %.0f TOPS datasheet peak (registers only, best of %d runs)%s.\n\n",
				v.Model, v.Device, v.TOPS, v.Fraction, v.PeakTOPS, v.Runs, verdict(v.Match, "", "; its sums are WRONG"))
		case driverResult:
			fmt.Fprintf(&b, "## Driver\n\n`%s`, CUDA %s, %d device(s).\n\n", v.Library, v.Version, len(v.Devices))
			b.WriteString("| # | Name | Model | CC | SMs | Clock (MHz) | Memory (GiB) |\n| --- | --- | --- | --- | --- | --- | --- |\n")
			for i, d := range v.Devices {
				fmt.Fprintf(&b, "| %d | %s | %s | %d.%d | %d | %d | %.1f |\n", d.Ordinal, d.Name, orDash(v.Models[i]), d.Major, d.Minor, d.SMs, d.ClockKHz/1000, float64(d.MemoryBytes)/(1<<30))
			}
			b.WriteString("\n")
			for i, e := range v.TensorErrors {
				if e != "" {
					fmt.Fprintf(&b, "**Device %d: the tensor-core kernels did not load**: %s\n\n", i, e)
				}
			}
		case cuda.SelfTestResult:
			fmt.Fprintf(&b, "## Self-test (N = %d, T = %d, %d GPU(s), kernel %s → %s)\n\n%s in %.2f s.%s\n\n",
				v.N, v.T, v.GPUs, v.Kernel, v.Used, verdict(v.Match, "byte-identical to the CPU prover", "DIFFERS from the CPU prover"), v.Seconds, detail(v.Detail))
		case cuda.FoldTestResult:
			fmt.Fprintf(&b, "## Fold self-test (device %d, %d buffers, %d-byte windows, %d rounds)\n\n%s in %.2f s.%s\n\n",
				v.Device, v.Buffers, v.WindowBytes, v.Rounds, verdict(v.Match, "identical to the CPU memory prover", "DIFFERS from the CPU memory prover"), v.Seconds, detail(v.Detail))
		case cuda.ChallengeResult:
			title := "Full-size challenge"
			switch {
			case v.Check == "challenge-probe":
				title = "Probe (one step, one row)"
			case v.RealT != 0:
				title = fmt.Sprintf("Challenge, chain shortened to fit the check (real T = %d)", v.RealT)
			}
			fmt.Fprintf(&b, "## %s (%s, device %d: N = %d, T = %d, K = %d, kernel %s)\n\n", title, v.Model, v.Device, v.N, v.T, v.K, v.Kernel)
			b.WriteString("| Phase | Seconds |\n| --- | --- |\n")
			for _, p := range []struct {
				name string
				s    float64
			}{{"derive A, B (host)", v.DeriveS}, {"upload", v.UploadS}, {"chain (device)", v.ChainS}, {"download X_T", v.DownloadS}, {"Merkle tree (host)", v.TreeS}, {"**commit (timed window)**", v.CommitS}, {"sweep", v.SweepS}, {"open", v.OpenS}, {"verifier (CPU challenger)", v.VerifyS}} {
				fmt.Fprintf(&b, "| %s | %.3f |\n", p.name, p.s)
			}
			if ceiling > 0 && v.TOPS > 0 {
				fmt.Fprintf(&b, "\nThe chain kernel runs at %.2f of the mma.sync ceiling.\n", v.TOPS/ceiling)
			}
			fmt.Fprintf(&b, "\nChain: %.0f TOPS of %.0f peak, **η = %.3f** (commit as a whole: %.3f). Verifier's cost: %.4f of the prover's time (%.4f in operations). Time bound [%.2f s, %.2f s]: %s. Openings %s.\n\n",
				v.TOPS, v.PeakTOPS, v.Eta, v.CommitEta, v.VerifierFraction, v.CostRatio, v.BoundMinS, v.BoundMaxS, v.Verdict, verdict(v.Verified, "verified", "REJECTED"))
		case cuda.MemResult:
			fmt.Fprintf(&b, "## Memory proof (%s, device %d: %d × %d MiB, %d KiB windows, %d rounds)\n\n", v.Model, v.Device, v.Buffers, v.BufferBytes>>20, v.WindowBytes>>10, v.Rounds)
			fmt.Fprintf(&b, "Fill %.1f s (untimed). Rounds %.4f s: %.0f GB/s of %.0f, η = %.3f. Deadline %.4f s, margin %.2f×: %s. Digests %s.\n\n",
				v.FillS, v.RespondS, v.GBps, v.DatasheetGBs, v.Eta, v.DeadlineS, v.Margin, v.Verdict, verdict(v.Verified, "verified", "REJECTED"))
		case errorResult:
			fmt.Fprintf(&b, "## %s: failed\n\n%s\n\n", v.Check, v.Error)
		}
	}
	if len(gpus) > 0 {
		b.WriteString("## `gpumesh gpus --json` (NVML)\n\n```json\n")
		b.Write(gpus)
		b.WriteString("\n```\n\n")
	}
	b.WriteString("## Raw results\n\n```\n")
	for _, r := range results {
		line, _ := json.Marshal(r)
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("```\n")
	return b.String()
}

func verdict(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return " " + s + "."
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
