// Package leakcheck is the goroutine-leak check every package's TestMain
// runs: goleak over the whole test binary, once its tests are done.
//
// Nothing is ignored by default. libp2p, go-libp2p-pubsub, the DHT and
// Badger stop their background goroutines when their host, context or
// database is closed (goleak retries for a while, so ones still on their
// way out are not reported); a library goroutine left running means a
// test or a part of ours did not close what it started, e.g. a gossipsub
// created on context.Background(). Pass goleak options for a package
// whose own tests start something that cannot be stopped, and say why.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Main runs the tests and fails the binary if goroutines are left when
// they end, beyond those opts ignore (goleak.Cleanup runs after).
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, opts...)
}

// MainWithin is Main for a package whose tests close many hosts at once
// (a simulated network of a hundred): it waits up to grace, not goleak's
// second or so, for their goroutines to wind down before reporting.
func MainWithin(m *testing.M, grace time.Duration, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(grace)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: goroutines left %s after the tests ended: %v\n", grace, err)
				code = 1
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	os.Exit(code)
}
