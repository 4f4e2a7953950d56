package chainpay

import (
	"bytes"
	"testing"
	"time"
)

// FuzzOpenChainKey: no input panics OpenChainKey, and whatever it
// accepts re-opens to the same record.
func FuzzOpenChainKey(f *testing.F) {
	k := newKeyPair(f)
	raw, err := SealChainKey(testDomain, k.peer, k.pay, time.UnixMilli(1_790_000_000_000))
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
	raw, err := SealChainKey(testDomain, k.peer, k.pay, time.UnixMilli(1_790_000_000_000))
	if err != nil {
		f.Fatal(err)
	}
	b, _ := (&chainKeyRecord{decodePayload(f, raw)}).MarshalRecord()
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

// FuzzDecodeVoucherFrame: no input panics the decoder, and what it
// accepts encodes back to a frame that decodes the same.
func FuzzDecodeVoucherFrame(f *testing.F) {
	good, _ := EncodeVoucherFrame([]byte("envelope"), [SigSize]byte{64: 28})
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		v, sig, err := DecodeVoucherFrame(data)
		if err != nil {
			return
		}
		again, err := EncodeVoucherFrame(v, sig)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		v2, sig2, err := DecodeVoucherFrame(again)
		if err != nil || !bytes.Equal(v, v2) || sig != sig2 {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FuzzParseAddress: no input panics ParseAddress, and an accepted one
// prints to a form that parses to the same address.
func FuzzParseAddress(f *testing.F) {
	f.Add("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed")
	f.Add("0x")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		if b, err := ParseAddress(a.String()); err != nil || b != a {
			t.Fatalf("%q → %s: %v", s, a, err)
		}
	})
}

// FuzzRecover: no signature bytes panic Recover.
func FuzzRecover(f *testing.F) {
	k := newKeyPair(f)
	d := testDomain.Digest(goldenVoucher)
	sig := Sign(d, k.pay)
	f.Add(sig[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != SigSize {
			return
		}
		_, _ = Recover(d, [SigSize]byte(b))
	})
}

// FuzzDecodeRedeemable: no input panics the decoder, and what it accepts
// encodes back to the same deployment and chain voucher.
func FuzzDecodeRedeemable(f *testing.F) {
	k := newKeyPair(f)
	cv := goldenVoucher
	cv.Renter = k.addr
	cv, _ = SignVoucher(testDomain, k.pay, cv)
	good, _ := EncodeRedeemable(testDomain, cv)
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, cv, err := DecodeRedeemable(data)
		if err != nil {
			return
		}
		again, err := EncodeRedeemable(d, cv)
		if err != nil {
			t.Fatal(err)
		}
		d2, cv2, err := DecodeRedeemable(again)
		if err != nil || !d2.Equal(d) || cv2 != cv {
			t.Fatalf("round trip: %v", err)
		}
	})
}
