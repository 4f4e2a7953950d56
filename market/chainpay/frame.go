package chainpay

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/chainpay/pb"
)

// MaxVoucherFrameSize bounds an encoded pb.ChainVoucher: a voucher
// envelope (settle.MaxRecordSize is far below it) and a signature.
const MaxVoucherFrameSize = 4096

// EncodeVoucherFrame writes the job stream's chain_voucher body: the
// voucher envelope and its chain voucher's signature.
func EncodeVoucherFrame(voucherRaw []byte, sig [SigSize]byte) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.ChainVoucher{Voucher: voucherRaw, Sig: sig[:]})
	if err != nil {
		return nil, fmt.Errorf("chain voucher frame: %w", err)
	}
	if len(b) > MaxVoucherFrameSize {
		return nil, fmt.Errorf("chain voucher frame: %w: %d bytes (limit %d)", ErrMalformed, len(b), MaxVoucherFrameSize)
	}
	return b, nil
}

// DecodeVoucherFrame reads a chain_voucher body. The voucher envelope is
// returned unchecked: the caller opens it as any voucher.
func DecodeVoucherFrame(b []byte) (voucherRaw []byte, sig [SigSize]byte, err error) {
	if len(b) > MaxVoucherFrameSize {
		return nil, sig, fmt.Errorf("chain voucher frame: %w: %d bytes (limit %d)", ErrMalformed, len(b), MaxVoucherFrameSize)
	}
	var m pb.ChainVoucher
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, sig, fmt.Errorf("chain voucher frame: %w: %v", ErrMalformed, err)
	}
	if len(m.Voucher) == 0 || len(m.Sig) != SigSize {
		return nil, sig, fmt.Errorf("chain voucher frame: %w: voucher of %d bytes, sig of %d", ErrMalformed, len(m.Voucher), len(m.Sig))
	}
	return m.Voucher, [SigSize]byte(m.Sig), nil
}
