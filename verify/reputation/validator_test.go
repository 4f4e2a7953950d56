package reputation

import (
	"errors"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/gpumesh/gpumesh/p2p"
)

// Check must be usable as a topic validator.
var _ p2p.CheckFunc[*Attestation] = (*AttestationValidator)(nil).Check

func TestValidatorAcceptsOnceAndRejectsReplay(t *testing.T) {
	auditor, supplier := newNode(t), newNode(t)
	clk := newClock()
	v := NewAttestationValidator(clk.Now, DefaultAttestationRate, DefaultAttestationBurst)
	raw := seal(t, challengeMsg(supplier.id, true, testNow), auditor)

	got, err := v.Check(auditor.id, raw)
	if err != nil {
		t.Fatalf("first Check: %v", err)
	}
	if got == nil || got.Subject != supplier.id {
		t.Fatalf("Check returned %v, want an attestation about %s", got, supplier.id)
	}
	_, err = v.Check(auditor.id, raw)
	if !errors.Is(err, ErrReplayed) {
		t.Fatalf("second Check of the same envelope: err = %v, want ErrReplayed", err)
	}
	if p2p.Verdict(err) != pubsub.ValidationReject {
		t.Errorf("replay verdict = %v, want reject", p2p.Verdict(err))
	}

	// Another envelope with the same attester and nonce is a replay too.
	m := challengeMsg(supplier.id, false, testNow)
	a, _ := OpenAttestation(raw, testNow)
	m.Nonce = a.Nonce
	if _, err := v.Check(auditor.id, seal(t, m, auditor)); !errors.Is(err, ErrReplayed) {
		t.Fatalf("same nonce, new envelope: err = %v, want ErrReplayed", err)
	}
	// A fresh nonce is accepted.
	if _, err := v.Check(auditor.id, seal(t, challengeMsg(supplier.id, false, testNow), auditor)); err != nil {
		t.Fatalf("fresh nonce: %v", err)
	}
	// Once the attestation is past its age limit it is expired, not
	// replayed, and ignored rather than rejected.
	clk.Advance(MaxAttestationAge + time.Minute)
	_, err = v.Check(auditor.id, raw)
	if !errors.Is(err, p2p.ErrExpired) || p2p.Verdict(err) != pubsub.ValidationIgnore {
		t.Fatalf("late replay: err = %v (verdict %v), want ErrExpired, ignored", err, p2p.Verdict(err))
	}
}

func TestValidatorRejects(t *testing.T) {
	auditor, supplier, relay := newNode(t), newNode(t), newNode(t)
	v := NewAttestationValidator(func() time.Time { return testNow }, DefaultAttestationRate, DefaultAttestationBurst)
	tests := []struct {
		name    string
		author  peer.ID
		data    []byte
		want    error
		verdict pubsub.ValidationResult
	}{
		{"published by another peer", relay.id, seal(t, challengeMsg(supplier.id, true, testNow), auditor), p2p.ErrSignerMismatch, pubsub.ValidationReject},
		{"oversized", auditor.id, make([]byte, MaxAttestationSize+1), p2p.ErrTooLarge, pubsub.ValidationReject},
		{"garbage", auditor.id, []byte("junk"), p2p.ErrBadEnvelope, pubsub.ValidationReject},
		{"future", auditor.id, seal(t, challengeMsg(supplier.id, true, testNow.Add(time.Hour)), auditor), p2p.ErrFutureDated, pubsub.ValidationReject},
		{"expired", auditor.id, seal(t, challengeMsg(supplier.id, true, testNow.Add(-25*time.Hour)), auditor), p2p.ErrExpired, pubsub.ValidationIgnore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Check(tt.author, tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := p2p.Verdict(err); got != tt.verdict {
				t.Errorf("verdict = %v, want %v", got, tt.verdict)
			}
		})
	}
}

func TestValidatorRateLimit(t *testing.T) {
	auditor, other, supplier := newNode(t), newNode(t), newNode(t)
	clk := newClock()
	const burst = 5
	v := NewAttestationValidator(clk.Now, rate.Limit(1), burst)
	for i := range burst {
		if _, err := v.Check(auditor.id, seal(t, challengeMsg(supplier.id, true, testNow), auditor)); err != nil {
			t.Fatalf("attestation %d within the burst: %v", i, err)
		}
	}
	_, err := v.Check(auditor.id, seal(t, challengeMsg(supplier.id, true, testNow), auditor))
	if !errors.Is(err, p2p.ErrRateLimited) {
		t.Fatalf("over the burst: err = %v, want ErrRateLimited", err)
	}
	if p2p.Verdict(err) != pubsub.ValidationIgnore {
		t.Errorf("rate-limited verdict = %v, want ignore", p2p.Verdict(err))
	}
	// Another author has its own bucket.
	if _, err := v.Check(other.id, seal(t, challengeMsg(supplier.id, true, testNow), other)); err != nil {
		t.Fatalf("another author: %v", err)
	}
	// The bucket refills with time.
	clk.Advance(time.Second)
	if _, err := v.Check(auditor.id, seal(t, challengeMsg(supplier.id, true, testNow), auditor)); err != nil {
		t.Fatalf("after a second: %v", err)
	}
}
