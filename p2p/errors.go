package p2p

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

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
	// ErrOverQuota: a valid record the node will not hold (its table is
	// full for the record's source); ignored, never rejected.
	ErrOverQuota = errors.New("over quota")
	// ErrSignaturePolicy: a gossip message whose pubsub signature is
	// against its topic's policy: present on a topic of version 2 (whose
	// records are signed once, by their envelope), or missing on a
	// version 1 topic read during the transition (see Topic).
	ErrSignaturePolicy = errors.New("pubsub signature against the topic's policy")
	// ErrTopicClosed: a Publish on a Topic that was closed meanwhile.
	ErrTopicClosed = errors.New("topic closed")
)

// Errf wraps sentinel (one of the errors above, or a package's own) with
// a description of what failed, for record checks.
func Errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// ParsePeer reads the binary peer ID in a record's field, or fails with
// ErrMalformed naming the field.
func ParsePeer(field string, b []byte) (peer.ID, error) {
	id, err := peer.IDFromBytes(b)
	if err != nil {
		return "", Errf(ErrMalformed, "%s: %v", field, err)
	}
	return id, nil
}
