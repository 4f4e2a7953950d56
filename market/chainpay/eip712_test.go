package chainpay

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"testing"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
)

// goldenDomain and goldenVoucher are docs/PROTOCOL.md §43.5's vectors;
// the chain module checks the same digests against the contract's
// hashVoucher and go-ethereum's EIP-712 encoder.
var (
	goldenDomain  = Domain{ChainID: big.NewInt(1337), Contract: Address{0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11}}
	goldenVoucher = ChainVoucher{
		Renter: fill(0x22), Supplier: fill(0x33),
		LeaseID: [32]byte{0: 0x44, 31: 0x44}, Nonce: 3, CumMicros: 2500000, VoucherHash: [32]byte{0: 0x55, 31: 0x55},
	}
)

func fill(b byte) (a Address) {
	for i := range a {
		a[i] = b
	}
	return a
}

// TestGoldenVectors: the domain separator, a chain voucher's digest and a
// ChainKey statement's digest are PROTOCOL.md §43.5's bytes.
func TestGoldenVectors(t *testing.T) {
	sep := goldenDomain.Separator()
	for name, c := range map[string]struct {
		got  [32]byte
		want string
	}{
		"separator": {sep, "267f89b65637d47f4fd299920edd1fe53781156289827f66ec7fa898bebca504"},
		"voucher":   {goldenDomain.Digest(goldenVoucher), "2a39932be0dd8406b2c7b904ddb5bad6cb69079e30d0ef0ca30c269d1c03c510"},
		"chainkey": {goldenDomain.ChainKeyDigest([]byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20, 0xaa}, fill(0x22), 1790000000000),
			"41b35c970a6e1822b4ca6a82f5bbb81cfc947a1166087022f17a7f2d5e47ba33"},
	} {
		if got := hex.EncodeToString(c.got[:]); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
}

// TestSignVoucher: a signed chain voucher checks; changing any field, or
// another key's signature, fails with ErrSignature; a key that is not the
// voucher's renter does not sign.
func TestSignVoucher(t *testing.T) {
	r, s := newKeyPair(t), newKeyPair(t)
	cv := goldenVoucher
	cv.Renter, cv.Supplier = r.addr, s.addr
	signed, err := SignVoucher(testDomain, r.pay, cv)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckVoucher(testDomain, signed); err != nil {
		t.Fatalf("check: %v", err)
	}
	other := Domain{ChainID: big.NewInt(1), Contract: testDomain.Contract}
	changes := map[string]func(c *ChainVoucher){
		"renter":   func(c *ChainVoucher) { c.Renter = s.addr },
		"supplier": func(c *ChainVoucher) { c.Supplier = r.addr },
		"lease":    func(c *ChainVoucher) { c.LeaseID[5]++ },
		"nonce":    func(c *ChainVoucher) { c.Nonce++ },
		"amount":   func(c *ChainVoucher) { c.CumMicros++ },
		"hash":     func(c *ChainVoucher) { c.VoucherHash[0]++ },
		"sig":      func(c *ChainVoucher) { c.Sig[7] ^= 1 },
	}
	for name, change := range changes {
		c := signed
		change(&c)
		if err := CheckVoucher(testDomain, c); !errors.Is(err, ErrSignature) {
			t.Errorf("%s changed: %v, want ErrSignature", name, err)
		}
	}
	if err := CheckVoucher(other, signed); !errors.Is(err, ErrSignature) {
		t.Errorf("other chain: %v, want ErrSignature", err)
	}
	if _, err := SignVoucher(testDomain, s.pay, cv); !errors.Is(err, ErrMalformed) {
		t.Errorf("signed with the supplier's key: %v", err)
	}
	if _, err := SignVoucher(Domain{ChainID: big.NewInt(0)}, r.pay, cv); !errors.Is(err, ErrMalformed) {
		t.Errorf("chain id 0: %v", err)
	}
}

