package reputation

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// Wire constants of the attestation record.
const (
	// AttestationDomain is the signed-envelope domain of attestations.
	AttestationDomain = "gpumesh-attestation-v1"
	// AttestationPayloadType is written into each attestation's envelope.
	AttestationPayloadType = "/gpumesh/attestation/1"
	// MaxAttestationSize bounds a signed attestation envelope in bytes.
	MaxAttestationSize = 4 << 10
	// AttestationTopic is the GossipSub topic attestations are published on.
	AttestationTopic = "/gpumesh/attestations/2.0.0"

	// MaxAttestationAge is how old an attestation may be when it is
	// received (OpenAttestation); kept ones live for Config.Retention.
	MaxAttestationAge = 24 * time.Hour
	// MaxUUIDs bounds the GPU UUIDs one attestation lists.
	MaxUUIDs = 256
	// MaxUUIDBytes bounds one GPU UUID.
	MaxUUIDBytes = 128
	// MaxGPUs bounds the GPUs one attestation proves.
	MaxGPUs = 256
	// MaxReasonBytes bounds the reason string.
	MaxReasonBytes = 256
	// MaxModelBytes bounds the model slug.
	MaxModelBytes = 32
	// ChallengeIDBytes is the length of a challenge ID.
	ChallengeIDBytes = 32
)

// Kinds of attestation.
const (
	// KindChallenge is the verdict of a benchmark challenge: passed means
	// every claimed GPU proved its speed, memory and honest work.
	KindChallenge = "challenge"
	// KindUptime is the result of an uptime ping: passed means the
	// supplier answered in time.
	KindUptime = "uptime"
)

// AttestationType is the record type of attestations, for p2p.Seal and
// p2p.Open.
var AttestationType = p2p.RecordType{
	Domain:      AttestationDomain,
	PayloadType: AttestationPayloadType,
	MaxSize:     MaxAttestationSize,
}

// ErrReplayed is wrapped by AttestationValidator.Check for an attestation
// whose attester and nonce were already accepted. Every other rejection
// wraps one of p2p's named errors.
var ErrReplayed = errors.New("attestation replayed")

// ID names an attestation: the SHA-256 of its signed envelope.
type ID [32]byte

// IDOf is the ID of a signed envelope.
func IDOf(envelope []byte) ID { return sha256.Sum256(envelope) }

// String is the full lowercase hex form.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short is the first 12 hex digits, for tables and logs.
func (id ID) Short() string { return id.String()[:12] }

// Attestation is a validated, decoded attestation.
type Attestation struct {
	*pb.Attestation
	ID       ID      // SHA-256 of Raw
	Attester peer.ID // the signer
	Subject  peer.ID // the supplier judged
	Raw      []byte  // the signed envelope
}

// Created is when the attester reached its verdict, by its clock.
func (a *Attestation) Created() time.Time { return time.UnixMilli(a.CreatedMs) }

// SealAttestation signs a copy of a with key and returns the envelope to
// gossip. It fills in Version and Attester from the key, and a random
// Nonce when a's is 0; the caller fills in everything else.
func SealAttestation(a *pb.Attestation, key crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("seal attestation: peer id: %w", err)
	}
	c := proto.Clone(a).(*pb.Attestation)
	c.Version, c.Attester = p2p.RecordVersion, []byte(id)
	if c.Nonce == 0 {
		if c.Nonce, err = randomNonce(); err != nil {
			return nil, fmt.Errorf("seal attestation: %w", err)
		}
	}
	return p2p.Seal(AttestationType, c, key)
}

// randomNonce is a random non-zero 64-bit number.
func randomNonce() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("nonce: %w", err)
		}
		if n := binary.LittleEndian.Uint64(b[:]); n != 0 {
			return n, nil
		}
	}
}

// OpenAttestation verifies and decodes a signed attestation as of now.
// Checks run cheapest first: size, signature, payload type and key type
// (p2p.Open); that attester names the signer; the version and nonce; that
// created_ms lies within [now−MaxAttestationAge, now+p2p.ClockSkew]; that
// subject is a peer ID other than the attester; the kind; the GPU UUIDs
// (at most MaxUUIDs, each non-empty, at most MaxUUIDBytes and distinct);
// and the bounds of the other fields. Every error wraps exactly one of
// p2p's named errors.
func OpenAttestation(data []byte, now time.Time) (*Attestation, error) {
	return openAttestation(data, now, MaxAttestationAge)
}

