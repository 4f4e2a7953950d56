package p2p

import (
	"bytes"
	"fmt"
	"regexp"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

// slugPattern is the shape of a canonical GPU model slug.
var slugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// profileRecord adapts pb.Profile to libp2p's record.Record.
type profileRecord struct{ pb.Profile }

func (*profileRecord) Domain() string                   { return ProfileDomain }
func (*profileRecord) Codec() []byte                    { return profilePayloadType }
func (r *profileRecord) MarshalRecord() ([]byte, error) { return marshalDeterministic(&r.Profile) }
func (r *profileRecord) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, &r.Profile) }

// heartbeatRecord adapts pb.Heartbeat to libp2p's record.Record.
type heartbeatRecord struct{ pb.Heartbeat }

func (*heartbeatRecord) Domain() string                   { return HeartbeatDomain }
func (*heartbeatRecord) Codec() []byte                    { return heartbeatPayloadType }
func (r *heartbeatRecord) MarshalRecord() ([]byte, error) { return marshalDeterministic(&r.Heartbeat) }
func (r *heartbeatRecord) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, &r.Heartbeat) }

func marshalDeterministic(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// SealProfile signs p with key and returns the envelope bytes to store in
// the DHT. It fills in Version and PeerId from the key.
func SealProfile(p *pb.Profile, key crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("seal profile: peer id: %w", err)
	}
	rec := &profileRecord{}
	proto.Merge(&rec.Profile, p)
	rec.Version = RecordVersion
	rec.PeerId = []byte(id)
	return seal(rec, key, MaxProfileSize)
}

// SealHeartbeat signs h with key and returns the envelope bytes to gossip.
func SealHeartbeat(h *pb.Heartbeat, key crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("seal heartbeat: peer id: %w", err)
	}
	rec := &heartbeatRecord{}
	proto.Merge(&rec.Heartbeat, h)
	rec.Version = RecordVersion
	rec.PeerId = []byte(id)
	return seal(rec, key, MaxHeartbeatSize)
}

func seal(rec record.Record, key crypto.PrivKey, limit int) ([]byte, error) {
	env, err := record.Seal(rec, key)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", rec.Domain(), err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("seal %s: marshal envelope: %w", rec.Domain(), err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("seal %s: %d bytes: %w (limit %d)", rec.Domain(), len(b), ErrTooLarge, limit)
	}
	return b, nil
}

// open checks the size and the envelope signature before decoding the
// payload into rec, then checks that the signer is the peer the record names.
func open(data []byte, limit int, rec record.Record, namedPeer func() []byte) (peer.ID, error) {
	if len(data) > limit {
		return "", fmt.Errorf("%d bytes: %w (limit %d)", len(data), ErrTooLarge, limit)
	}
	env, err := record.ConsumeTypedEnvelope(data, rec)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEnvelope, err)
	}
	if !bytes.Equal(env.PayloadType, rec.Codec()) {
		return "", fmt.Errorf("%w: payload type %q, want %q", ErrBadEnvelope, env.PayloadType, rec.Codec())
	}
	if env.PublicKey.Type() != crypto.Ed25519 {
		return "", fmt.Errorf("%w: signed with a %s key; gpumesh identities are Ed25519", ErrBadEnvelope, env.PublicKey.Type())
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return "", fmt.Errorf("%w: signer key: %v", ErrBadEnvelope, err)
	}
	named, err := peer.IDFromBytes(namedPeer())
	if err != nil {
		return "", fmt.Errorf("%w: peer_id: %v", ErrMalformed, err)
	}
	if named != signer {
		return "", fmt.Errorf("%w: names %s, signed by %s", ErrSignerMismatch, named, signer)
	}
	return signer, nil
}

// Profile is a validated supplier profile.
type Profile struct {
	*pb.Profile
	ID    peer.ID
	Addrs []ma.Multiaddr
	// Raw is the signed envelope the profile was decoded from.
	Raw []byte
}

// Issued is when the profile was signed.
func (p *Profile) Issued() time.Time { return time.UnixMilli(p.IssuedAtMs) }

// Expires is when the profile stops being valid.
func (p *Profile) Expires() time.Time { return time.UnixMilli(p.ExpiresAtMs) }

// OpenProfile verifies and decodes a signed profile envelope as of now.
func OpenProfile(data []byte, now time.Time) (*Profile, error) {
	rec := &profileRecord{}
	id, err := open(data, MaxProfileSize, rec, func() []byte { return rec.PeerId })
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	p := &rec.Profile
	if err := checkProfile(p, now); err != nil {
		return nil, fmt.Errorf("profile %s: %w", id, err)
	}
	addrs := make([]ma.Multiaddr, 0, len(p.Addrs))
	for i, b := range p.Addrs {
		a, err := ma.NewMultiaddrBytes(b)
		if err != nil {
			return nil, fmt.Errorf("profile %s: addrs[%d]: %w: %v", id, i, ErrMalformed, err)
		}
		addrs = append(addrs, a)
	}
	return &Profile{Profile: p, ID: id, Addrs: addrs, Raw: data}, nil
}

