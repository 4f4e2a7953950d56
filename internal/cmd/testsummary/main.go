// Command testsummary reads `go test -json` on stdin and writes what a
// plain `go test` would show of it (the output of every failed test,
// build errors, a line per package), then a summary: every skipped
// test with its reason, and every failed test. It exits 1 when any test,
// package or build failed, so that `make test` (with pipefail) fails too.
//
//	go test -json ./... | go run ./internal/cmd/testsummary
package main

import (
	"fmt"
	"os"
)

func main() {
	s, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if s.failed() {
		os.Exit(1)
	}
}
