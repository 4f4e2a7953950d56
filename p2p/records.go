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

// RecordType describes one kind of signed record: the domain string its
// signature is bound to, the payload type written in its envelope, and the
// largest envelope accepted.
type RecordType struct {
	Domain      string
	PayloadType string
	MaxSize     int
}

// The record types of this package; package market defines its own.
var (
	ProfileType   = RecordType{ProfileDomain, string(profilePayloadType), MaxProfileSize}
	HeartbeatType = RecordType{HeartbeatDomain, string(heartbeatPayloadType), MaxHeartbeatSize}
)

// envelopeRecord adapts a protobuf message to libp2p's record.Record.
type envelopeRecord struct {
	rt  RecordType
	msg proto.Message
}

func (r envelopeRecord) Domain() string                 { return r.rt.Domain }
func (r envelopeRecord) Codec() []byte                  { return []byte(r.rt.PayloadType) }
func (r envelopeRecord) MarshalRecord() ([]byte, error) { return marshalDeterministic(r.msg) }
func (r envelopeRecord) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, r.msg) }

func marshalDeterministic(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Seal signs msg with key as a record of type rt and returns the envelope
// bytes. The caller fills in the signer's peer ID where the message names it.
func Seal(rt RecordType, msg proto.Message, key crypto.PrivKey) ([]byte, error) {
	env, err := record.Seal(envelopeRecord{rt, msg}, key)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", rt.Domain, err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("seal %s: marshal envelope: %w", rt.Domain, err)
	}
	if len(b) > rt.MaxSize {
		return nil, fmt.Errorf("seal %s: %d bytes: %w (limit %d)", rt.Domain, len(b), ErrTooLarge, rt.MaxSize)
	}
	return b, nil
}

// Open checks a record of type rt — its size first, then its envelope
// signature, payload type and key type — decodes the payload into msg and
// returns the signer. It checks nothing inside the payload: each record
// type's own validation does that.
func Open(rt RecordType, data []byte, msg proto.Message) (peer.ID, error) {
	if len(data) > rt.MaxSize {
		return "", fmt.Errorf("%d bytes: %w (limit %d)", len(data), ErrTooLarge, rt.MaxSize)
	}
	env, err := record.ConsumeTypedEnvelope(data, envelopeRecord{rt, msg})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadEnvelope, err)
	}
	if string(env.PayloadType) != rt.PayloadType {
		return "", fmt.Errorf("%w: payload type %q, want %q", ErrBadEnvelope, env.PayloadType, rt.PayloadType)
	}
	// The signature covers the payload, not the envelope's own encoding:
	// accept only the canonical encoding, so that one signed record has
	// one envelope, one hash and one ID (else anyone could re-wrap a
	// record into a "different" one, e.g. to forge equivocation).
	if canon, err := env.Marshal(); err != nil || !bytes.Equal(canon, data) {
		return "", fmt.Errorf("%w: envelope not in canonical encoding", ErrBadEnvelope)
	}
	if env.PublicKey.Type() != crypto.Ed25519 {
		return "", fmt.Errorf("%w: signed with a %s key; gpumesh identities are Ed25519", ErrBadEnvelope, env.PublicKey.Type())
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return "", fmt.Errorf("%w: signer key: %v", ErrBadEnvelope, err)
	}
	return signer, nil
}

// SealFilled signs a copy of msg after fill has set its version and author
// fields; fill gets the binary peer ID of key. Records that name their
// author use it, so that the author field is the signer by construction.
func SealFilled[M proto.Message](rt RecordType, msg M, key crypto.PrivKey, fill func(m M, id []byte)) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("seal %s: peer id: %w", rt.Domain, err)
	}
	c := proto.Clone(msg).(M)
	fill(c, []byte(id))
	return Seal(rt, c, key)
}

// OpenAuthored opens an envelope (Open) and checks that the author field
// the record names, read by author after decoding, is the signer.
func OpenAuthored(rt RecordType, data []byte, msg proto.Message, author func() []byte) (peer.ID, error) {
	signer, err := Open(rt, data, msg)
	if err != nil {
		return "", err
	}
	if err := CheckSigner(author(), signer); err != nil {
		return "", err
	}
	return signer, nil
}

// CheckSigner checks that the peer ID bytes a record names (its author
// field) are the signer's.
func CheckSigner(named []byte, signer peer.ID) error {
	id, err := peer.IDFromBytes(named)
	if err != nil {
		return fmt.Errorf("%w: peer id: %v", ErrMalformed, err)
	}
	if id != signer {
		return fmt.Errorf("%w: names %s, signed by %s", ErrSignerMismatch, id, signer)
	}
	return nil
}

// SealProfile signs p with key and returns the envelope bytes to store in
// the DHT. It fills in Version and PeerId from the key.
func SealProfile(p *pb.Profile, key crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("seal profile: peer id: %w", err)
	}
	p = proto.Clone(p).(*pb.Profile)
	p.Version, p.PeerId = RecordVersion, []byte(id)
	return Seal(ProfileType, p, key)
}

// SealHeartbeat signs h with key and returns the envelope bytes to gossip.
func SealHeartbeat(h *pb.Heartbeat, key crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("seal heartbeat: peer id: %w", err)
	}
	h = proto.Clone(h).(*pb.Heartbeat)
	h.Version, h.PeerId = RecordVersion, []byte(id)
	return Seal(HeartbeatType, h, key)
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

// ReachOf is how peers reach the profile's supplier, as it states it;
// ReachUnknown when it states nothing (older suppliers).
func (p *Profile) ReachOf() Reach {
	if p.Reach == "" {
		return ReachUnknown
	}
	return Reach(p.Reach)
}

// OpenProfile verifies and decodes a signed profile envelope as of now.
func OpenProfile(data []byte, now time.Time) (*Profile, error) {
	p := &pb.Profile{}
	id, err := OpenAuthored(ProfileType, data, p, func() []byte { return p.PeerId })
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
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
	if p.Reach != "" && !Reach(p.Reach).Valid() {
		return fmt.Errorf("%w: reach %q is not one of public, punchable, relay-only, unknown", ErrMalformed, p.Reach)
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
		if g.PcieGen > 16 || g.PcieWidth > 64 || g.GetNvlinkLinks() > MaxNVLinks {
			return fmt.Errorf("%w: gpus[%d]: pcie gen %d, width %d or nvlink links %d out of range (16, 64, %d)", ErrMalformed, i, g.PcieGen, g.PcieWidth, g.GetNvlinkLinks(), MaxNVLinks)
		}
		if len(g.DriverVersion) > 32 || len(g.CudaVersion) > 32 {
			return fmt.Errorf("%w: gpus[%d]: driver or cuda version longer than 32 bytes", ErrMalformed, i)
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
	h := &pb.Heartbeat{}
	id, err := OpenAuthored(HeartbeatType, data, h, func() []byte { return h.PeerId })
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
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
