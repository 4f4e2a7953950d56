package node

import (
	"testing"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
	jobruntime "github.com/gpumesh/gpumesh/node/runtime"
)

// TestMain lets the test binary act as the job sandbox shim: jobs started
// by this package's nodes re-execute it.
func TestMain(m *testing.M) {
	jobruntime.MaybeShim()
	leakcheck.Main(m)
}
