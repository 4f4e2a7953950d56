package reputation

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/p2p"
)

// Default rate limit of AttestationValidator: an auditor publishes a
// verdict per challenge and per uptime ping, a few a minute; the burst
// covers a round of pings over many suppliers.
const (
	DefaultAttestationRate  rate.Limit = 2
	DefaultAttestationBurst int        = 64
)

const (
	// maxSeen bounds the validator's replay table; when it is full of live
	// entries the ones closest to expiry are forgotten first.
	maxSeen = 100_000
	// maxLimiters bounds the per-author token buckets kept.
	maxLimiters = 10_000
)

// AttestationValidator is the GossipSub validator of AttestationTopic.
// Its Check accepts attestations and rejects (so that pubsub penalises the
// forwarding peer) those that are oversized, forged, malformed, not
// published by their attester, future-dated or replayed (an attester and
// nonce already accepted, within MaxAttestationAge). Expired attestations
// and those of an author over its rate limit are ignored (see
// p2p.Verdict). It is safe for concurrent use.
type AttestationValidator struct {
	now    func() time.Time
	limits *p2p.AuthorLimits
	seen   *p2p.ReplayTable[nonceKey]
}

// NewAttestationValidator returns a validator with now as its clock
// (time.Now if nil) that lets each author publish limit attestations per
// second on average, in bursts of up to burst.
func NewAttestationValidator(now func() time.Time, limit rate.Limit, burst int) *AttestationValidator {
	if now == nil {
		now = time.Now
	}
	return &AttestationValidator{now: now, limits: p2p.NewAuthorLimits(limit, burst, maxLimiters), seen: p2p.NewReplayTable[nonceKey](maxSeen)}
}

// Check validates one message of AttestationTopic published by author and
// returns the *Attestation it holds; it is a p2p.CheckFunc. Cheap checks
// run first: size, the author's rate limit, then OpenAttestation, that
// author is the attester, and replay. It remembers every attestation it
// accepts, so each is accepted once.
func (v *AttestationValidator) Check(author peer.ID, data []byte) (*Attestation, error) {
	now := v.now()
	if len(data) > MaxAttestationSize {
		return nil, fmt.Errorf("attestation from %s: %d bytes: %w (limit %d)", author, len(data), p2p.ErrTooLarge, MaxAttestationSize)
	}
	if err := v.limits.Allow(author, now); err != nil {
		return nil, fmt.Errorf("attestation from %s: %w", author, err)
	}
	a, err := OpenAttestation(data, now)
	if err != nil {
		return nil, err
	}
	if a.Attester != author {
		return nil, fmt.Errorf("attestation %s: %w: signed by %s, published by %s", a.ID.Short(), p2p.ErrSignerMismatch, a.Attester, author)
	}
	// An attestation is accepted until MaxAttestationAge after its
	// creation (plus skew), so its nonce is remembered that long.
	expires := a.Created().Add(MaxAttestationAge + p2p.ClockSkew)
	if !v.seen.Add(nonceKey{a.Attester, a.Nonce}, expires, now) {
		return nil, fmt.Errorf("attestation %s: %w: nonce %d of %s already seen", a.ID.Short(), ErrReplayed, a.Nonce, a.Attester)
	}
	return a, nil
}

// nonceKey identifies an attestation for replay detection.
type nonceKey struct {
	attester peer.ID
	nonce    uint64
}
