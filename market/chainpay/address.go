package chainpay

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"golang.org/x/crypto/sha3"
)

// Address is a 20-byte EVM account or contract address.
type Address [20]byte

// Keccak256 is the Keccak-256 hash of the concatenated inputs (Ethereum's
// hash, not SHA3-256).
func Keccak256(data ...[]byte) [32]byte {
	h := sha3.NewLegacyKeccak256()
	for _, b := range data {
		h.Write(b)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// AddressOf is the address of a secp256k1 public key: the last 20 bytes
// of the Keccak-256 of its uncompressed X ‖ Y.
func AddressOf(pub *secp256k1.PublicKey) Address {
	h := Keccak256(pub.SerializeUncompressed()[1:])
	return Address(h[12:])
}

// ParseAddress reads a 0x-prefixed, 40-digit hex address. A mixed-case
// address must carry a valid EIP-55 checksum; an all-lower or all-upper
// one is taken as it is.
func ParseAddress(s string) (Address, error) {
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok || len(digits) != 40 {
		return Address{}, fmt.Errorf("%w: address %q: want 0x and 40 hex digits", ErrMalformed, s)
	}
	var a Address
	if _, err := hex.Decode(a[:], []byte(digits)); err != nil {
		return Address{}, fmt.Errorf("%w: address %q: %v", ErrMalformed, s, err)
	}
	if digits != strings.ToLower(digits) && digits != strings.ToUpper(digits) && a.String() != s {
		return Address{}, fmt.Errorf("%w: address %q: bad EIP-55 checksum (want %s)", ErrMalformed, s, a)
	}
	return a, nil
}

// String is the EIP-55 checksummed form, 0x and 40 hex digits.
func (a Address) String() string {
	lower := hex.EncodeToString(a[:])
	h := Keccak256([]byte(lower))
	out := []byte(lower)
	for i, c := range out {
		if c >= 'a' && (h[i/2]>>(4*(1-uint(i%2))))&0xf >= 8 {
			out[i] = c - 'a' + 'A'
		}
	}
	return "0x" + string(out)
}

// IsZero reports whether a is the zero address.
func (a Address) IsZero() bool { return a == Address{} }

// MarshalText writes the checksummed form (for JSON and config files).
func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads what ParseAddress reads.
func (a *Address) UnmarshalText(b []byte) error {
	p, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}
