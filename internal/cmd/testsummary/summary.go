package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), build events
// included.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// result is one test's name and what it said: a skip's reason or a
// failure's name.
type result struct {
	pkg, test, reason string
}

// summary is what a run of `go test -json` reported.
type summary struct {
	skipped, failedTests []result
	// failedPkgs counts packages that failed, builds included.
	failedPkgs int
}

func (s summary) failed() bool { return s.failedPkgs > 0 || len(s.failedTests) > 0 }

// summarize copies to w, from the events read from r, the output of
// every failed test, build output, and each package's result line (all
// of a failed package's own output), then lists the skipped and failed
// tests. Lines of r that are not JSON are copied as they are.
func summarize(r io.Reader, w io.Writer) (summary, error) {
	var s summary
	tests := map[[2]string][]string{} // output of running tests, by package and name
	pkgs := map[string][]string{}     // output of packages, outside tests
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "output" && e.Test != "":
			tests[key] = append(tests[key], e.Output)
		case e.Action == "output":
			pkgs[e.Package] = append(pkgs[e.Package], e.Output)
		case e.Test != "" && e.Action == "fail":
			fmt.Fprint(w, strings.Join(tests[key], ""))
			s.failedTests = append(s.failedTests, result{pkg: e.Package, test: e.Test})
			delete(tests, key)
		case e.Test != "" && e.Action == "skip":
			s.skipped = append(s.skipped, result{pkg: e.Package, test: e.Test, reason: skipReason(tests[key])})
			delete(tests, key)
		case e.Test != "" && e.Action == "pass":
			delete(tests, key)
		case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
			if out := pkgs[e.Package]; len(out) > 0 {
				fmt.Fprint(w, out[len(out)-1])
			}
			delete(pkgs, e.Package)
		case e.Test == "" && e.Action == "fail":
			// A timeout or a panic: the tests still running said
			// what they were doing.
			for k, out := range tests {
				if k[0] == e.Package {
					fmt.Fprint(w, strings.Join(out, ""))
					delete(tests, k)
				}
			}
			fmt.Fprint(w, strings.Join(pkgs[e.Package], ""))
			delete(pkgs, e.Package)
			s.failedPkgs++
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("read go test -json: %w", err)
	}
	fmt.Fprintf(w, "\nskipped: %d\n", len(s.skipped))
	for _, r := range s.skipped {
		fmt.Fprintf(w, "  %s %s: %s\n", r.pkg, r.test, r.reason)
	}
	if s.failed() {
		fmt.Fprintf(w, "failed: %d tests, %d packages\n", len(s.failedTests), s.failedPkgs)
		for _, r := range s.failedTests {
			fmt.Fprintf(w, "  %s %s\n", r.pkg, r.test)
		}
	}
	return s, nil
}

// skipReason is what a skipped test logged, on one line: its lines but
// the framework's own (=== RUN, --- SKIP...).
func skipReason(output []string) string {
	var said []string
	for _, l := range output {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		said = append(said, l)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " / ")
}
