package main

import (
	"os"
	"strings"
	"testing"
)

// TestSummarize reads a recorded `go test -json` of four packages: a
// passing test that logs, a skip, a subtest that skips, a failed test, a
// passing package, one that does not build and one without tests.
func TestSummarize(t *testing.T) {
	f, err := os.Open("testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	s, err := summarize(f, &out)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("output:\n%s", got)
	for _, want := range []string{
		"    a_test.go:11: some context\n    a_test.go:11: got 1, want 2\n--- FAIL: TestFail",
		"FAIL\texample.com/sample/a\t",
		"ok  \texample.com/sample/b\t",
		"c/c_test.go:5:33: undefined: undefined\n",
		"FAIL\texample.com/sample/c [build failed]\n",
		"?   \texample.com/sample/d\t[no test files]\n",
		"\nskipped: 2\n" +
			"  example.com/sample/a TestSkip: a_test.go:6: docker engine not available (capability docker, not in GPUMESH_REQUIRE)\n" +
			"  example.com/sample/a TestSub/two: a_test.go:9: needs python3\n",
		"failed: 1 tests, 2 packages\n  example.com/sample/a TestFail\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, notWant := range []string{"a_test.go:5: fine", "=== RUN   TestPass", "--- PASS", "--- SKIP"} {
		if strings.Contains(got, notWant) {
			t.Errorf("output has %q, from tests that did not fail", notWant)
		}
	}
	if !s.failed() {
		t.Error("summary of a run with a failed test says it did not fail")
	}
}

func TestSummarizeAllPassed(t *testing.T) {
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
go: downloading example.com/x v1.0.0
`
	var out strings.Builder
	s, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "ok  \tp\t0.1s\ngo: downloading example.com/x v1.0.0\n\nskipped: 0\n"; out.String() != want {
		t.Errorf("output = %q, want %q", out.String(), want)
	}
	if s.failed() {
		t.Error("an all-pass run failed")
	}
}

// TestSummarizeTimeout: a package that panics on its timeout shows the
// output of the test that was running, and the panic.
func TestSummarizeTimeout(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestSlow"}
{"Action":"output","Package":"p","Test":"TestSlow","Output":"    slow_test.go:9: waiting for the lease\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 25m0s\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1500.0s\n"}
{"Action":"fail","Package":"p"}
`
	var out strings.Builder
	s, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"waiting for the lease", "panic: test timed out", "FAIL\tp\t1500.0s", "failed: 0 tests, 1 packages"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !s.failed() {
		t.Error("a timed-out package did not fail the run")
	}
}
