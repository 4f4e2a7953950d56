package chainpay

import (
	"encoding/binary"
	"fmt"
	"math/big"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/decred/dcrd/dcrec/secp256k1/v4/ecdsa"
)

// EIP-712 names and type strings; a change is a wire change (a new
// DomainVersion).
const (
	DomainName    = "gpumesh"
	DomainVersion = "1"
	// VoucherTypeString is the EIP-712 type of a chain voucher.
	VoucherTypeString = "Voucher(address renter,address supplier,bytes32 leaseId,uint64 nonce,uint64 cumAmountMicros,bytes32 voucherHash)"
	// ChainKeyTypeString is the EIP-712 type the payment key signs in a
	// ChainKey record.
	ChainKeyTypeString = "ChainKey(bytes peer,address account,uint64 createdMs)"
	domainTypeString   = "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
	// SigSize is the size of a payment-key signature: r ‖ s ‖ v.
	SigSize = 65
)

var (
	domainTypeHash   = Keccak256([]byte(domainTypeString))
	voucherTypeHash  = Keccak256([]byte(VoucherTypeString))
	chainKeyTypeHash = Keccak256([]byte(ChainKeyTypeString))
	nameHash         = Keccak256([]byte(DomainName))
	versionHash      = Keccak256([]byte(DomainVersion))
	maxUint256       = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
)

// Domain is an EIP-712 domain of gpumesh: one deployment of the
// PaymentChannel contract on one chain.
type Domain struct {
	ChainID  *big.Int
	Contract Address
}

// Check refuses a chain ID that is not in 1 … 2²⁵⁶−1.
func (d Domain) Check() error {
	if d.ChainID == nil || d.ChainID.Sign() <= 0 || d.ChainID.Cmp(maxUint256) > 0 {
		return fmt.Errorf("%w: chain id %v", ErrMalformed, d.ChainID)
	}
	return nil
}

// Equal reports whether d and o name the same deployment.
func (d Domain) Equal(o Domain) bool {
	return d.Contract == o.Contract && d.ChainID != nil && o.ChainID != nil && d.ChainID.Cmp(o.ChainID) == 0
}

// Separator is the EIP-712 domain separator (the contract's
// DOMAIN_SEPARATOR).
func (d Domain) Separator() [32]byte {
	var id [32]byte
	d.ChainID.FillBytes(id[:])
	return Keccak256(domainTypeHash[:], nameHash[:], versionHash[:], id[:], addrWord(d.Contract))
}

func (d Domain) digest(structHash [32]byte) [32]byte {
	sep := d.Separator()
	return Keccak256([]byte{0x19, 0x01}, sep[:], structHash[:])
}

// ChainVoucher is a renter's EIP-712 voucher for the contract: the lease
// ID, nonce and cumulative amount of a gpumesh voucher, and the SHA-256
// of its envelope.
type ChainVoucher struct {
	Renter      Address
	Supplier    Address
	LeaseID     [32]byte
	Nonce       uint64
	CumMicros   uint64
	VoucherHash [32]byte
	Sig         [SigSize]byte // r ‖ s ‖ v, v 27 or 28, s in the lower half of the curve order
}

// Digest is the EIP-712 hash the renter signs (the contract's
// hashVoucher).
func (d Domain) Digest(cv ChainVoucher) [32]byte {
	return d.digest(Keccak256(voucherTypeHash[:], addrWord(cv.Renter), addrWord(cv.Supplier),
		cv.LeaseID[:], u64Word(cv.Nonce), u64Word(cv.CumMicros), cv.VoucherHash[:]))
}

// ChainKeyDigest is the EIP-712 hash the payment key of account signs to
// name peer (binary peer ID) in a ChainKey record created at createdMs.
func (d Domain) ChainKeyDigest(peerID []byte, account Address, createdMs uint64) [32]byte {
	ph := Keccak256(peerID)
	return d.digest(Keccak256(chainKeyTypeHash[:], ph[:], addrWord(account), u64Word(createdMs)))
}

func addrWord(a Address) []byte {
	var w [32]byte
	copy(w[12:], a[:])
	return w[:]
}

func u64Word(n uint64) []byte {
	var w [32]byte
	binary.BigEndian.PutUint64(w[24:], n)
	return w[:]
}

// SignVoucher signs cv's digest on d with key, the renter's payment key,
// and returns cv with Sig set. cv.Renter must be key's address.
func SignVoucher(d Domain, key *secp256k1.PrivateKey, cv ChainVoucher) (ChainVoucher, error) {
	if err := d.Check(); err != nil {
		return ChainVoucher{}, err
	}
	if a := AddressOf(key.PubKey()); a != cv.Renter {
		return ChainVoucher{}, fmt.Errorf("%w: the key's address %s is not the voucher's renter %s", ErrMalformed, a, cv.Renter)
	}
	cv.Sig = Sign(d.Digest(cv), key)
	return cv, nil
}

// CheckVoucher checks that cv.Sig is cv.Renter's signature of cv on d.
// The other fields are the caller's: take them from a voucher it has
// validated and the two parties' ChainKey records.
func CheckVoucher(d Domain, cv ChainVoucher) error {
	if err := d.Check(); err != nil {
		return err
	}
	signer, err := Recover(d.Digest(cv), cv.Sig)
	if err != nil {
		return err
	}
	if signer != cv.Renter {
		return fmt.Errorf("%w: signed by %s, want the renter %s", ErrSignature, signer, cv.Renter)
	}
	return nil
}

// Sign signs a digest in the contract's form: r ‖ s ‖ v with v 27 or 28
// and a low s (RFC 6979, deterministic).
func Sign(digest [32]byte, key *secp256k1.PrivateKey) [SigSize]byte {
	c := ecdsa.SignCompact(key, digest[:], false) // v ‖ r ‖ s, v = 27 + recovery id
	var sig [SigSize]byte
	copy(sig[:64], c[1:])
	sig[64] = c[0]
	return sig
}

// Recover is ecrecover as the contract does it: v must be 27 or 28, r
// and s in range and s at most half the curve order.
func Recover(digest [32]byte, sig [SigSize]byte) (Address, error) {
	v := sig[64]
	if v != 27 && v != 28 {
		return Address{}, fmt.Errorf("%w: v %d", ErrSignature, v)
	}
	var s secp256k1.ModNScalar
	if overflow := s.SetByteSlice(sig[32:64]); overflow || s.IsZero() || s.IsOverHalfOrder() {
		return Address{}, fmt.Errorf("%w: s out of range (zero, or above half the curve order)", ErrSignature)
	}
	var c [SigSize]byte
	c[0] = v
	copy(c[1:], sig[:64])
	pub, _, err := ecdsa.RecoverCompact(c[:], digest[:])
	if err != nil {
		return Address{}, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	return AddressOf(pub), nil
}
