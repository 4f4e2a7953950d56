package chainpay

import (
	"fmt"
	"math/big"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/chainpay/pb"
)

// MaxRedeemableSize bounds an encoded Redeemable.
const MaxRedeemableSize = 512

// EncodeRedeemable writes a signed chain voucher of deployment d as a
// supplier keeps it for its redeemer.
func EncodeRedeemable(d Domain, cv ChainVoucher) ([]byte, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(&pb.Redeemable{
		ChainId: d.ChainID.Bytes(), Contract: d.Contract[:], Renter: cv.Renter[:], Supplier: cv.Supplier[:],
		LeaseId: cv.LeaseID[:], Nonce: cv.Nonce, CumAmountMicros: cv.CumMicros, VoucherHash: cv.VoucherHash[:], Sig: cv.Sig[:],
	})
}

// DecodeRedeemable reads what EncodeRedeemable wrote and checks the
// signature, so that a redeemer never sends a transaction the contract
// would refuse for it.
func DecodeRedeemable(b []byte) (Domain, ChainVoucher, error) {
	if len(b) > MaxRedeemableSize {
		return Domain{}, ChainVoucher{}, fmt.Errorf("redeemable: %w: %d bytes (limit %d)", ErrMalformed, len(b), MaxRedeemableSize)
	}
	var m pb.Redeemable
	if err := proto.Unmarshal(b, &m); err != nil {
		return Domain{}, ChainVoucher{}, fmt.Errorf("redeemable: %w: %v", ErrMalformed, err)
	}
	switch {
	case len(m.ChainId) == 0 || len(m.ChainId) > 32 || m.ChainId[0] == 0:
		return Domain{}, ChainVoucher{}, fmt.Errorf("redeemable: %w: chain_id of %d bytes", ErrMalformed, len(m.ChainId))
	case len(m.Contract) != 20 || len(m.Renter) != 20 || len(m.Supplier) != 20:
		return Domain{}, ChainVoucher{}, fmt.Errorf("redeemable: %w: an address is not 20 bytes", ErrMalformed)
	case len(m.LeaseId) != 32 || len(m.VoucherHash) != 32 || len(m.Sig) != SigSize:
		return Domain{}, ChainVoucher{}, fmt.Errorf("redeemable: %w: lease_id, voucher_hash or sig of the wrong size", ErrMalformed)
	}
	d := Domain{ChainID: new(big.Int).SetBytes(m.ChainId), Contract: Address(m.Contract)}
	cv := ChainVoucher{
		Renter: Address(m.Renter), Supplier: Address(m.Supplier), LeaseID: [32]byte(m.LeaseId), Nonce: m.Nonce,
		CumMicros: m.CumAmountMicros, VoucherHash: [32]byte(m.VoucherHash), Sig: [SigSize]byte(m.Sig),
	}
	if err := CheckVoucher(d, cv); err != nil {
		return Domain{}, ChainVoucher{}, fmt.Errorf("redeemable: %w", err)
	}
	return d, cv, nil
}
