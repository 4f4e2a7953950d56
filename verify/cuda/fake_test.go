//go:build linux && cgo

package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeDir holds the fake drivers built for this test binary.
var fakeDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakecuda-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	fakeMu    sync.Mutex
	fakeBuilt = map[string]string{}
)

// fakeLib builds testdata/fakecuda with the given -D flags (once per set
// of flags) and returns the .so's path. It skips the test when there is
// no C compiler.
func fakeLib(t testing.TB, defines ...string) string {
	t.Helper()
	key := strings.Join(defines, " ")
	fakeMu.Lock()
	defer fakeMu.Unlock()
	if p, ok := fakeBuilt[key]; ok {
		return p
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake CUDA driver: %v", cc, err)
	}
	out := filepath.Join(fakeDir, fmt.Sprintf("libcuda-fake-%d.so.1", len(fakeBuilt)))
	args := []string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-fvisibility=hidden", "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, filepath.Join("testdata", "fakecuda", "fakecuda.c"), "-lpthread")
	cmd := exec.Command(cc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the fake CUDA driver: %s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	fakeBuilt[key] = out
	return out
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