// TestRecoverRefusesMalleated: the other valid signature of the same
// digest (s' = n − s, v flipped), v outside 27/28, s zero and s above
// the order are refused as the contract refuses them.
func TestRecoverRefusesMalleated(t *testing.T) {
	k := newKeyPair(t)
	d := testDomain.Digest(goldenVoucher)
	sig := Sign(d, k.pay)
	if got, err := Recover(d, sig); err != nil || got != k.addr {
		t.Fatalf("recover: %s %v, want %s", got, err, k.addr)
	}
	var s secp256k1.ModNScalar
	s.SetByteSlice(sig[32:64])
	s.Negate()
	high := sig
	sb := s.Bytes()
	copy(high[32:64], sb[:])
	high[64] ^= 1 // 27 ↔ 28
	bad := map[string][SigSize]byte{"high s": high}
	for _, v := range []byte{0, 1, 26, 29, 31} {
		b := sig
		b[64] = v
		bad[fmt.Sprint("v ", v)] = b
	}
	zero := sig
	clear(zero[32:64])
	bad["s zero"] = zero
	over := sig
	for i := 32; i < 64; i++ {
		over[i] = 0xff
	}
	bad["s over"] = over
	for name, b := range bad {
		if _, err := Recover(d, b); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
}

// TestAddressText: EIP-55's own examples print and parse; a wrong
// checksum, a missing 0x and a short address are refused.
func TestAddressText(t *testing.T) {
	for _, s := range []string{
		"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
		"0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
		"0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
		"0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
	} {
		a := mustAddr(t, s)
		if a.String() != s {
			t.Errorf("%s prints %s", s, a)
		}
		if l, err := ParseAddress("0x" + hex.EncodeToString(a[:])); err != nil || l != a {
			t.Errorf("lower case of %s: %v", s, err)
		}
	}
	for _, s := range []string{"0x5aaeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "0x5aAeb6", "0xzzAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"} {
		if _, err := ParseAddress(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", s, err)
		}
	}
}

// TestVoucherFrame: a frame decodes to what was encoded; an empty
// voucher, a short signature, garbage and an oversized frame are refused.
func TestVoucherFrame(t *testing.T) {
	sig := [SigSize]byte{1, 2, 3, 64: 27}
	b, err := EncodeVoucherFrame([]byte("envelope"), sig)
	if err != nil {
		t.Fatal(err)
	}
	v, s, err := DecodeVoucherFrame(b)
	if err != nil || string(v) != "envelope" || s != sig {
		t.Fatalf("decode: %q %x %v", v, s, err)
	}
	for name, bad := range map[string][]byte{
		"empty":     {},
		"short sig": {0x0a, 0x01, 'x', 0x12, 0x02, 1, 2},
		"garbage":   {0xff, 0xff, 0xff},
		"oversized": make([]byte, MaxVoucherFrameSize+1),
	} {
		if _, _, err := DecodeVoucherFrame(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestRedeemable: a kept chain voucher decodes to the deployment and
// voucher it was made from; a forged signature or a field cut short is
// refused.
func TestRedeemable(t *testing.T) {
	k := newKeyPair(t)
	cv := goldenVoucher
	cv.Renter = k.addr
	cv, err := SignVoucher(testDomain, k.pay, cv)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeRedeemable(testDomain, cv)
	if err != nil {
		t.Fatal(err)
	}
	d, got, err := DecodeRedeemable(b)
	if err != nil || !d.Equal(testDomain) || got != cv {
		t.Fatalf("decode: %+v %v", got, err)
	}
	forged := cv
	forged.CumMicros++
	if b, _ := EncodeRedeemable(testDomain, forged); b != nil {
		if _, _, err := DecodeRedeemable(b); !errors.Is(err, ErrSignature) {
			t.Errorf("raised amount: %v", err)
		}
	}
	if _, _, err := DecodeRedeemable(b[:len(b)-3]); !errors.Is(err, ErrMalformed) {
		t.Errorf("cut short: %v", err)
	}
}
