package p2p

import (
	"fmt"
	"testing"
)

func TestRefusal(t *testing.T) {
	r := Refuse("tunnel", "busy", "%d tunnels", 64)
	if got, want := r.Error(), "tunnel refused: busy: 64 tunnels"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&Refusal{Protocol: "shell", Code: "tty"}).Error(), "shell refused: tty"; got != want {
		t.Errorf("Error() without a message = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("open: %w", r)
	for _, c := range []struct {
		protocol string
		codes    []string
		want     bool
	}{
		{"tunnel", nil, true},
		{"tunnel", []string{"busy"}, true},
		{"tunnel", []string{"stale", "busy"}, true},
		{"tunnel", []string{"stale"}, false},
		{"shell", nil, false}, // another protocol's refusal is not this one's
		{"shell", []string{"busy"}, false},
	} {
		if got := IsRefusal(wrapped, c.protocol, c.codes...); got != c.want {
			t.Errorf("IsRefusal(%q, %v) = %v, want %v", c.protocol, c.codes, got, c.want)
		}
	}
	if IsRefusal(fmt.Errorf("plain"), "tunnel") {
		t.Error("a plain error is a refusal")
	}
}
