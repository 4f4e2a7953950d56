package reputation

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/pb"
)

func TestSealOpenRoundTrip(t *testing.T) {
	auditor, supplier := newNode(t), newNode(t)
	m := challengeMsg(supplier.id, true, testNow)
	m.GpuUuids = []string{"GPU-1", "GPU-2"}
	raw := seal(t, m, auditor)
	a, err := OpenAttestation(raw, testNow)
	if err != nil {
		t.Fatalf("OpenAttestation: %v", err)
	}
	switch {
	case a.Attester != auditor.id:
		t.Errorf("Attester = %s, want %s", a.Attester, auditor.id)
	case a.Subject != supplier.id:
		t.Errorf("Subject = %s, want %s", a.Subject, supplier.id)
	case a.ID != IDOf(raw):
		t.Errorf("ID = %s, want the envelope's SHA-256 %s", a.ID, IDOf(raw))
	case !bytes.Equal(a.Raw, raw):
		t.Errorf("Raw is not the envelope")
	case a.Version != p2p.RecordVersion || a.Nonce == 0:
		t.Errorf("Version %d, Nonce %d: SealAttestation should fill both", a.Version, a.Nonce)
	case !a.Created().Equal(testNow):
		t.Errorf("Created = %s, want %s", a.Created(), testNow)
	case !a.Passed || a.Kind != KindChallenge || len(a.GpuUuids) != 2 || a.MeasuredMilliOps != 900_000:
		t.Errorf("fields not decoded: %v", a.Attestation)
	}
	if m.Version != 0 || len(m.Attester) != 0 {
		t.Errorf("SealAttestation modified its argument")
	}
}

func TestOpenAttestationRejects(t *testing.T) {
	auditor, supplier, other := newNode(t), newNode(t), newNode(t)
	valid := func() *pb.Attestation { return challengeMsg(supplier.id, true, testNow) }

	// sealRaw signs m as is (no fields filled in) with key.
	sealRaw := func(m *pb.Attestation, key crypto.PrivKey) []byte {
		t.Helper()
		raw, err := p2p.Seal(AttestationType, m, key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	// edited seals a valid attestation by auditor after edit.
	edited := func(edit func(m *pb.Attestation)) []byte {
		m := valid()
		m.Version, m.Attester, m.Nonce = p2p.RecordVersion, []byte(auditor.id), 7
		edit(m)
		return sealRaw(m, auditor.key)
	}
	tampered := seal(t, valid(), auditor)
	tampered = bytes.Replace(tampered, []byte("h100-sxm"), []byte("h200-sxm"), 1)

	// Another record type's envelope: right bytes, wrong domain.
	wrongDomain := func() []byte {
		m := valid()
		m.Version, m.Attester, m.Nonce = p2p.RecordVersion, []byte(auditor.id), 7
		rt := p2p.RecordType{Domain: "gpumesh-profile-v1", PayloadType: AttestationPayloadType, MaxSize: MaxAttestationSize}
		raw, err := p2p.Seal(rt, m, auditor.key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}()

	// A record signed with an RSA key: gpumesh identities are Ed25519.
	rsaSigned := func() []byte {
		rsaKey, _, err := crypto.GenerateKeyPair(crypto.RSA, 2048)
		if err != nil {
			t.Fatal(err)
		}
		rsaID, err := peer.IDFromPrivateKey(rsaKey)
		if err != nil {
			t.Fatal(err)
		}
		m := valid()
		m.Version, m.Attester, m.Nonce = p2p.RecordVersion, []byte(rsaID), 7
		env, err := record.Seal(rawRecord{m}, rsaKey)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := env.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}()

	long := strings.Repeat("x", MaxUUIDBytes+1)
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"garbage", []byte("not an envelope"), p2p.ErrBadEnvelope},
		{"empty", nil, p2p.ErrBadEnvelope},
		{"oversized", bytes.Repeat([]byte{1}, MaxAttestationSize+1), p2p.ErrTooLarge},
		{"tampered", tampered, p2p.ErrBadEnvelope},
		{"wrong domain", wrongDomain, p2p.ErrBadEnvelope},
		{"non-Ed25519 key", rsaSigned, p2p.ErrBadEnvelope},
		{"forged attester", edited(func(m *pb.Attestation) { m.Attester = []byte(other.id) }), p2p.ErrSignerMismatch},
		{"attester not a peer id", edited(func(m *pb.Attestation) { m.Attester = []byte("junk") }), p2p.ErrMalformed},
		{"version 2", edited(func(m *pb.Attestation) { m.Version = 2 }), p2p.ErrUnsupported},
		{"nonce 0", edited(func(m *pb.Attestation) { m.Nonce = 0 }), p2p.ErrMalformed},
		{"created 0", edited(func(m *pb.Attestation) { m.CreatedMs = 0 }), p2p.ErrMalformed},
		{"expired", edited(func(m *pb.Attestation) {
			m.CreatedMs = testNow.Add(-MaxAttestationAge - time.Second).UnixMilli()
		}), p2p.ErrExpired},
		{"future", edited(func(m *pb.Attestation) {
			m.CreatedMs = testNow.Add(p2p.ClockSkew + time.Second).UnixMilli()
		}), p2p.ErrFutureDated},
		{"self-attestation", edited(func(m *pb.Attestation) { m.Subject = []byte(auditor.id) }), p2p.ErrMalformed},
		{"subject not a peer id", edited(func(m *pb.Attestation) { m.Subject = []byte("junk") }), p2p.ErrMalformed},
		{"no subject", edited(func(m *pb.Attestation) { m.Subject = nil }), p2p.ErrMalformed},
		{"bad kind", edited(func(m *pb.Attestation) { m.Kind = "benchmark" }), p2p.ErrMalformed},
		{"too many uuids", edited(func(m *pb.Attestation) {
			m.GpuUuids = make([]string, MaxUUIDs+1)
			for i := range m.GpuUuids {
				m.GpuUuids[i] = strconv.Itoa(i)
			}
		}), p2p.ErrMalformed},
		{"uuid too long", edited(func(m *pb.Attestation) { m.GpuUuids = []string{long} }), p2p.ErrMalformed},
		{"uuid empty", edited(func(m *pb.Attestation) { m.GpuUuids = []string{""} }), p2p.ErrMalformed},
		{"uuid repeated", edited(func(m *pb.Attestation) { m.GpuUuids = []string{"GPU-1", "GPU-1"} }), p2p.ErrMalformed},
		{"challenge id short", edited(func(m *pb.Attestation) { m.ChallengeId = []byte{1, 2, 3} }), p2p.ErrMalformed},
		{"challenge without id", edited(func(m *pb.Attestation) { m.ChallengeId = nil }), p2p.ErrMalformed},
		{"reason too long", edited(func(m *pb.Attestation) { m.Reason = strings.Repeat("r", MaxReasonBytes+1) }), p2p.ErrMalformed},
		{"model not a slug", edited(func(m *pb.Attestation) { m.Model = "H100 SXM" }), p2p.ErrMalformed},
		{"gpus over limit", edited(func(m *pb.Attestation) { m.Gpus = MaxGPUs + 1 }), p2p.ErrMalformed},
		{"negative measured", edited(func(m *pb.Attestation) { m.MeasuredMilliOps = -1 }), p2p.ErrMalformed},
		{"negative expected", edited(func(m *pb.Attestation) { m.ExpectedMilliOps = -1 }), p2p.ErrMalformed},
		{"negative duration", edited(func(m *pb.Attestation) { m.DurationMs = -1 }), p2p.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := OpenAttestation(tt.data, testNow)
			if err == nil {
				t.Fatalf("OpenAttestation accepted it: %v", a.Attestation)
			}
			if !errors.Is(err, tt.want) || !wrapsOneNamed(err) {
				t.Fatalf("err = %v, want %v (and no other named error)", err, tt.want)
			}
		})
	}
}

