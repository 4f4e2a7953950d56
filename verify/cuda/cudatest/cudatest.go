// Package cudatest builds the fake CUDA driver of package cuda's tests
// (verify/cuda/testdata/fakecuda, a C test double of libcuda.so.1 that
// runs each kernel's reference on the CPU) for any test that loads a
// driver: package cuda's own and cmd/gpucheck's.
package cudatest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// source is fakecuda.c's path, found from this file's.
func source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "fakecuda", "fakecuda.c")
}

// FakeLib builds the fake driver with the given -D defines (see
// fakecuda.c: FAKE_DEVICES, FAKE_VERSION, FAKE_MEM_LIMIT,
// FAKE_OMIT_LAUNCH, FAKE_CC_MAJOR), once per set of defines in a test
// binary, and returns the .so's path. It skips the test when there is no
// C compiler ($CC, cc or gcc). The libraries stay in a temporary directory
// until Cleanup.
func FakeLib(t testing.TB, defines ...string) string {
	t.Helper()
	key := strings.Join(defines, " ")
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[key]; ok {
		return p
	}
	cc := compiler()
	if cc == "" {
		t.Skip("no C compiler ($CC, cc or gcc) to build the fake CUDA driver")
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "fakecuda-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	out := filepath.Join(dir, fmt.Sprintf("libcuda-fake-%d.so.1", len(built)))
	args := []string{"-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-fvisibility=hidden", "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, source(), "-lpthread")
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("build the fake CUDA driver: %s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	built[key] = out
	return out
}

// compiler returns $CC, else cc, else gcc, whichever is found first.
func compiler() string {
	for _, c := range []string{os.Getenv("CC"), "cc", "gcc"} {
		if c == "" {
			continue
		}
		if _, err := exec.LookPath(c); err == nil {
			return c
		}
	}
	return ""
}

// Cleanup removes the libraries built so far; a TestMain calls it after
// the tests.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		clear(built)
	}
}
