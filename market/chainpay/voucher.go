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
