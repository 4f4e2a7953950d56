package chainpay

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/big"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/chainpay/pb"
)

// The ChainKey record's identifiers; changing one is a wire change.
const (
	ChainKeyDomain      = "gpumesh-chainkey-v1"
	ChainKeyPayloadType = "/gpumesh/chainkey/1"
	// MaxChainKeySize bounds a ChainKey envelope.
	MaxChainKeySize = 1024
	// RecordVersion is the only version of the record accepted.
	RecordVersion = 1
)

// ChainKey is a validated binding record: Peer holds the payment key of
// Address on the chain and contract of Domain, and Address's key has
// named Peer. Both signatures were checked by OpenChainKey.
type ChainKey struct {
	Peer    peer.ID
	Domain  Domain
	Address Address
	Created time.Time
	EthSig  [SigSize]byte // the payment key's EIP-712 signature of the ChainKey statement
	Hash    [32]byte      // SHA-256 of Raw
	Raw     []byte        // the signed envelope
}

// chainKeyRecord is the payload: the protobuf message pb.ChainKey
// (market/chainpay/pb/chainkey.proto; PROTOCOL.md §43.2) as a
// record.Record.
type chainKeyRecord struct{ *pb.ChainKey }

func (r *chainKeyRecord) Domain() string { return ChainKeyDomain }
func (r *chainKeyRecord) Codec() []byte  { return []byte(ChainKeyPayloadType) }

// MarshalRecord writes the message deterministically: fields in number
// order, zero ones left out.
func (r *chainKeyRecord) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(r.ChainKey)
}

// UnmarshalRecord decodes the payload; unknown fields are skipped (a
// later version may add some).
func (r *chainKeyRecord) UnmarshalRecord(b []byte) error {
	r.ChainKey = &pb.ChainKey{}
	if err := proto.Unmarshal(b, r.ChainKey); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// SealChainKey makes the ChainKey record binding peerKey's peer ID and
// payKey's address on d: payKey signs the EIP-712 statement naming the
// peer, and peerKey signs the envelope around it.
func SealChainKey(d Domain, peerKey crypto.PrivKey, payKey *secp256k1.PrivateKey, now time.Time) ([]byte, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	id, err := peer.IDFromPrivateKey(peerKey)
	if err != nil {
		return nil, fmt.Errorf("chainkey: peer id: %w", err)
	}
	ms := now.UnixMilli()
	if ms <= 0 {
		return nil, fmt.Errorf("%w: time %v", ErrMalformed, now)
	}
	addr := AddressOf(payKey.PubKey())
	sig := Sign(d.ChainKeyDigest([]byte(id), addr, uint64(ms)), payKey)
	return SealChainKeyRecord(&pb.ChainKey{
		Version: RecordVersion, Peer: []byte(id), ChainId: d.ChainID.Bytes(),
		Contract: d.Contract[:], Address: addr[:], CreatedMs: ms, EthSig: sig[:],
	}, peerKey)
}

// SealChainKeyRecord seals m as it is, checked or not: SealChainKey's
// last step, and the tests' way to make bad records.
func SealChainKeyRecord(m *pb.ChainKey, peerKey crypto.PrivKey) ([]byte, error) {
	env, err := record.Seal(&chainKeyRecord{m}, peerKey)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", ChainKeyDomain, err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", ChainKeyDomain, err)
	}
	if len(b) > MaxChainKeySize {
		return nil, fmt.Errorf("seal %s: %d bytes: %w (limit %d)", ChainKeyDomain, len(b), ErrMalformed, MaxChainKeySize)
	}
	return b, nil
}

// OpenChainKey checks a ChainKey record and decodes it: its size, then
// the envelope (canonical, Ed25519, domain and payload type), then the
// fields, that the peer it names signed it (ErrSignerMismatch), and last
// that the payment key of the address it names signed the statement
// naming that peer (ErrSignature).
func OpenChainKey(data []byte) (*ChainKey, error) {
	if len(data) > MaxChainKeySize {
		return nil, fmt.Errorf("chainkey: %d bytes: %w (limit %d)", len(data), ErrMalformed, MaxChainKeySize)
	}
	r := &chainKeyRecord{}
	env, err := record.ConsumeTypedEnvelope(data, r)
	if err != nil {
		return nil, fmt.Errorf("chainkey: %w: %v", ErrBadEnvelope, err)
	}
	if string(env.PayloadType) != ChainKeyPayloadType {
		return nil, fmt.Errorf("chainkey: %w: payload type %q", ErrBadEnvelope, env.PayloadType)
	}
	if canon, err := env.Marshal(); err != nil || !bytes.Equal(canon, data) {
		return nil, fmt.Errorf("chainkey: %w: envelope not in canonical encoding", ErrBadEnvelope)
	}
	if env.PublicKey.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("chainkey: %w: signed with a %s key; gpumesh identities are Ed25519", ErrBadEnvelope, env.PublicKey.Type())
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("chainkey: %w: signer key: %v", ErrBadEnvelope, err)
	}
	switch {
	case r.Version != RecordVersion:
		return nil, fmt.Errorf("chainkey: %w: version %d", ErrUnsupported, r.Version)
	case len(r.ChainId) == 0 || len(r.ChainId) > 32 || r.ChainId[0] == 0:
		return nil, fmt.Errorf("chainkey: %w: chain_id of %d bytes (big-endian, no leading zero, 1 to 32)", ErrMalformed, len(r.ChainId))
	case len(r.Contract) != len(Address{}):
		return nil, fmt.Errorf("chainkey: %w: contract of %d bytes", ErrMalformed, len(r.Contract))
	case len(r.Address) != len(Address{}):
		return nil, fmt.Errorf("chainkey: %w: address of %d bytes", ErrMalformed, len(r.Address))
	case r.CreatedMs <= 0:
		return nil, fmt.Errorf("chainkey: %w: created_ms %d", ErrMalformed, r.CreatedMs)
	case len(r.EthSig) != SigSize:
		return nil, fmt.Errorf("chainkey: %w: eth_sig of %d bytes", ErrMalformed, len(r.EthSig))
	}
	named, err := peer.IDFromBytes(r.Peer)
	if err != nil {
		return nil, fmt.Errorf("chainkey: %w: peer: %v", ErrMalformed, err)
	}
	if named != signer {
		return nil, fmt.Errorf("chainkey: %w: names %s, signed by %s", ErrSignerMismatch, named, signer)
	}
	k := &ChainKey{
		Peer:    named,
		Domain:  Domain{ChainID: new(big.Int).SetBytes(r.ChainId), Contract: Address(r.Contract)},
		Address: Address(r.Address),
		Created: time.UnixMilli(r.CreatedMs),
		EthSig:  [SigSize]byte(r.EthSig),
		Hash:    sha256.Sum256(data),
		Raw:     data,
	}
	got, err := Recover(k.Domain.ChainKeyDigest(r.Peer, k.Address, uint64(r.CreatedMs)), k.EthSig)
	if err != nil {
		return nil, fmt.Errorf("chainkey: %w", err)
	}
	if got != k.Address {
		return nil, fmt.Errorf("chainkey: %w: statement signed by %s, record names %s", ErrSignature, got, k.Address)
	}
	return k, nil
}