func TestOpenAttestationAccepts(t *testing.T) {
	auditor, supplier := newNode(t), newNode(t)
	tests := []struct {
		name string
		edit func(m *pb.Attestation)
	}{
		{"failed challenge", func(m *pb.Attestation) { m.Passed, m.Reason = false, "wrong row 17" }},
		{"uptime without challenge id", func(m *pb.Attestation) { m.Kind, m.ChallengeId, m.Model = KindUptime, nil, "" }},
		{"almost 24 h old", func(m *pb.Attestation) { m.CreatedMs = testNow.Add(-MaxAttestationAge + time.Second).UnixMilli() }},
		{"within clock skew", func(m *pb.Attestation) { m.CreatedMs = testNow.Add(p2p.ClockSkew).UnixMilli() }},
		{"longest fields", func(m *pb.Attestation) {
			m.Reason = strings.Repeat("r", MaxReasonBytes)
			m.Model = "a" + strings.Repeat("-", MaxModelBytes-1)
			m.GpuUuids = []string{strings.Repeat("u", MaxUUIDBytes)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := challengeMsg(supplier.id, true, testNow)
			tt.edit(m)
			if _, err := OpenAttestation(seal(t, m, auditor), testNow); err != nil {
				t.Fatalf("OpenAttestation: %v", err)
			}
		})
	}
}

func TestSealAttestationTooLarge(t *testing.T) {
	auditor, supplier := newNode(t), newNode(t)
	m := challengeMsg(supplier.id, true, testNow)
	for i := range 64 {
		m.GpuUuids = append(m.GpuUuids, strings.Repeat(string(rune('a'+i%26)), 100)+string(rune('0'+i/26)))
	}
	if _, err := SealAttestation(m, auditor.key); !errors.Is(err, p2p.ErrTooLarge) {
		t.Fatalf("SealAttestation of a %d-byte message: err = %v, want ErrTooLarge", proto.Size(m), err)
	}
}

// rawRecord seals an attestation message with any key type, for the test
// of non-Ed25519 signers.
type rawRecord struct{ m *pb.Attestation }

func (r rawRecord) Domain() string { return AttestationDomain }
func (r rawRecord) Codec() []byte  { return []byte(AttestationPayloadType) }
func (r rawRecord) MarshalRecord() ([]byte, error) {
	return proto.Marshal(r.m)
}
func (r rawRecord) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, r.m) }
