package chain

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpumesh/gpumesh/market/chainpay"
)

// The contract's revert reasons, each a named error; an adapter call that
// reverts returns one of them (or ErrReverted for another reason).
var (
	ErrNoChannel  = errors.New("contract: no channel")
	ErrClosed     = errors.New("contract: channel closed (the close window has passed)")
	ErrStale      = errors.New("contract: stale voucher (older or already redeemed nonce)")
	ErrDecreased  = errors.New("contract: voucher amount below what the lease has been paid")
	ErrBalance    = errors.New("contract: channel balance does not cover the voucher")
	ErrWindow     = errors.New("contract: window below the contract's minimum or the channel's")
	ErrClosing    = errors.New("contract: channel already closing")
	ErrNotParty   = errors.New("contract: sender is neither the renter nor the supplier")
	ErrWindowOpen = errors.New("contract: close window still open")
	ErrSupplier   = errors.New("contract: bad supplier address")
	ErrTransfer   = errors.New("contract: token transfer failed")
	ErrReverted   = errors.New("contract: reverted")
)

// revertReasons maps the contract's require messages to their errors.
var revertReasons = map[string]error{
	"no channel":       ErrNoChannel,
	"closed":           ErrClosed,
	"signature":        chainpay.ErrSignature,
	"stale voucher":    ErrStale,
	"amount decreased": ErrDecreased,
	"balance":          ErrBalance,
	"window":           ErrWindow,
	"closing":          ErrClosing,
	"not a party":      ErrNotParty,
	"window open":      ErrWindowOpen,
	"supplier":         ErrSupplier,
	"transfer":         ErrTransfer,
}

// mapRevert turns an "execution reverted: <reason>" error of a backend
// into the reason's named error, keeping the original text.
func mapRevert(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	i := strings.Index(msg, "execution reverted")
	if i < 0 {
		return err
	}
	reason := strings.TrimSpace(strings.TrimPrefix(msg[i+len("execution reverted"):], ":"))
	if named, ok := revertReasons[reason]; ok {
		return fmt.Errorf("%w (%v)", named, err)
	}
	return fmt.Errorf("%w: %v", ErrReverted, err)
}
