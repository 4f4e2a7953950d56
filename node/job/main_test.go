package job

import (
	"os"
	"testing"

	"github.com/gpumesh/gpumesh/node/runtime"
)

// TestMain lets the test binary act as the job sandbox shim: the
// executors of this package's tests start their jobs by re-executing it.
func TestMain(m *testing.M) {
	runtime.MaybeShim()
	os.Exit(m.Run())
}
