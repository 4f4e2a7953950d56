package chain

import (
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/gpumesh/gpumesh/money"
)

// TestDigestGoldenVector: the Go EIP-712 digest of chain vouchers equals
// the contract's hashVoucher, and the domain separator its
// DOMAIN_SEPARATOR; a fixed vector pins the digest for other
// implementations (docs/PROTOCOL.md §43 appendix).
func TestDigestGoldenVector(t *testing.T) {
	f := newFixture(t)
	for _, cv := range []ChainVoucher{
		{Renter: f.renter.addr, Supplier: f.supplier.addr, LeaseID: lease(7), Nonce: 1, CumMicros: 2500000, VoucherHash: [32]byte{1, 2, 3}},
		{Renter: common.HexToAddress("0xffffffffffffffffffffffffffffffffffffffff"), LeaseID: [32]byte{31: 0xff}, Nonce: ^uint64(0), CumMicros: ^uint64(0)},
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
	if got, want := common.Hash(out[0].([32]byte)), f.cfg.Domain.Separator(); got != want {
		t.Fatalf("DOMAIN_SEPARATOR %x, Go %x", got, want)
	}

	// The fixed vector (no chain): chain ID 1337, contract 0x11…11.
	d := Domain{ChainID: simChainID, Contract: common.HexToAddress("0x1111111111111111111111111111111111111111")}
	cv := ChainVoucher{
		Renter: common.HexToAddress("0x2222222222222222222222222222222222222222"), Supplier: common.HexToAddress("0x3333333333333333333333333333333333333333"),
		LeaseID: [32]byte{0: 0x44, 31: 0x44}, Nonce: 3, CumMicros: 2500000, VoucherHash: [32]byte{0: 0x55, 31: 0x55},
	}
	t.Logf("golden: separator %x digest %x", d.Separator(), d.Digest(cv))
	if got := d.Digest(cv).Hex(); got != goldenDigest {
		t.Fatalf("golden digest %s, want %s", got, goldenDigest)
	}
	// go-ethereum's own EIP-712 encoder agrees.
	if got := typedDigest(t, d, "Voucher", apitypes.Types{"Voucher": {
		{Name: "renter", Type: "address"}, {Name: "supplier", Type: "address"}, {Name: "leaseId", Type: "bytes32"},
		{Name: "nonce", Type: "uint64"}, {Name: "cumAmountMicros", Type: "uint64"}, {Name: "voucherHash", Type: "bytes32"},
	}}, apitypes.TypedDataMessage{
		"renter": cv.Renter.Hex(), "supplier": cv.Supplier.Hex(), "leaseId": cv.LeaseID[:],
		"nonce": "3", "cumAmountMicros": "2500000", "voucherHash": cv.VoucherHash[:],
	}); got != d.Digest(cv) {
		t.Fatalf("apitypes digest %x, Digest %x", got, d.Digest(cv))
	}
}

// TestChainKeyDigest: the ChainKey statement's digest agrees with
// go-ethereum's EIP-712 encoder.
func TestChainKeyDigest(t *testing.T) {
	d := Domain{ChainID: simChainID, Contract: common.HexToAddress("0x1111111111111111111111111111111111111111")}
	peerID := []byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20, 0xaa}
	acct := common.HexToAddress("0x2222222222222222222222222222222222222222")
	got := typedDigest(t, d, "ChainKey", apitypes.Types{"ChainKey": {
		{Name: "peer", Type: "bytes"}, {Name: "account", Type: "address"}, {Name: "createdMs", Type: "uint64"},
	}}, apitypes.TypedDataMessage{"peer": peerID, "account": acct.Hex(), "createdMs": "1790000000000"})
	if want := d.ChainKeyDigest(peerID, acct, 1_790_000_000_000); got != want {
		t.Fatalf("apitypes digest %x, ChainKeyDigest %x", got, want)
	}
	t.Logf("golden ChainKey digest %x", got)
}

func typedDigest(t *testing.T, d Domain, primary string, types apitypes.Types, msg apitypes.TypedDataMessage) common.Hash {
	t.Helper()
	types["EIP712Domain"] = []apitypes.Type{
		{Name: "name", Type: "string"}, {Name: "version", Type: "string"},
		{Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"},
	}
	h, _, err := apitypes.TypedDataAndHash(apitypes.TypedData{
		Types: types, PrimaryType: primary, Message: msg,
		Domain: apitypes.TypedDataDomain{Name: DomainName, Version: DomainVersion,
			ChainId: (*math.HexOrDecimal256)(d.ChainID), VerifyingContract: d.Contract.Hex()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return common.BytesToHash(h)
}

const goldenDigest = "0x2a39932be0dd8406b2c7b904ddb5bad6cb69079e30d0ef0ca30c269d1c03c510"

// TestCheckVoucher: the chain voucher SignVoucher makes passes
// CheckVoucher; one whose renter, supplier, lease, nonce, amount or
// voucher hash differs from the gpumesh voucher, or that another key
// signed, is refused with its named error.
func TestCheckVoucher(t *testing.T) {
	f := newFixture(t)
	v, cv := f.voucher(lease(1), 2, 2*money.Unit)
	d := f.cfg.Domain
	if err := CheckVoucher(d, f.renter.addr, f.supplier.addr, v, cv); err != nil {
		t.Fatalf("good chain voucher: %v", err)
	}
	forger, _ := crypto.GenerateKey()
	forged := cv
	forged.Sig, _ = sign(d.Digest(cv), forger)
	highS := cv
	s := new(big.Int).SetBytes(cv.Sig[32:64])
	s.Sub(crypto.S256().Params().N, s)
	copy(highS.Sig[32:64], common.LeftPadBytes(s.Bytes(), 32))
	highS.Sig[64] ^= 1 // 27 <-> 28: the same signer, malleated
	for _, tc := range []struct {
		name   string
		change func(*ChainVoucher)
		want   error
	}{
		{"renter", func(c *ChainVoucher) { c.Renter = f.other.addr }, ErrVoucherMismatch},
		{"supplier", func(c *ChainVoucher) { c.Supplier = f.other.addr }, ErrVoucherMismatch},
		{"lease", func(c *ChainVoucher) { c.LeaseID[0]++ }, ErrVoucherMismatch},
		{"nonce", func(c *ChainVoucher) { c.Nonce++ }, ErrVoucherMismatch},
		{"amount", func(c *ChainVoucher) { c.CumMicros++ }, ErrVoucherMismatch},
		{"voucher hash", func(c *ChainVoucher) { c.VoucherHash[5] ^= 1 }, ErrVoucherMismatch},
		{"forged signer", func(c *ChainVoucher) { *c = forged }, ErrSignature},
		{"high s", func(c *ChainVoucher) { *c = highS }, ErrSignature},
		{"bad v", func(c *ChainVoucher) { c.Sig[64] = 1 }, ErrSignature},
	} {
		c := cv
		tc.change(&c)
		if err := CheckVoucher(d, f.renter.addr, f.supplier.addr, v, c); !errors.Is(err, tc.want) {
			t.Errorf("%s changed: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// Another deployment's domain: the signature no longer recovers the renter.
	other := Domain{ChainID: d.ChainID, Contract: f.cfg.Token}
	if err := CheckVoucher(other, f.renter.addr, f.supplier.addr, v, cv); !errors.Is(err, ErrSignature) {
		t.Errorf("another contract: got %v, want ErrSignature", err)
	}
}
