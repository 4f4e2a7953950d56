package reputation

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// namedErrors are the errors every rejection wraps exactly one of.
var namedErrors = []error{
	p2p.ErrTooLarge, p2p.ErrBadEnvelope, p2p.ErrMalformed, p2p.ErrUnsupported,
	p2p.ErrSignerMismatch, p2p.ErrExpired, p2p.ErrFutureDated, ErrReplayed,
}

func wrapsOneNamed(err error) bool {
	n := 0
	for _, e := range namedErrors {
		if errors.Is(err, e) {
			n++
		}
	}
	return n == 1
}

// FuzzOpenAttestation takes (data, resign). With resign false, data is an
// envelope, opened as it is, which explores the envelope and signature
// checks. With resign true, data is a payload: it is decoded, sealed with
// a test key (SealAttestation fills in version and attester) and opened,
// so the fuzzer reaches every field check. Seeds are valid attestations
// at the fixed clock testNow, in both forms.
//
// Invariants: never panic; a rejection returns nothing and wraps exactly
// one named error; an accepted attestation satisfies the documented
// limits, re-opens identically, and a Book can keep and score it.
//
//	go test ./verify/reputation -run '^$' -fuzz '^FuzzOpenAttestation$' -fuzztime 10s -fuzzminimizetime 200x
func FuzzOpenAttestation(f *testing.F) {
	auditor, supplier := newNode(f), newNode(f)
	for _, m := range []*pb.Attestation{
		challengeMsg(supplier.id, true, testNow),
		challengeMsg(supplier.id, false, testNow),
		func() *pb.Attestation {
			m := challengeMsg(supplier.id, true, testNow)
			m.Kind, m.ChallengeId, m.GpuUuids = KindUptime, nil, []string{"GPU-0", "GPU-1"}
			return m
		}(),
	} {
		raw := seal(f, m, auditor)
		a, err := OpenAttestation(raw, testNow)
		if err != nil {
			f.Fatal(err)
		}
		payload, err := proto.Marshal(a.Attestation)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, false)
		f.Add(payload, true)
	}
	f.Add([]byte{}, false)

	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		if resign {
			m := &pb.Attestation{}
			if proto.Unmarshal(data, m) != nil {
				return
			}
			var err error
			if data, err = SealAttestation(m, auditor.key); err != nil {
				return
			}
		}
		a, err := OpenAttestation(data, testNow)
		if err != nil {
			if a != nil {
				t.Fatalf("returned an attestation with error %v", err)
			}
			if !wrapsOneNamed(err) {
				t.Fatalf("error %q does not wrap exactly one named error", err)
			}
			return
		}
		switch {
		case len(data) > MaxAttestationSize:
			t.Fatalf("accepted %d bytes", len(data))
		case a.Subject == a.Attester:
			t.Fatalf("accepted a self-attestation")
		case a.Kind != KindChallenge && a.Kind != KindUptime:
			t.Fatalf("accepted kind %q", a.Kind)
		case len(a.GpuUuids) > MaxUUIDs || len(a.Reason) > MaxReasonBytes || len(a.Model) > MaxModelBytes:
			t.Fatalf("accepted over-long fields: %v", a.Attestation)
		case a.ID != IDOf(data) || !bytes.Equal(a.Raw, data):
			t.Fatalf("ID or Raw is not the envelope's")
		}
		again, err := OpenAttestation(a.Raw, testNow)
		if err != nil || again.ID != a.ID || !proto.Equal(again.Attestation, a.Attestation) {
			t.Fatalf("re-open: %v", err)
		}
		b, err := Open(store.NewMemory(), auditor.id, Config{Now: func() time.Time { return testNow }, Log: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		if !b.Add(a) {
			t.Fatalf("Book.Add refused a valid attestation")
		}
		if s := b.Score(a.Subject); s.Reputation < 0 || s.Reputation > 1 || s.Uptime < 0 || s.Uptime > 1 {
			t.Fatalf("score out of range: %+v", s)
		}
	})
}
