package chain

import (
	"bytes"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
	"github.com/google/uuid"

	"github.com/gpumesh/gpumesh/market/chainpay"
)

// The node signs and checks with market/chainpay (decred's secp256k1,
// x/crypto's Keccak): these tests hold it to the contract and to
// go-ethereum byte for byte.

// TestDigestGoldenVector: chainpay's EIP-712 digest of chain vouchers
// equals the contract's hashVoucher, and the domain separator its
// DOMAIN_SEPARATOR; the fixed vector of docs/PROTOCOL.md §43.5 is also
// go-ethereum's EIP-712 encoder's.
func TestDigestGoldenVector(t *testing.T) {
	f := newFixture(t)
	for _, cv := range []chainpay.ChainVoucher{
		{Renter: f.renter.addr, Supplier: f.supplier.addr, LeaseID: lease(7), Nonce: 1, CumMicros: 2500000, VoucherHash: [32]byte{1, 2, 3}},
		{Renter: addr("0xffffffffffffffffffffffffffffffffffffffff"), LeaseID: [32]byte{31: 0xff}, Nonce: ^uint64(0), CumMicros: ^uint64(0)},
	} {
		got, err := f.renter.a.HashVoucher(f.ctx, cv)
		if err != nil {
			t.Fatal(err)
		}
		if want := f.cfg.Domain.Digest(cv); got != want {
			t.Fatalf("contract hashVoucher %x, Go digest %x", got, want)
		}
	}
	var out []any
	if err := f.renter.a.contract.Call(nil, &out, "DOMAIN_SEPARATOR"); err != nil {
		t.Fatal(err)
	}
	if got, want := out[0].([32]byte), f.cfg.Domain.Separator(); got != want {
		t.Fatalf("DOMAIN_SEPARATOR %x, Go %x", got, want)
	}

	// The fixed vector (no chain): chain ID 1337, contract 0x11…11.
	d := chainpay.Domain{ChainID: simChainID, Contract: addr("0x1111111111111111111111111111111111111111")}
	cv := chainpay.ChainVoucher{
		Renter: addr("0x2222222222222222222222222222222222222222"), Supplier: addr("0x3333333333333333333333333333333333333333"),
		LeaseID: [32]byte{0: 0x44, 31: 0x44}, Nonce: 3, CumMicros: 2500000, VoucherHash: [32]byte{0: 0x55, 31: 0x55},
	}
	if got := common.Hash(d.Digest(cv)).Hex(); got != goldenDigest {
		t.Fatalf("golden digest %s, want %s", got, goldenDigest)
	}
	if got := typedDigest(t, d, "Voucher", apitypes.Types{"Voucher": {
		{Name: "renter", Type: "address"}, {Name: "supplier", Type: "address"}, {Name: "leaseId", Type: "bytes32"},
		{Name: "nonce", Type: "uint64"}, {Name: "cumAmountMicros", Type: "uint64"}, {Name: "voucherHash", Type: "bytes32"},
	}}, apitypes.TypedDataMessage{
		"renter": cv.Renter.String(), "supplier": cv.Supplier.String(), "leaseId": cv.LeaseID[:],
		"nonce": "3", "cumAmountMicros": "2500000", "voucherHash": cv.VoucherHash[:],
	}); got != d.Digest(cv) {
		t.Fatalf("apitypes digest %x, Digest %x", got, d.Digest(cv))
	}
}

// TestChainKeyDigest: the ChainKey statement's digest agrees with
// go-ethereum's EIP-712 encoder.
func TestChainKeyDigest(t *testing.T) {
	d := chainpay.Domain{ChainID: simChainID, Contract: addr("0x1111111111111111111111111111111111111111")}
	peerID := []byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20, 0xaa}
	acct := addr("0x2222222222222222222222222222222222222222")
	got := typedDigest(t, d, "ChainKey", apitypes.Types{"ChainKey": {
		{Name: "peer", Type: "bytes"}, {Name: "account", Type: "address"}, {Name: "createdMs", Type: "uint64"},
	}}, apitypes.TypedDataMessage{"peer": peerID, "account": acct.String(), "createdMs": "1790000000000"})
	if want := d.ChainKeyDigest(peerID, acct, 1_790_000_000_000); got != want {
		t.Fatalf("apitypes digest %x, ChainKeyDigest %x", got, want)
	}
}

