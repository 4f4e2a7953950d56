package chain

import (
	"crypto/ecdsa"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/gpumesh/gpumesh/market/settle"
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
)

var (
	domainTypeHash   = crypto.Keccak256([]byte(domainTypeString))
	voucherTypeHash  = crypto.Keccak256([]byte(VoucherTypeString))
	chainKeyTypeHash = crypto.Keccak256([]byte(ChainKeyTypeString))
	maxUint256       = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
)

// Domain is an EIP-712 domain of gpumesh: one deployment of the
// PaymentChannel contract on one chain.
type Domain struct {
	ChainID  *big.Int
	Contract common.Address
}

func (d Domain) check() error {
	if d.ChainID == nil || d.ChainID.Sign() <= 0 || d.ChainID.Cmp(maxUint256) > 0 {
		return fmt.Errorf("%w: chain id %v", ErrMalformed, d.ChainID)
	}
	return nil
}

// Separator is the EIP-712 domain separator (the contract's
// DOMAIN_SEPARATOR).
func (d Domain) Separator() common.Hash {
	return crypto.Keccak256Hash(domainTypeHash,
		crypto.Keccak256([]byte(DomainName)), crypto.Keccak256([]byte(DomainVersion)),
		common.LeftPadBytes(d.ChainID.Bytes(), 32), common.LeftPadBytes(d.Contract[:], 32))
}

func (d Domain) digest(structHash []byte) common.Hash {
	sep := d.Separator()
	return crypto.Keccak256Hash([]byte{0x19, 0x01}, sep[:], structHash)
}

// ChainVoucher is a renter's EIP-712 voucher for the contract: the lease
// ID, nonce and cumulative amount of a gpumesh voucher, and the SHA-256
// of its envelope.
type ChainVoucher struct {
	Renter      common.Address
	Supplier    common.Address
	LeaseID     [32]byte
	Nonce       uint64
	CumMicros   uint64
	VoucherHash [32]byte
	Sig         [65]byte // r ‖ s ‖ v, v 27 or 28, s in the lower half of the curve order
}

// Digest is the EIP-712 hash the renter signs (the contract's
// hashVoucher).
func (d Domain) Digest(cv ChainVoucher) common.Hash {
	return d.digest(crypto.Keccak256(voucherTypeHash,
		common.LeftPadBytes(cv.Renter[:], 32), common.LeftPadBytes(cv.Supplier[:], 32),
		cv.LeaseID[:], u64Word(cv.Nonce), u64Word(cv.CumMicros), cv.VoucherHash[:]))
}

func u64Word(n uint64) []byte { return common.LeftPadBytes(new(big.Int).SetUint64(n).Bytes(), 32) }

// SignVoucher makes the chain voucher for v, a gpumesh voucher the renter
// whose payment key is key has signed, payable to supplier.
func SignVoucher(d Domain, key *ecdsa.PrivateKey, supplier common.Address, v *settle.Voucher) (ChainVoucher, error) {
	if err := d.check(); err != nil {
		return ChainVoucher{}, err
	}
	if v.CumAmountMicros < 0 {
		return ChainVoucher{}, fmt.Errorf("%w: cum_amount_micros %d", ErrMalformed, v.CumAmountMicros)
	}
	cv := ChainVoucher{
		Renter: crypto.PubkeyToAddress(key.PublicKey), Supplier: supplier,
		LeaseID: v.LeaseID, Nonce: v.Nonce, CumMicros: uint64(v.CumAmountMicros), VoucherHash: v.Hash,
	}
	sig, err := sign(d.Digest(cv), key)
	if err != nil {
		return ChainVoucher{}, err
	}
	cv.Sig = sig
	return cv, nil
}

// CheckVoucher checks offline that cv is the chain voucher of v, a
// validated gpumesh voucher, from renter to supplier: the same lease,
// nonce, amount and envelope hash (ErrVoucherMismatch), signed by renter
// (ErrSignature). The cheap comparisons run first.
func CheckVoucher(d Domain, renter, supplier common.Address, v *settle.Voucher, cv ChainVoucher) error {
	switch {
	case d.check() != nil:
		return d.check()
	case cv.Renter != renter:
		return fmt.Errorf("%w: renter %s, want %s", ErrVoucherMismatch, cv.Renter, renter)
	case cv.Supplier != supplier:
		return fmt.Errorf("%w: supplier %s, want %s", ErrVoucherMismatch, cv.Supplier, supplier)
	case cv.LeaseID != [32]byte(v.LeaseID):
		return fmt.Errorf("%w: lease %x, want %x", ErrVoucherMismatch, cv.LeaseID, v.LeaseID)
	case cv.Nonce != v.Nonce:
		return fmt.Errorf("%w: nonce %d, want %d", ErrVoucherMismatch, cv.Nonce, v.Nonce)
	case v.CumAmountMicros < 0 || cv.CumMicros != uint64(v.CumAmountMicros):
		return fmt.Errorf("%w: amount %d micros, want %d", ErrVoucherMismatch, cv.CumMicros, v.CumAmountMicros)
	case cv.VoucherHash != v.Hash:
		return fmt.Errorf("%w: voucher hash %x, want %x", ErrVoucherMismatch, cv.VoucherHash, v.Hash)
	}
	signer, err := recoverAddr(d.Digest(cv), cv.Sig)
	if err != nil {
		return err
	}
	if signer != renter {
		return fmt.Errorf("%w: signed by %s, want the renter %s", ErrSignature, signer, renter)
	}
	return nil
}

// sign signs an EIP-712 digest in the contract's form: r ‖ s ‖ v with v
// 27 or 28 (go-ethereum's crypto.Sign gives a low s).
func sign(digest common.Hash, key *ecdsa.PrivateKey) ([65]byte, error) {
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		return [65]byte{}, fmt.Errorf("sign: %w", err)
	}
	sig[64] += 27
	return [65]byte(sig), nil
}

// recoverAddr is ecrecover as the contract does it, refusing a high s.
func recoverAddr(digest common.Hash, sig [65]byte) (common.Address, error) {
	v := sig[64]
	if v != 27 && v != 28 {
		return common.Address{}, fmt.Errorf("%w: v %d", ErrSignature, v)
	}
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:64])
	if !crypto.ValidateSignatureValues(v-27, r, s, true) {
		return common.Address{}, fmt.Errorf("%w: r or s out of range", ErrSignature)
	}
	raw := sig
	raw[64] = v - 27
	pub, err := crypto.SigToPub(digest[:], raw[:])
	if err != nil {
		return common.Address{}, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	return crypto.PubkeyToAddress(*pub), nil
}
