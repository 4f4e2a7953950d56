package sim

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
)

// TestMain checks for leaks with more patience than the default: the
// mocknet streams of a hundred closed hosts take a while to wind down on
// a loaded machine.
//
// It ignores goroutines blocked on a mocknet stream, and only those:
// go-libp2p's mocknet (v0.52) lets conn.NewStream open a stream on a
// connection that its Close is tearing down, after teardown reset the
// streams it had, and nothing resets the new one. A host that opens a
// stream to a node that is leaving at that moment (GossipSub greeting a
// new peer, in handleNewPeer) then keeps its writer, its reader and the
// stream's pipe goroutine forever. Real hosts, which every other
// package's tests use, have no such race, and their checks ignore nothing.
func TestMain(m *testing.M) {
	leakcheck.MainWithin(m, 30*time.Second,
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/mock.(*stream).transport"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/mock.(*stream).Write"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/net/mock.(*stream).Read"),
	)
}
