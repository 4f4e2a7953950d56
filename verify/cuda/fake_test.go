//go:build linux && cgo

package cuda

import (
	"os"
	"testing"

	"github.com/gpumesh/gpumesh/verify/cuda/cudatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	cudatest.Cleanup()
	os.Exit(code)
}

// fakeLib builds the fake driver with the given -D defines
// (cudatest.FakeLib).
func fakeLib(t testing.TB, defines ...string) string {
	t.Helper()
	return cudatest.FakeLib(t, defines...)
}

// openFake opens a Driver on a fake built with defines and closes it at
// the test's end.
func openFake(t testing.TB, opts Options, defines ...string) *Driver {
	t.Helper()
	opts.Library = fakeLib(t, defines...)
	d, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", opts.Library, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// checkNoLeak fails when a device of d holds memory.
func checkNoLeak(t testing.TB, d *Driver) {
	t.Helper()
	for _, dev := range d.Devices() {
		free, total, err := dev.MemInfo()
		if err != nil {
			t.Fatalf("device %d: MemInfo: %v", dev.Info.Ordinal, err)
		}
		if free != total {
			t.Errorf("device %d: %d of %d bytes still allocated", dev.Info.Ordinal, total-free, total)
		}
	}
}
