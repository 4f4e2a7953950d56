package chainpay

import (
	"math/big"
	"testing"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

type keyPair struct {
	peer crypto.PrivKey
	id   peer.ID
	pay  *secp256k1.PrivateKey
	addr Address
}

func newKeyPair(t testing.TB) keyPair {
	t.Helper()
	pk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(pk)
	k, err := secp256k1.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{pk, id, k, AddressOf(k.PubKey())}
}

func mustAddr(t testing.TB, s string) Address {
	t.Helper()
	a, err := ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var testDomain = Domain{ChainID: big.NewInt(8453), Contract: Address{0: 0x11, 19: 0x11}}
