package job

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

// Chain settlement on the job stream (docs/PROTOCOL.md §43.6): a
// supplier that settles on chain puts its ChainKey record in its final
// Welcome; a renter that can pay on chain puts its own in its Hello. When
// both are valid for the lease's parties and name one deployment, the
// renter sends each voucher with its chain voucher's signature
// (ClientFrame.chain_voucher) and the supplier counts a voucher as paid
// only as far as the renter's channel covers it.

// chainCallTimeout bounds one read of the chain while a voucher waits.
const chainCallTimeout = 10 * time.Second

// ChainFunds reads a payment channel on chain.
type ChainFunds interface {
	// Channel returns what the channel from renter to supplier holds and
	// what it has paid on lease, both in micros.
	Channel(ctx context.Context, renter, supplier chainpay.Address, lease [32]byte) (balance, leasePaid int64, err error)
}

// SupplierChain is a supplier's chain settlement.
type SupplierChain struct {
	// Record is the supplier's ChainKey record (chainpay.SealChainKey).
	Record []byte
	// Funds reads the renters' channels.
	Funds ChainFunds
	// Require refuses a start whose renter cannot pay on chain: no valid
	// ChainKey of the same deployment, or an empty channel.
	Require bool
}

// RenterChain is what a renter pays on chain with.
type RenterChain struct {
	Record []byte                // the renter's ChainKey record
	Key    *secp256k1.PrivateKey // its payment key
}

// supplierChain is a SupplierChain checked, with what the supplier's
// chain vouchers cover per channel.
type supplierChain struct {
	cfg SupplierChain
	own *chainpay.ChainKey

	mu       sync.Mutex
	reserved map[chainpay.Address]map[market.ID]int64 // renter -> lease -> covered, not yet redeemed
}

func newSupplierChain(cfg *SupplierChain, self peer.ID) (*supplierChain, error) {
	if cfg == nil {
		return nil, nil
	}
	own, err := openOwnKey(cfg.Record, self)
	switch {
	case err != nil:
		return nil, err
	case cfg.Funds == nil:
		return nil, errors.New("chain: no reader of the chain's channels")
	}
	return &supplierChain{cfg: *cfg, own: own, reserved: make(map[chainpay.Address]map[market.ID]int64)}, nil
}

// renterKey checks a renter's ChainKey record from a Hello: it must name
// the lease's renter and this supplier's deployment.
func (c *supplierChain) renterKey(renter peer.ID, raw []byte) (*chainpay.ChainKey, error) {
	if len(raw) == 0 {
		return nil, errors.New("the renter sent no ChainKey record")
	}
	ck, err := chainpay.OpenChainKey(raw)
	switch {
	case err != nil:
		return nil, err
	case ck.Peer != renter:
		return nil, fmt.Errorf("the ChainKey names %s, not the lease's renter %s", ck.Peer, renter)
	case !ck.Domain.Equal(c.own.Domain):
		return nil, fmt.Errorf("the ChainKey is for chain %s contract %s, this supplier settles on chain %s contract %s",
			ck.Domain.ChainID, ck.Domain.Contract, c.own.Domain.ChainID, c.own.Domain.Contract)
	}
	return ck, nil
}

