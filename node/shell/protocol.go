package shell

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/p2p"
)

// The shell protocol and its limits (docs/PROTOCOL.md §40).
const (
	// Protocol carries one shell: a job's standard streams.
	Protocol protocol.ID = "/gpumesh/shell/1.0.0"
	// Version is Open.Version.
	Version = 1
	// OpenTimeout bounds the read of the Open (supplier) and of the
	// Reply (renter).
	OpenTimeout = 10 * time.Second
	// MaxPending bounds the output a Stdio holds before a shell attaches:
	// beyond it the job's writes wait.
	MaxPending = 256 << 10
	// AttachTimeout is how long an attempt with a standard input waits
	// for its shell stream: with none by then it is stopped.
	AttachTimeout = time.Minute
)

// Refusal codes (a Reply's code).
const (
	// RefusedMalformed: the Open did not decode or a field is out of range.
	RefusedMalformed = "malformed"
	// RefusedVersion: an Open version this supplier does not speak.
	RefusedVersion = "version"
	// RefusedNoAttempt: no attempt of this peer's with a standard input
	// runs here on that lease. The same whether the lease is unknown,
	// another renter's or runs another attempt.
	RefusedNoAttempt = "no-attempt"
	// RefusedNotRunning: the attempt is ending.
	RefusedNotRunning = "not-running"
	// RefusedAttached: a shell is attached to the attempt already.
	RefusedAttached = "attached"
	// RefusedTTY: the Open asks for a terminal the attempt has not (or
	// the other way round).
	RefusedTTY = "tty"
)

// Refusal is a supplier's refusal of an Open, as either side sees it.
type Refusal = p2p.Refusal

// refusalOf names this protocol in its refusals.
const refusalOf = "shell"

// Refuse makes a Refusal.
func Refuse(code, format string, args ...any) *Refusal {
	return p2p.Refuse(refusalOf, code, format, args...)
}

// IsRefusal reports whether err is a supplier's refusal of this protocol
// with one of codes (any code when none is given).
func IsRefusal(err error, codes ...string) bool {
	return p2p.IsRefusal(err, refusalOf, codes...)
}

// CheckOpen checks a decoded Open: its version, and a terminal's size of
// at least 1x1. Errors wrap p2p.ErrUnsupported or p2p.ErrMalformed.
func CheckOpen(o Open) error {
	switch {
	case o.Version != Version:
		return p2p.Errf(p2p.ErrUnsupported, "shell open version %d, want %d", o.Version, Version)
	case o.TTY && (o.Size.Rows == 0 || o.Size.Cols == 0):
		return p2p.Errf(p2p.ErrMalformed, "terminal size %dx%d", o.Size.Cols, o.Size.Rows)
	}
	return nil
}
