package inventory

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/catalog"
)

// Modes of a Spec.
const (
	ModeAuto = "auto" // detect GPUs through NVML
	ModeNone = "none" // no GPUs
	ModeSim  = "sim"  // simulated GPUs
)

// Limits on simulated GPUs.
const (
	MaxSimCount = 64  // per model
	MaxSimTotal = 256 // over all models
)

// ErrInvalidSpec is wrapped by every error ParseSpec returns.
var ErrInvalidSpec = errors.New("invalid gpu spec")

// specSyntax is shown in errors so users know what to type instead.
const specSyntax = "want auto, none or sim:MODEL:COUNT[,MODEL:COUNT...]"

// Spec is a parsed --gpus value.
type Spec struct {
	Mode string    // ModeAuto, ModeNone or ModeSim
	Sim  []SimSpec // for ModeSim: one entry per model, in the order given
}

// ParseSpec parses a --gpus value:
//
//	auto                              detect with NVML
//	none                              no GPUs
//	sim:MODEL:COUNT[,MODEL:COUNT...]  simulated GPUs, e.g. sim:h100-sxm:8,a100-80gb:2
//
// MODEL is a verify profile slug, COUNT is 1..64 and the total is at most
// 256; each model may appear once. Space around the whole value and around
// entries is ignored. Errors wrap ErrInvalidSpec and name the bad part.
func ParseSpec(spec string) (Spec, error) {
	s := strings.TrimSpace(spec)
	switch {
	case s == ModeAuto:
		return Spec{Mode: ModeAuto}, nil
	case s == ModeNone:
		return Spec{Mode: ModeNone}, nil
	case s == "":
		return Spec{}, fmt.Errorf("%w: empty; %s", ErrInvalidSpec, specSyntax)
	case s == ModeSim:
		return Spec{}, fmt.Errorf("%w %q: no simulated gpus listed; %s", ErrInvalidSpec, spec, specSyntax)
	}
	rest, ok := strings.CutPrefix(s, ModeSim+":")
	if !ok {
		mode, _, _ := strings.Cut(s, ":")
		return Spec{}, fmt.Errorf("%w %q: unknown mode %q; %s", ErrInvalidSpec, spec, mode, specSyntax)
	}

	out := Spec{Mode: ModeSim}
	total := 0
	for entry := range strings.SplitSeq(rest, ",") {
		sim, err := parseSimEntry(strings.TrimSpace(entry))
		if err != nil {
			return Spec{}, fmt.Errorf("%w %q: %w", ErrInvalidSpec, spec, err)
		}
		for _, prev := range out.Sim {
			if prev.Model == sim.Model {
				return Spec{}, fmt.Errorf("%w %q: model %q listed twice; give one MODEL:COUNT per model", ErrInvalidSpec, spec, sim.Model)
			}
		}
		total += sim.Count
		if total > MaxSimTotal {
			return Spec{}, fmt.Errorf("%w %q: more than %d simulated gpus in total", ErrInvalidSpec, spec, MaxSimTotal)
		}
		out.Sim = append(out.Sim, sim)
	}
	return out, nil
}

// parseSimEntry parses one MODEL:COUNT.
func parseSimEntry(entry string) (SimSpec, error) {
	if entry == "" {
		return SimSpec{}, errors.New("empty entry; want MODEL:COUNT")
	}
	model, count, ok := strings.Cut(entry, ":")
	if !ok {
		return SimSpec{}, fmt.Errorf("entry %q: want MODEL:COUNT", entry)
	}
	if !catalog.Known(model) {
		return SimSpec{}, fmt.Errorf("entry %q: unknown model %q; known models: %s", entry, model, strings.Join(catalog.Slugs(), ", "))
	}
	n, err := parseCount(count)
	if err != nil {
		return SimSpec{}, fmt.Errorf("entry %q: count %q: %w", entry, count, err)
	}
	return SimSpec{Model: model, Count: n}, nil
}

// parseCount parses a decimal count in 1..MaxSimCount. Only ASCII digits
// are accepted (no sign, no space).
func parseCount(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("want a whole number 1..%d", MaxSimCount)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxSimCount {
		return 0, fmt.Errorf("want a whole number 1..%d", MaxSimCount)
	}
	return n, nil
}

// String formats s in the syntax ParseSpec reads; ParseSpec(s.String())
// gives s back for any Spec ParseSpec returned.
func (s Spec) String() string {
	if s.Mode != ModeSim {
		return s.Mode
	}
	var b strings.Builder
	b.WriteString(ModeSim)
	for i, sim := range s.Sim {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(sim.Model)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(sim.Count))
	}
	return b.String()
}