// admit is settle_require's check of a start: the renter's ChainKey and a
// channel that holds something. nil: admitted.
func (c *supplierChain) admit(ctx context.Context, renter peer.ID, h *pb.Hello) *pb.Welcome {
	if c == nil || !c.cfg.Require {
		return nil
	}
	ck, err := c.renterKey(renter, h.ChainKey)
	if err != nil {
		return refused("chain settlement required: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, chainCallTimeout)
	defer cancel()
	bal, _, err := c.cfg.Funds.Channel(ctx, ck.Address, c.own.Address, [32]byte{})
	switch {
	case err != nil:
		return busy("chain settlement required: cannot read the channel: %v", err)
	case bal <= 0:
		return refused("chain settlement required: the channel from %s to %s holds nothing; deposit first", ck.Address, c.own.Address)
	}
	return nil
}

// check is the settle.ChainCheck of one chain voucher signature on a
// lease whose renter pays from renter: the signature must be the
// renter's over the voucher's chain voucher, and what it covers is its
// amount up to what the lease has been paid on chain plus what the
// channel holds less what the supplier's other unredeemed chain vouchers
// on the channel already cover.
func (c *supplierChain) check(ctx context.Context, lease market.ID, renter chainpay.Address, sig [chainpay.SigSize]byte) settle.ChainCheck {
	return func(v *settle.Voucher) (int64, []byte, error) {
		cv, err := chainpay.VoucherOf(renter, c.own.Address, v)
		if err != nil {
			return 0, nil, err
		}
		cv.Sig = sig
		if err := chainpay.CheckVoucher(c.own.Domain, cv); err != nil {
			return 0, nil, err
		}
		keep, err := chainpay.EncodeRedeemable(c.own.Domain, cv)
		if err != nil {
			return 0, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, chainCallTimeout)
		defer cancel()
		bal, paid, err := c.cfg.Funds.Channel(ctx, renter, c.own.Address, lease)
		if err != nil {
			return 0, nil, fmt.Errorf("read the channel: %w", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		leases := c.reserved[renter]
		if leases == nil {
			leases = make(map[market.ID]int64)
			c.reserved[renter] = leases
		}
		var others int64
		for id, n := range leases {
			if id != lease {
				others += n
			}
		}
		covered := min(v.CumAmountMicros, max(paid, paid+bal-others))
		leases[lease] = max(0, covered-paid)
		return covered, keep, nil
	}
}

// chainTo checks the supplier's ChainKey record from its Welcome against
// the renter's own: the address to pay on chain, or nil to pay off chain
// (logged when the supplier asked and the renter cannot).
func (c *Controller) chainTo(w *pb.Welcome, l *market.Lease) *chainpay.Address {
	if len(w.ChainKey) == 0 {
		return nil
	}
	if c.chain == nil {
		// The Hello carried no ChainKey: the supplier holds the lease off
		// chain (or refused it, with settle_require).
		c.log.Debug("the supplier settles on chain; this node has no payment key and pays off chain", "lease", l.ID.Short(), "supplier", l.Supplier)
		return nil
	}
	ck, err := chainpay.OpenChainKey(w.ChainKey)
	switch {
	case err == nil && ck.Peer != l.Supplier:
		err = fmt.Errorf("it names %s, not the lease's supplier", ck.Peer)
	case err == nil && !ck.Domain.Equal(c.chain.own.Domain):
		err = fmt.Errorf("it is for chain %s contract %s, not this renter's", ck.Domain.ChainID, ck.Domain.Contract)
	}
	if err != nil {
		c.log.Warn("the supplier's ChainKey refused; paying off chain, which a supplier holding the lease on chain will not count", "lease", l.ID.Short(), "supplier", l.Supplier, "err", err)
		return nil
	}
	c.log.Info("paying on chain", "lease", l.ID.Short(), "supplier", l.Supplier, "address", ck.Address, "chain_id", ck.Domain.ChainID)
	return &ck.Address
}

// renterChain is a RenterChain checked.
type renterChain struct {
	cfg RenterChain
	own *chainpay.ChainKey
}

func newRenterChain(cfg *RenterChain, self peer.ID) (*renterChain, error) {
	if cfg == nil {
		return nil, nil
	}
	own, err := openOwnKey(cfg.Record, self)
	switch {
	case err != nil:
		return nil, err
	case cfg.Key == nil || chainpay.AddressOf(cfg.Key.PubKey()) != own.Address:
		return nil, fmt.Errorf("chain: the payment key is not the ChainKey's address %s", own.Address)
	}
	return &renterChain{cfg: *cfg, own: own}, nil
}

// voucherFrame is the chain_voucher frame of a voucher the renter signed,
// payable on chain to supplier.
func (c *renterChain) voucherFrame(voucherRaw []byte, supplier chainpay.Address) (*pb.ClientFrame, error) {
	v, err := settle.OpenVoucher(voucherRaw)
	if err != nil {
		return nil, err
	}
	cv, err := chainpay.VoucherOf(c.own.Address, supplier, v)
	if err != nil {
		return nil, err
	}
	if cv, err = chainpay.SignVoucher(c.own.Domain, c.cfg.Key, cv); err != nil {
		return nil, err
	}
	frame, err := chainpay.EncodeVoucherFrame(voucherRaw, cv.Sig)
	if err != nil {
		return nil, err
	}
	return &pb.ClientFrame{Body: &pb.ClientFrame_ChainVoucher{ChainVoucher: frame}}, nil
}

// useChain makes r's lease chain-settled, paid from renter's channel.
func (r *run) useChain(renter chainpay.Address) {
	r.mu.Lock()
	r.chainRenter = &renter
	r.mu.Unlock()
	r.meter.RequireChain()
}

// acceptChainVoucher takes a chain_voucher frame.
func (r *run) acceptChainVoucher(frame []byte) error {
	r.mu.Lock()
	renter := r.chainRenter
	r.mu.Unlock()
	if renter == nil || r.e.chain == nil {
		return errors.New("a chain voucher on a lease not settled on chain")
	}
	voucherRaw, sig, err := chainpay.DecodeVoucherFrame(frame)
	if err != nil {
		return err
	}
	_, err = r.meter.AcceptChain(voucherRaw, r.e.chain.check(context.Background(), r.lease.ID, *renter, sig), r.e.cfg.Now())
	return err
}

// openOwnKey opens a node's own ChainKey record, which must name it.
func openOwnKey(raw []byte, self peer.ID) (*chainpay.ChainKey, error) {
	own, err := chainpay.OpenChainKey(raw)
	if err != nil {
		return nil, fmt.Errorf("chain: own ChainKey: %w", err)
	}
	if own.Peer != self {
		return nil, fmt.Errorf("chain: own ChainKey names %s, not this node %s", own.Peer, self)
	}
	return own, nil
}
