package light

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/p2p"
)

// TestWrongNetwork: a client of testnet-7 given a mainnet bootstrap node
// fails at once with the reason, naming both networks, not after a
// timeout; one of the node's own network joins.
func TestWrongNetwork(t *testing.T) {
	b := bootstrapNode(t) // mainnet
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := New(ctx, WithBootstrap(b), WithNetwork("testnet-7"), WithLogger(quiet()), WithBootstrapTimeout(20*time.Second))
	if !errors.Is(err, p2p.ErrWrongNetwork) {
		t.Fatalf("joining mainnet as testnet-7: %v, want p2p.ErrWrongNetwork", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "network mainnet") || !strings.Contains(msg, "testnet-7") {
		t.Fatalf("error %q does not name both networks", msg)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %s: the reason should come once identify completes, not at the timeout", d)
	}
	if _, err := New(ctx, WithBootstrap(b), WithNetwork("Not Valid"), WithLogger(quiet())); err == nil {
		t.Fatal("an invalid network ID was accepted")
	}
	c, err := New(ctx, WithBootstrap(b), WithNetwork(p2p.DefaultNetwork), WithLogger(quiet()))
	if err != nil {
		t.Fatalf("joining mainnet as mainnet: %v", err)
	}
	c.Close()
}
