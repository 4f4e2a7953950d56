package chain

import (
	"bytes"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gpumesh/gpumesh/chain/pb"
	lcrypto "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

type keyPair struct {
	peer lcrypto.PrivKey
	id   peer.ID
	eth  *ecdsa.PrivateKey
}

func newKeyPair(t testing.TB) keyPair {
	t.Helper()
	pk, _, err := lcrypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(pk)
	ek, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{pk, id, ek}
}

var testDomain = Domain{ChainID: big.NewInt(8453), Contract: common.HexToAddress("0x1111111111111111111111111111111111111111")}

// TestChainKeyRoundTrip: a sealed record opens to the peer, domain,
// address and time it was made with.
func TestChainKeyRoundTrip(t *testing.T) {
	k := newKeyPair(t)
	now := time.UnixMilli(1_790_000_000_123)
	raw, err := SealChainKey(testDomain, k.peer, k.eth, now)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := OpenChainKey(raw)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if ck.Peer != k.id || ck.Address != crypto.PubkeyToAddress(k.eth.PublicKey) || !ck.Created.Equal(now) ||
		ck.Domain.ChainID.Cmp(testDomain.ChainID) != 0 || ck.Domain.Contract != testDomain.Contract {
		t.Fatalf("opened %+v", ck)
	}
}

// TestChainKeyTamper: changing any field (re-sealed by the peer, so that
// the envelope is valid), swapping in another record's payment
// signature, a record that another peer seals naming someone's address,
// and bytes changed without re-sealing are each refused with their named
// error.
func TestChainKeyTamper(t *testing.T) {
	a, b := newKeyPair(t), newKeyPair(t)
	now := time.UnixMilli(1_790_000_000_000)
	good := func(k keyPair) *chainKeyRecord {
		raw, err := SealChainKey(testDomain, k.peer, k.eth, now)
		if err != nil {
			t.Fatal(err)
		}
		return decodePayload(t, raw)
	}
	ra, rb := good(a), good(b)
	cases := []struct {
		name   string
		change func(r *chainKeyRecord)
		signer lcrypto.PrivKey
		want   error
	}{
		{"version", func(r *chainKeyRecord) { r.Version = 2 }, a.peer, ErrUnsupported},
		{"peer names b, a signs", func(r *chainKeyRecord) { r.Peer = []byte(b.id) }, a.peer, ErrSignerMismatch},
		{"chain id", func(r *chainKeyRecord) { r.ChainId = big.NewInt(1).Bytes() }, a.peer, ErrSignature},
		{"chain id leading zero", func(r *chainKeyRecord) { r.ChainId = append([]byte{0}, r.ChainId...) }, a.peer, ErrMalformed},
		{"contract", func(r *chainKeyRecord) { r.Contract = bytes.Repeat([]byte{0x22}, 20) }, a.peer, ErrSignature},
		{"contract length", func(r *chainKeyRecord) { r.Contract = r.Contract[:19] }, a.peer, ErrMalformed},
		{"address", func(r *chainKeyRecord) { r.Address = rb.Address }, a.peer, ErrSignature},
		{"created_ms", func(r *chainKeyRecord) { r.CreatedMs++ }, a.peer, ErrSignature},
		{"created_ms zero", func(r *chainKeyRecord) { r.CreatedMs = 0 }, a.peer, ErrMalformed},
		{"eth_sig flipped", func(r *chainKeyRecord) { r.EthSig[10] ^= 1 }, a.peer, ErrSignature},
		{"eth_sig short", func(r *chainKeyRecord) { r.EthSig = r.EthSig[:64] }, a.peer, ErrMalformed},
		{"b's eth_sig in a's record", func(r *chainKeyRecord) { r.EthSig = rb.EthSig }, a.peer, ErrSignature},
		{"b's address and eth_sig in a's record", func(r *chainKeyRecord) { r.Address, r.EthSig = rb.Address, rb.EthSig }, a.peer, ErrSignature},
		// Another peer claims a's funded address: a's statement names a, not b.
		{"b seals a's binding", func(r *chainKeyRecord) { r.Peer = []byte(b.id) }, b.peer, ErrSignature},
	}
	for _, tc := range cases {
		r := chainKeyRecord{proto.Clone(ra.ChainKey).(*pb.ChainKey)}
		tc.change(&r)
		raw, err := sealChainKeyRecord(&r, tc.signer)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := OpenChainKey(raw); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	raw, _ := sealChainKeyRecord(ra, a.peer)
	if _, err := OpenChainKey(raw); err != nil {
		t.Fatalf("untampered re-seal: %v", err)
	}
	// Bytes of the payload changed without re-sealing: the envelope's signature fails.
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 0x01
		if _, err := OpenChainKey(bad); err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
}

func decodePayload(t testing.TB, raw []byte) *chainKeyRecord {
	t.Helper()
	r := &chainKeyRecord{}
	if _, err := record.ConsumeTypedEnvelope(raw, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// FuzzOpenChainKey: no input panics OpenChainKey, and whatever it
// accepts re-opens to the same record.
func FuzzOpenChainKey(f *testing.F) {
	k := newKeyPair(f)
	raw, err := SealChainKey(testDomain, k.peer, k.eth, time.UnixMilli(1_790_000_000_000))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte{})
	f.Add(raw[:len(raw)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		ck, err := OpenChainKey(data)
		if err != nil {
			return
		}
		again, err := OpenChainKey(ck.Raw)
		if err != nil || again.Peer != ck.Peer || again.Address != ck.Address {
			t.Fatalf("accepted record does not re-open: %v", err)
		}
	})
}

// FuzzChainKeyPayload: the payload decoder neither panics nor accepts
// what it cannot write back field for field.
func FuzzChainKeyPayload(f *testing.F) {
	k := newKeyPair(f)
	raw, err := SealChainKey(testDomain, k.peer, k.eth, time.UnixMilli(1_790_000_000_000))
	if err != nil {
		f.Fatal(err)
	}
	p := decodePayload(f, raw)
	b, _ := p.MarshalRecord()
	f.Add(b)
	f.Add([]byte{0x08, 0x01, 0xfa, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &chainKeyRecord{}
		if err := r.UnmarshalRecord(data); err != nil {
			return
		}
		out, _ := r.MarshalRecord()
		r2 := &chainKeyRecord{}
		if err := r2.UnmarshalRecord(out); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		out2, _ := r2.MarshalRecord()
		if !bytes.Equal(out, out2) {
			t.Fatalf("not stable: %x then %x", out, out2)
		}
	})
}
