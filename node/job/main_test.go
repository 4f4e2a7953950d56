package job

import (
	"testing"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
	"github.com/gpumesh/gpumesh/node/runtime"
)

// TestMain lets the test binary act as the job sandbox shim (the
// executors of this package's tests start their jobs by re-executing it)
// and checks for leaked goroutines.
func TestMain(m *testing.M) {
	runtime.MaybeShim()
	leakcheck.Main(m)
}
