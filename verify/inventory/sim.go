package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	"github.com/gpumesh/gpumesh/catalog"
)

// SimSpec asks for Count simulated GPUs of one model (a verify profile
// slug).
type SimSpec struct {
	Model string
	Count int
}

// simDetector presents GPUs built from the verify profile table.
type simDetector struct {
	specs []SimSpec
	seed  string
}

// NewSimulated returns a Detector that presents the GPUs specs ask for,
// indexed in order. Their fields come from the verify profile table and
// their UUIDs from seed (the node identity), model and index, so a node
// shows the same simulated GPUs on every start and two nodes never share
// one. Detect fails for a model with no profile; specs from ParseSpec
// never have one.
func NewSimulated(specs []SimSpec, seed string) Detector {
	return &simDetector{specs: slices.Clone(specs), seed: seed}
}

// Detect implements Detector.
func (s *simDetector) Detect(ctx context.Context) ([]GPU, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var gpus []GPU
	for _, spec := range s.specs {
		p, ok := catalog.Lookup(spec.Model)
		if !ok {
			return nil, fmt.Errorf("inventory: simulated gpus: unknown model %q", spec.Model)
		}
		for range spec.Count {
			i := len(gpus)
			mem := uint64(p.MemoryGiB) << 30
			gpus = append(gpus, GPU{
				Index:             i,
				UUID:              simUUID(s.seed, p.Slug, i),
				Name:              p.Name + " (simulated)",
				Model:             p.Slug,
				MemoryBytes:       mem,
				VRAMGiB:           roundGiB(mem),
				ComputeCapability: strconv.Itoa(p.CCMajor) + "." + strconv.Itoa(p.CCMinor),
				PowerLimitWatts:   p.TDPWatts,
				DeviceMinor:       -1,
				Simulated:         true,
			})
		}
	}
	return gpus, nil
}

// simUUID is "GPU-sim-" and the first 16 hex digits of
// sha256(seed|model|index). node/runtime knows simulated GPUs by that
// prefix, and gives their containers no device.
func simUUID(seed, model string, index int) string {
	sum := sha256.Sum256([]byte(seed + "|" + model + "|" + strconv.Itoa(index)))
	return "GPU-sim-" + hex.EncodeToString(sum[:8])
}