// openAttestation is OpenAttestation with the largest accepted age as a
// parameter: attestations reloaded from the store are older than
// MaxAttestationAge but still within the retention.
func openAttestation(data []byte, now time.Time, maxAge time.Duration) (*Attestation, error) {
	m := &pb.Attestation{}
	signer, err := p2p.Open(AttestationType, data, m)
	if err != nil {
		return nil, fmt.Errorf("attestation: %w", err)
	}
	if err := p2p.CheckSigner(m.Attester, signer); err != nil {
		return nil, fmt.Errorf("attestation: %w", err)
	}
	id := IDOf(data)
	subject, err := checkAttestation(m, signer, now, maxAge)
	if err != nil {
		return nil, fmt.Errorf("attestation %s by %s: %w", id.Short(), signer, err)
	}
	return &Attestation{Attestation: m, ID: id, Attester: signer, Subject: subject, Raw: data}, nil
}

// checkAttestation checks the fields of an attestation signed by attester
// and returns its subject.
func checkAttestation(m *pb.Attestation, attester peer.ID, now time.Time, maxAge time.Duration) (peer.ID, error) {
	created := time.UnixMilli(m.CreatedMs)
	switch {
	case m.Version != p2p.RecordVersion:
		return "", p2p.Errf(p2p.ErrUnsupported, "version %d", m.Version)
	case m.Nonce == 0:
		return "", p2p.Errf(p2p.ErrMalformed, "nonce is 0")
	case m.CreatedMs <= 0:
		return "", p2p.Errf(p2p.ErrMalformed, "created_ms %d", m.CreatedMs)
	case created.After(now.Add(p2p.ClockSkew)):
		return "", p2p.Errf(p2p.ErrFutureDated, "created %s", created.UTC().Format(time.RFC3339))
	case created.Before(now.Add(-maxAge)):
		return "", p2p.Errf(p2p.ErrExpired, "created %s, over %s ago", created.UTC().Format(time.RFC3339), maxAge)
	}
	subject, err := peer.IDFromBytes(m.Subject)
	switch {
	case err != nil:
		return "", p2p.Errf(p2p.ErrMalformed, "subject: %v", err)
	case subject == attester:
		return "", p2p.Errf(p2p.ErrMalformed, "subject is the attester: self-attestation")
	case m.Kind != KindChallenge && m.Kind != KindUptime:
		return "", p2p.Errf(p2p.ErrMalformed, "kind %q is not %q or %q", m.Kind, KindChallenge, KindUptime)
	}
	err = cmp.Or(
		checkUUIDs(m.GpuUuids),
		checkChallengeID(m.Kind, m.ChallengeId),
		checkBounded("reason", m.Reason, MaxReasonBytes),
		checkModel(m.Model),
	)
	switch {
	case err != nil:
		return "", err
	case m.Gpus > MaxGPUs:
		return "", p2p.Errf(p2p.ErrMalformed, "gpus %d over %d", m.Gpus, MaxGPUs)
	case m.MeasuredMilliOps < 0:
		return "", p2p.Errf(p2p.ErrMalformed, "measured_milli_ops %d is negative", m.MeasuredMilliOps)
	case m.ExpectedMilliOps < 0:
		return "", p2p.Errf(p2p.ErrMalformed, "expected_milli_ops %d is negative", m.ExpectedMilliOps)
	case m.DurationMs < 0:
		return "", p2p.Errf(p2p.ErrMalformed, "duration_ms %d is negative", m.DurationMs)
	}
	return subject, nil
}

func checkUUIDs(uuids []string) error {
	if len(uuids) > MaxUUIDs {
		return p2p.Errf(p2p.ErrMalformed, "%d gpu_uuids (limit %d)", len(uuids), MaxUUIDs)
	}
	seen := make(map[string]bool, len(uuids))
	for i, u := range uuids {
		if u == "" || len(u) > MaxUUIDBytes || seen[u] {
			return p2p.Errf(p2p.ErrMalformed, "gpu_uuids[%d] empty, over %d bytes or repeated", i, MaxUUIDBytes)
		}
		seen[u] = true
	}
	return nil
}

// checkChallengeID: a challenge's verdict names its 32-byte challenge; an
// uptime ping may, or may leave it empty.
func checkChallengeID(kind string, id []byte) error {
	if len(id) == ChallengeIDBytes || len(id) == 0 && kind == KindUptime {
		return nil
	}
	return p2p.Errf(p2p.ErrMalformed, "challenge_id is %d bytes, want %d", len(id), ChallengeIDBytes)
}

func checkBounded(field, s string, limit int) error {
	if len(s) > limit {
		return p2p.Errf(p2p.ErrMalformed, "%s is %d bytes (limit %d)", field, len(s), limit)
	}
	return nil
}

// checkModel checks that s is empty or a model slug:
// ^[a-z0-9][a-z0-9-]{0,31}$.
func checkModel(s string) error {
	ok := len(s) <= MaxModelBytes
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0
	}
	if !ok {
		return p2p.Errf(p2p.ErrMalformed, "model %q is not a model slug", s)
	}
	return nil
}
