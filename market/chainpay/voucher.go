package chainpay

import (
	"fmt"

	"github.com/gpumesh/gpumesh/market/settle"
)

// VoucherOf is the chain voucher of v, a validated gpumesh voucher, from
// the renter's payment address to the supplier's, unsigned.
func VoucherOf(renter, supplier Address, v *settle.Voucher) (ChainVoucher, error) {
	if v.CumAmountMicros < 0 {
		return ChainVoucher{}, fmt.Errorf("%w: cum_amount_micros %d", ErrMalformed, v.CumAmountMicros)
	}
	return ChainVoucher{
		Renter: renter, Supplier: supplier, LeaseID: v.LeaseID, Nonce: v.Nonce,
		CumMicros: uint64(v.CumAmountMicros), VoucherHash: v.Hash,
	}, nil
}

// CheckVoucherOf checks that cv is the chain voucher of v from renter to
// supplier: the same addresses, lease, nonce, amount and envelope hash
// (ErrVoucherMismatch), signed by renter (ErrSignature). The cheap
// comparisons run first.
func CheckVoucherOf(d Domain, renter, supplier Address, v *settle.Voucher, cv ChainVoucher) error {
	want, err := VoucherOf(renter, supplier, v)
	if err != nil {
		return err
	}
	switch {
	case cv.Renter != want.Renter:
		return fmt.Errorf("%w: renter %s, want %s", ErrVoucherMismatch, cv.Renter, want.Renter)
	case cv.Supplier != want.Supplier:
		return fmt.Errorf("%w: supplier %s, want %s", ErrVoucherMismatch, cv.Supplier, want.Supplier)
	case cv.LeaseID != want.LeaseID:
		return fmt.Errorf("%w: lease %x, want %x", ErrVoucherMismatch, cv.LeaseID, want.LeaseID)
	case cv.Nonce != want.Nonce:
		return fmt.Errorf("%w: nonce %d, want %d", ErrVoucherMismatch, cv.Nonce, want.Nonce)
	case cv.CumMicros != want.CumMicros:
		return fmt.Errorf("%w: amount %d micros, want %d", ErrVoucherMismatch, cv.CumMicros, want.CumMicros)
	case cv.VoucherHash != want.VoucherHash:
		return fmt.Errorf("%w: voucher hash %x, want %x", ErrVoucherMismatch, cv.VoucherHash, want.VoucherHash)
	}
	return CheckVoucher(d, cv)
}
