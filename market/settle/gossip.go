package settle

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/p2p"
)

// EvidenceTopic gossips signed evidence of equivocation in metering
// (docs/PROTOCOL.md Part IV).
const EvidenceTopic = "/gpumesh/evidence/2.0.0"

// EvidenceGossipAge is how long after its creation evidence is gossiped.
const EvidenceGossipAge = 24 * time.Hour

// Per-reporter gossip rate limit of EvidenceTopic, and the bounds of the
// validator's tables.
const (
	evidenceRate      = rate.Limit(1)
	evidenceBurst     = 10
	evidenceReporters = 4096
	evidenceSeen      = 16384
)

// EvidenceValidator is the GossipSub validator of EvidenceTopic. Its
// Check runs the cheap checks first: size, the reporter's rate, the claim
// itself (OpenEvidence), that the publisher is the reporter, the age, and
// that the evidence was not seen before. It is safe for concurrent use.
type EvidenceValidator struct {
	now    func() time.Time
	limits *p2p.AuthorLimits
	seen   *p2p.ReplayTable[[32]byte]
}

// NewEvidenceValidator returns a validator with now as its clock
// (time.Now if nil).
func NewEvidenceValidator(now func() time.Time) *EvidenceValidator {
	if now == nil {
		now = time.Now
	}
	return &EvidenceValidator{
		now:    now,
		limits: p2p.NewAuthorLimits(evidenceRate, evidenceBurst, evidenceReporters),
		seen:   p2p.NewReplayTable[[32]byte](evidenceSeen),
	}
}

// Check validates one message of EvidenceTopic published by author and
// returns its raw bytes; it is a p2p.CheckFunc. It remembers the evidence
// it accepts for EvidenceGossipAge, so each is accepted once.
func (v *EvidenceValidator) Check(author peer.ID, data []byte) ([]byte, error) {
	now := v.now()
	if len(data) > MaxEvidenceSize {
		return nil, fmt.Errorf("evidence from %s: %d bytes: %w", author, len(data), p2p.ErrTooLarge)
	}
	if err := v.limits.Allow(author, now); err != nil {
		return nil, fmt.Errorf("evidence from %s: %w", author, err)
	}
	e, err := OpenEvidence(data)
	if err != nil {
		return nil, err
	}
	if e.Reporter != author {
		return nil, fmt.Errorf("evidence: %w: reported by %s, published by %s", p2p.ErrSignerMismatch, e.Reporter, author)
	}
	// Evidence is gossiped for a day after it was made, and remembered
	// that long, so that none goes round twice.
	switch created := time.UnixMilli(e.CreatedMs); {
	case created.After(now.Add(p2p.ClockSkew)):
		return nil, fmt.Errorf("evidence: %w: created %s", p2p.ErrFutureDated, created.UTC().Format(time.RFC3339))
	case now.Sub(created) > EvidenceGossipAge:
		return nil, fmt.Errorf("evidence: %w: created %s, gossiped for %s only", p2p.ErrStale, created.UTC().Format(time.RFC3339), EvidenceGossipAge)
	}
	if !v.seen.Add(sha256.Sum256(data), now.Add(EvidenceGossipAge+p2p.ClockSkew), now) {
		return nil, fmt.Errorf("evidence: %w: already seen", p2p.ErrStale)
	}
	return data, nil
}
