package node

import (
	"flag"
	"strconv"
	"testing"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
	jobruntime "github.com/gpumesh/gpumesh/node/runtime"
)

// parallelNodeTests is how many of this package's parallel tests run at
// once unless -test.parallel says otherwise. They are end-to-end tests of
// real nodes that spend most of their time waiting on jobs, leases and
// windows, not computing, so more of them than the machine has cores can
// share it (the default, GOMAXPROCS, is 2 on the CI's machine). Tests
// that measure time or count a shared limit stay serial.
const parallelNodeTests = 3

// TestMain lets the test binary act as the job sandbox shim: jobs started
// by this package's nodes re-execute it.
func TestMain(m *testing.M) {
	jobruntime.MaybeShim()
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(parallelNodeTests)); err != nil {
			panic(err)
		}
	}
	leakcheck.Main(m)
}
