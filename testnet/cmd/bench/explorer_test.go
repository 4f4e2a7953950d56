package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
)

// A command that lands in a JavaScript context a navigation destroyed is
// sent again; any other error ends the measurement at once.
func TestRetryContext(t *testing.T) {
	stale := &cdproto.Error{Code: -32000, Message: "Cannot find context with specified id"}
	calls := 0
	v, err := retryContext(context.Background(), 5*time.Second, func() (float64, error) {
		if calls++; calls < 3 {
			return 0, stale
		}
		return 42, nil
	})
	if err != nil || v != 42 || calls != 3 {
		t.Fatalf("stale context twice, then 42: got %v, %v after %d calls", v, err, calls)
	}

	other := errors.New("net::ERR_CONNECTION_REFUSED")
	calls = 0
	if _, err := retryContext(context.Background(), 5*time.Second, func() (float64, error) { calls++; return 0, other }); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("another error: got %v after %d calls, want it at once", err, calls)
	}

	calls = 0
	start := time.Now()
	if _, err := retryContext(context.Background(), 200*time.Millisecond, func() (float64, error) { calls++; return 0, stale }); err == nil || calls < 2 {
		t.Fatalf("stale until the limit: got %v after %d calls", err, calls)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the limit of 200ms held it for %s", time.Since(start))
	}
}