// TestSignaturesMatchGoEthereum: chainpay's signature of a digest is
// go-ethereum's crypto.Sign byte for byte (both RFC 6979, low s), its
// address is go-ethereum's, and each recovers the other's.
func TestSignaturesMatchGoEthereum(t *testing.T) {
	for range 20 {
		k, err := secp256k1.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		ek := ECDSA(k)
		if got, want := chainpay.AddressOf(k.PubKey()), crypto.PubkeyToAddress(ek.PublicKey); common.Address(got) != want {
			t.Fatalf("address %s, go-ethereum %s", got, want)
		}
		digest := crypto.Keccak256Hash(k.Serialize())
		ours := chainpay.Sign(digest, k)
		theirs, err := crypto.Sign(digest[:], ek)
		if err != nil {
			t.Fatal(err)
		}
		theirs[64] += 27
		if !bytes.Equal(ours[:], theirs) {
			t.Fatalf("signature %x, go-ethereum %x", ours, theirs)
		}
		if a, err := chainpay.Recover(digest, ours); err != nil || common.Address(a) != crypto.PubkeyToAddress(ek.PublicKey) {
			t.Fatalf("recover: %s %v", a, err)
		}
	}
}

// TestKeyFilesInterchange: go-ethereum's keystore decrypts a key file
// chainpay wrote, and chainpay one go-ethereum wrote; a wrong passphrase
// fails both ways.
func TestKeyFilesInterchange(t *testing.T) {
	dir := t.TempDir()
	pass := []byte("pass phrase")
	ours := filepath.Join(dir, "ours.json")
	k, err := chainpay.NewKeyFile(ours, pass, chainpay.LightScryptN, chainpay.LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	blob, _ := os.ReadFile(ours)
	gk, err := keystore.DecryptKey(blob, string(pass))
	if err != nil || !bytes.Equal(crypto.FromECDSA(gk.PrivateKey), k.Serialize()) {
		t.Fatalf("go-ethereum reading chainpay's file: %v", err)
	}
	if _, err := keystore.DecryptKey(blob, "wrong"); err == nil {
		t.Fatal("go-ethereum took a wrong passphrase")
	}

	ek, _ := crypto.GenerateKey()
	theirs, err := keystore.EncryptKey(&keystore.Key{Id: uuid.New(), Address: crypto.PubkeyToAddress(ek.PublicKey), PrivateKey: ek},
		string(pass), keystore.LightScryptN, keystore.LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	got, err := chainpay.DecryptKey(theirs, pass)
	if err != nil || !bytes.Equal(got.Serialize(), crypto.FromECDSA(ek)) {
		t.Fatalf("chainpay reading go-ethereum's file: %v", err)
	}
	if _, err := chainpay.DecryptKey(theirs, []byte("wrong")); !errors.Is(err, chainpay.ErrSignature) {
		t.Fatalf("wrong passphrase: %v", err)
	}
}

func typedDigest(t *testing.T, d chainpay.Domain, primary string, types apitypes.Types, msg apitypes.TypedDataMessage) [32]byte {
	t.Helper()
	types["EIP712Domain"] = []apitypes.Type{
		{Name: "name", Type: "string"}, {Name: "version", Type: "string"},
		{Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"},
	}
	h, _, err := apitypes.TypedDataAndHash(apitypes.TypedData{
		Types: types, PrimaryType: primary, Message: msg,
		Domain: apitypes.TypedDataDomain{Name: chainpay.DomainName, Version: chainpay.DomainVersion,
			ChainId: (*math.HexOrDecimal256)(new(big.Int).Set(d.ChainID)), VerifyingContract: d.Contract.String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h)
}

func addr(s string) chainpay.Address { return chainpay.Address(common.HexToAddress(s)) }

const goldenDigest = "0x2a39932be0dd8406b2c7b904ddb5bad6cb69079e30d0ef0ca30c269d1c03c510"
