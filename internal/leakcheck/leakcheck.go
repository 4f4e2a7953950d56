// Package leakcheck is the goroutine-leak check every package's TestMain
// runs: goleak over the whole test binary, ignoring only the background
// goroutines of libraries that are not ours and that outlive a closed
// host or store by design (each listed with why).
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Ignored are the goroutines that are not ours and not leaks of ours.
var ignored = []goleak.Option{}

// Main runs the tests and fails the binary if goroutines are left when
// they end, beyond those in ignored and extra.
func Main(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option{}, ignored...), extra...)...)
}
