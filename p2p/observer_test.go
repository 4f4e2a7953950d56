package p2p

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// countingObserver records what a topic tells its Observer.
type countingObserver struct {
	mu        sync.Mutex
	validated []error
	published int
}

func (o *countingObserver) Validated(_ string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.validated = append(o.validated, err)
}

func (o *countingObserver) Published(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.published++
}

func (o *countingObserver) snapshot() ([]error, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.validated...), o.published
}

// TestTopicObserver: a topic's Observer is told the verdict on each
// record another peer delivered (nil when accepted, else the validator's
// error) and of each record the node published itself; the node's own
// records, which pubsub validates too, are not counted as received.
func TestTopicObserver(t *testing.T) {
	const name = "/gpumesh/test-observed/1.0.0"
	strict := func(_ peer.ID, data []byte) (string, error) {
		if string(data) == "bad" {
			return "", Errf(ErrMalformed, "bad")
		}
		return string(data), nil
	}
	lax := func(_ peer.ID, data []byte) (string, error) { return string(data), nil }
	join := func(n *Network, check CheckFunc[string], o Observer) *Topic[string] {
		tp, err := JoinTopic(n.PubSub, n.Host.ID(), name, check, quietLogger(), WithObserver(o))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tp.Close() })
		return tp
	}
	b := startNetwork(t, ModeServer, true, nil)
	a := startNetwork(t, ModeServer, true, []peer.AddrInfo{addrInfo(b)})
	var ao, bo countingObserver
	at, bt := join(a, lax, &ao), join(b, strict, &bo) // a publishes what b refuses
	waitFor(t, 10*time.Second, "a and b in the topic", func() bool { return len(at.Peers()) > 0 && len(bt.Peers()) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, msg := range []string{"bad", "good"} {
		if err := at.Publish(ctx, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := bt.Next(ctx); err != nil || m.Value != "good" {
		t.Fatalf("b read %v, %v; want good", m.Value, err)
	}
	waitFor(t, 5*time.Second, "b to check both records", func() bool {
		got, _ := bo.snapshot()
		return len(got) == 2
	})
	got, published := bo.snapshot()
	accepted, malformed := 0, 0
	for _, err := range got {
		switch {
		case err == nil:
			accepted++
		case errors.Is(err, ErrMalformed):
			malformed++
		}
	}
	if accepted != 1 || malformed != 1 || published != 0 {
		t.Fatalf("b's observer saw %v and %d published; want one accepted, one malformed, none published", got, published)
	}
	got, published = ao.snapshot()
	if len(got) != 0 || published != 2 {
		t.Fatalf("a's observer saw %v and %d published; want nothing received, 2 published", got, published)
	}
}
