package inventory

import (
	"context"
	"errors"
	"reflect"
	"regexp"
	"testing"

	"github.com/gpumesh/gpumesh/catalog"
)

var simUUIDRE = regexp.MustCompile(`^GPU-sim-[0-9a-f]{16}$`)

func TestSimulated(t *testing.T) {
	specs := []SimSpec{{"h100-sxm", 8}, {"a100-80gb", 2}, {"t4", 1}}
	got, err := NewSimulated(specs, "peer-A").Detect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 11 {
		t.Fatalf("got %d GPUs, want 11", len(got))
	}
	uuids := map[string]bool{}
	for i, g := range got {
		wantModel := "h100-sxm"
		switch {
		case i >= 10:
			wantModel = "t4"
		case i >= 8:
			wantModel = "a100-80gb"
		}
		p, _ := catalog.Lookup(wantModel)
		want := GPU{
			Index:             i,
			UUID:              g.UUID,
			Name:              p.Name + " (simulated)",
			Model:             wantModel,
			MemoryBytes:       uint64(p.MemoryGiB) << 30,
			VRAMGiB:           p.MemoryGiB,
			ComputeCapability: map[string]string{"h100-sxm": "9.0", "a100-80gb": "8.0", "t4": "7.5"}[wantModel],
			PowerLimitWatts:   p.TDPWatts,
			DeviceMinor:       -1,
			Simulated:         true,
		}
		if g != want {
			t.Errorf("gpu %d = %+v, want %+v", i, g, want)
		}
		if !simUUIDRE.MatchString(g.UUID) || uuids[g.UUID] {
			t.Errorf("gpu %d: UUID %q malformed or repeated", i, g.UUID)
		}
		uuids[g.UUID] = true
	}
}

func TestSimulatedDeterministic(t *testing.T) {
	specs := []SimSpec{{"h100-sxm", 4}, {"rtx4090", 2}}
	detect := func(seed string) []GPU {
		t.Helper()
		got, err := NewSimulated(specs, seed).Detect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a1, a2, b := detect("peer-A"), detect("peer-A"), detect("peer-B")
	if !reflect.DeepEqual(a1, a2) {
		t.Errorf("same seed, different GPUs:\n%+v\n%+v", a1, a2)
	}
	for i := range a1 {
		if a1[i].UUID == b[i].UUID {
			t.Errorf("gpu %d: seeds peer-A and peer-B share UUID %q", i, a1[i].UUID)
		}
	}
	// Pinned so a change to the derivation (which would change every
	// testnet node's GPUs) is noticed: sha256("peer-A|h100-sxm|0").
	if want := "GPU-sim-b73dc6f0d978938a"; a1[0].UUID != want {
		t.Errorf("UUID = %q, want %q", a1[0].UUID, want)
	}
}

func TestSimulatedSpecsCopied(t *testing.T) {
	specs := []SimSpec{{"t4", 1}}
	d := NewSimulated(specs, "s")
	specs[0] = SimSpec{"h100-sxm", 3}
	got, err := d.Detect(t.Context())
	if err != nil || len(got) != 1 || got[0].Model != "t4" {
		t.Errorf("Detect after caller changed specs = %+v, %v; want one t4", got, err)
	}
}

func TestSimulatedErrors(t *testing.T) {
	if _, err := NewSimulated([]SimSpec{{"h100", 1}}, "s").Detect(t.Context()); err == nil {
		t.Error("unknown model: no error")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := NewSimulated([]SimSpec{{"t4", 1}}, "s").Detect(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: err = %v, want context.Canceled", err)
	}
	if got, err := NewSimulated(nil, "s").Detect(t.Context()); len(got) != 0 || err != nil {
		t.Errorf("no specs: Detect = %v, %v; want none", got, err)
	}
}
