package p2p

import (
	"errors"
	"fmt"
	"slices"
)

// Refusal is a peer's refusal of a stream it was asked to open (a tunnel,
// a shell, a cluster stream), as either side sees it: the protocol that
// refused, a short code from that protocol's list (PROTOCOL.md) and a
// message for people.
type Refusal struct {
	// Protocol names the protocol in the error's text ("tunnel",
	// "shell", "cluster stream"); IsRefusal matches it.
	Protocol string
	Code     string
	Message  string
}

func (r *Refusal) Error() string {
	if r.Message == "" {
		return r.Protocol + " refused: " + r.Code
	}
	return r.Protocol + " refused: " + r.Code + ": " + r.Message
}

// Refuse makes a Refusal of protocol with code and a formatted message.
func Refuse(protocol, code, format string, args ...any) *Refusal {
	return &Refusal{Protocol: protocol, Code: code, Message: fmt.Sprintf(format, args...)}
}

// IsRefusal reports whether err is a refusal of protocol with one of
// codes (any code when none is given).
func IsRefusal(err error, protocol string, codes ...string) bool {
	var r *Refusal
	if !errors.As(err, &r) || r.Protocol != protocol {
		return false
	}
	return len(codes) == 0 || slices.Contains(codes, r.Code)
}