func checkProfile(p *pb.Profile, now time.Time) error {
	switch {
	case p.Version != RecordVersion:
		return fmt.Errorf("%w: %d", ErrUnsupported, p.Version)
	case p.Seq == 0:
		return fmt.Errorf("%w: seq is 0", ErrMalformed)
	case p.ExpiresAtMs <= p.IssuedAtMs:
		return fmt.Errorf("%w: expires_at %d not after issued_at %d", ErrMalformed, p.ExpiresAtMs, p.IssuedAtMs)
	case time.Duration(p.ExpiresAtMs-p.IssuedAtMs)*time.Millisecond > MaxProfileLifetime:
		return fmt.Errorf("%w: lifetime over %s", ErrMalformed, MaxProfileLifetime)
	case time.UnixMilli(p.IssuedAtMs).After(now.Add(ClockSkew)):
		return fmt.Errorf("%w: issued %s", ErrFutureDated, time.UnixMilli(p.IssuedAtMs).UTC().Format(time.RFC3339))
	case !now.Before(time.UnixMilli(p.ExpiresAtMs)):
		return fmt.Errorf("%w: at %s", ErrExpired, time.UnixMilli(p.ExpiresAtMs).UTC().Format(time.RFC3339))
	case len(p.Gpus) > MaxGPUsPerProfile:
		return fmt.Errorf("%w: %d gpus (limit %d)", ErrMalformed, len(p.Gpus), MaxGPUsPerProfile)
	case len(p.Addrs) > MaxAddrsPerProfile:
		return fmt.Errorf("%w: %d addrs (limit %d)", ErrMalformed, len(p.Addrs), MaxAddrsPerProfile)
	}
	if err := checkText("region", p.Region); err != nil {
		return err
	}
	if err := checkText("software", p.Software); err != nil {
		return err
	}
	uuids := make(map[string]bool, len(p.Gpus))
	for i, g := range p.Gpus {
		if !slugPattern.MatchString(g.Model) {
			return fmt.Errorf("%w: gpus[%d].model %q is not a model slug", ErrMalformed, i, g.Model)
		}
		if g.Uuid == "" || len(g.Uuid) > MaxTextField || uuids[g.Uuid] {
			return fmt.Errorf("%w: gpus[%d].uuid %q empty, too long or repeated", ErrMalformed, i, g.Uuid)
		}
		uuids[g.Uuid] = true
		if err := checkText(fmt.Sprintf("gpus[%d].name", i), g.Name); err != nil {
			return err
		}
		if g.MemoryBytes == 0 {
			return fmt.Errorf("%w: gpus[%d].memory_bytes is 0", ErrMalformed, i)
		}
	}
	return nil
}

func checkText(field, s string) error {
	if len(s) > MaxTextField {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, field, MaxTextField)
	}
	return nil
}

// Heartbeat is a validated heartbeat.
type Heartbeat struct {
	*pb.Heartbeat
	ID peer.ID
}

// Time is when the heartbeat was sent, by the sender's clock.
func (h *Heartbeat) Time() time.Time { return time.UnixMilli(h.TimeMs) }

// OpenHeartbeat verifies and decodes a signed heartbeat envelope as of now.
// It does not check replay; HeartbeatValidator does, since that needs state.
func OpenHeartbeat(data []byte, now time.Time) (*Heartbeat, error) {
	rec := &heartbeatRecord{}
	id, err := open(data, MaxHeartbeatSize, rec, func() []byte { return rec.PeerId })
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	h := &rec.Heartbeat
	t := time.UnixMilli(h.TimeMs)
	switch {
	case h.Version != RecordVersion:
		err = fmt.Errorf("%w: %d", ErrUnsupported, h.Version)
	case h.Seq == 0:
		err = fmt.Errorf("%w: seq is 0", ErrMalformed)
	case h.GpusFree > h.GpusTotal:
		err = fmt.Errorf("%w: %d free of %d gpus", ErrMalformed, h.GpusFree, h.GpusTotal)
	case h.GpusTotal > MaxGPUsPerProfile:
		err = fmt.Errorf("%w: %d gpus (limit %d)", ErrMalformed, h.GpusTotal, MaxGPUsPerProfile)
	case t.After(now.Add(ClockSkew)):
		err = fmt.Errorf("%w: sent %s", ErrFutureDated, t.UTC().Format(time.RFC3339))
	case t.Before(now.Add(-MaxHeartbeatAge)):
		err = fmt.Errorf("%w: sent %s", ErrExpired, t.UTC().Format(time.RFC3339))
	default:
		err = checkText("software", h.Software)
		if err == nil {
			err = checkText("region", h.Region)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", id, err)
	}
	return &Heartbeat{Heartbeat: h, ID: id}, nil
}
