package p2p

import "errors"

// Validation failures. Each rejected record wraps exactly one of these, so a
// caller can tell a forgery from a stale record with errors.Is.
var (
	ErrTooLarge         = errors.New("record too large")
	ErrBadEnvelope      = errors.New("bad signed envelope")
	ErrMalformed        = errors.New("malformed record")
	ErrUnsupported      = errors.New("unsupported record version")
	ErrSignerMismatch   = errors.New("record not signed by the peer it names")
	ErrExpired          = errors.New("record expired")
	ErrFutureDated      = errors.New("record dated in the future")
	ErrStale            = errors.New("record older than one already seen")
	ErrBadKey           = errors.New("bad record key")
	ErrNoBootstrapPeers = errors.New("no bootstrap peer reachable")
	ErrRateLimited      = errors.New("sender over its rate limit")
)
