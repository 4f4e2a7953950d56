package chainpay

import (
	"bytes"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/chainpay/pb"
)

// TestChainKeyRoundTrip: a sealed record opens to the peer, domain,
// address and time it was made with.
func TestChainKeyRoundTrip(t *testing.T) {
	k := newKeyPair(t)
	now := time.UnixMilli(1_790_000_000_123)
	raw, err := SealChainKey(testDomain, k.peer, k.pay, now)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := OpenChainKey(raw)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if ck.Peer != k.id || ck.Address != k.addr || !ck.Created.Equal(now) || !ck.Domain.Equal(testDomain) {
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
	good := func(k keyPair) *pb.ChainKey {
		raw, err := SealChainKey(testDomain, k.peer, k.pay, now)
		if err != nil {
			t.Fatal(err)
		}
		return decodePayload(t, raw)
	}
	ra, rb := good(a), good(b)
	cases := []struct {
		name   string
		change func(r *pb.ChainKey)
		signer crypto.PrivKey
		want   error
	}{
		{"version", func(r *pb.ChainKey) { r.Version = 2 }, a.peer, ErrUnsupported},
		{"peer names b, a signs", func(r *pb.ChainKey) { r.Peer = []byte(b.id) }, a.peer, ErrSignerMismatch},
		{"chain id", func(r *pb.ChainKey) { r.ChainId = big.NewInt(1).Bytes() }, a.peer, ErrSignature},
		{"chain id leading zero", func(r *pb.ChainKey) { r.ChainId = append([]byte{0}, r.ChainId...) }, a.peer, ErrMalformed},
		{"chain id too long", func(r *pb.ChainKey) { r.ChainId = bytes.Repeat([]byte{1}, 33) }, a.peer, ErrMalformed},
		{"contract", func(r *pb.ChainKey) { r.Contract = bytes.Repeat([]byte{0x22}, 20) }, a.peer, ErrSignature},
		{"contract length", func(r *pb.ChainKey) { r.Contract = r.Contract[:19] }, a.peer, ErrMalformed},
		{"address", func(r *pb.ChainKey) { r.Address = rb.Address }, a.peer, ErrSignature},
		{"address length", func(r *pb.ChainKey) { r.Address = append(r.Address, 0) }, a.peer, ErrMalformed},
		{"created_ms", func(r *pb.ChainKey) { r.CreatedMs++ }, a.peer, ErrSignature},
		{"created_ms zero", func(r *pb.ChainKey) { r.CreatedMs = 0 }, a.peer, ErrMalformed},
		{"eth_sig flipped", func(r *pb.ChainKey) { r.EthSig[10] ^= 1 }, a.peer, ErrSignature},
		{"eth_sig short", func(r *pb.ChainKey) { r.EthSig = r.EthSig[:64] }, a.peer, ErrMalformed},
		{"b's eth_sig in a's record", func(r *pb.ChainKey) { r.EthSig = rb.EthSig }, a.peer, ErrSignature},
		{"b's address and eth_sig in a's record", func(r *pb.ChainKey) { r.Address, r.EthSig = rb.Address, rb.EthSig }, a.peer, ErrSignature},
		// Another peer claims a's funded address: a's statement names a, not b.
		{"b seals a's binding", func(r *pb.ChainKey) { r.Peer = []byte(b.id) }, b.peer, ErrSignature},
	}
	for _, tc := range cases {
		r := proto.Clone(ra).(*pb.ChainKey)
		tc.change(r)
		raw, err := SealChainKeyRecord(r, tc.signer)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := OpenChainKey(raw); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	raw, _ := SealChainKeyRecord(ra, a.peer)
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
	if _, err := OpenChainKey(make([]byte, MaxChainKeySize+1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized: %v", err)
	}
}

func decodePayload(t testing.TB, raw []byte) *pb.ChainKey {
	t.Helper()
	r := &chainKeyRecord{}
	if _, err := record.ConsumeTypedEnvelope(raw, r); err != nil {
		t.Fatal(err)
	}
	return r.ChainKey
}
