package chain

import (
	"crypto/ecdsa"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/crypto"
)

// The node keeps its payment key in a key file of go-ethereum's keystore
// format (market/chainpay: NewKeyFile, LoadKeyFile) and signs with the
// secp256k1 library libp2p links; the adapter sends transactions with
// go-ethereum's. ECDSA converts the one to the other.

// ECDSA is k as go-ethereum's key type.
func ECDSA(k *secp256k1.PrivateKey) *ecdsa.PrivateKey {
	raw := k.Serialize()
	defer clear(raw)
	key, err := crypto.ToECDSA(raw)
	if err != nil {
		panic("chain: a valid secp256k1 key did not convert: " + err.Error())
	}
	return key
}
