package chain

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
)

// Node is what a Redeemer asks the supplier's node, through its API
// (*api.Client): the chain vouchers it keeps and which leases settled.
type Node interface {
	Redeemable(ctx context.Context) ([]api.Redeemable, error)
	Receipts(ctx context.Context, lease string) ([]settle.Report, error)
}

// RedeemPolicy says when a Redeemer sends a lease's best chain voucher.
// Whatever it says, a voucher is redeemed at once when its channel is
// closing (the renter started a close), so that no close window passes
// with value unredeemed.
type RedeemPolicy struct {
	// Threshold: redeem when a lease's unredeemed value reaches it.
	Threshold money.Micros
	// Every: redeem everything unredeemed at least this often (0: only
	// on the other rules).
	Every time.Duration
}

// Redeemer redeems a supplier's chain vouchers on the contract.
type Redeemer struct {
	a      *Adapter
	node   Node
	policy RedeemPolicy
	log    *slog.Logger
	last   time.Time // the last redeem of everything
}

// NewRedeemer redeems the chain vouchers node keeps with a, the
// supplier's adapter.
func NewRedeemer(a *Adapter, node Node, policy RedeemPolicy, log *slog.Logger) *Redeemer {
	if log == nil {
		log = slog.Default()
	}
	return &Redeemer{a: a, node: node, policy: policy, log: log, last: time.Now()}
}

// Redeemed is one lease's outcome in a pass.
type Redeemed struct {
	LeaseID    string       `json:"lease_id"`
	Renter     string       `json:"renter"`
	Nonce      uint64       `json:"nonce"`
	CumMicros  money.Micros `json:"cum_micros"`
	PaidBefore money.Micros `json:"paid_before"` // what the lane had paid
	Redeemed   money.Micros `json:"redeemed"`    // what this pass added (0: nothing sent)
	Why        string       `json:"why"`         // why it was sent or not
	Tx         string       `json:"tx,omitempty"`
	GasUsed    uint64       `json:"gas_used,omitempty"`
	Err        string       `json:"error,omitempty"`
}

// Once makes one pass: every kept chain voucher of this adapter's
// deployment and address whose lease has unredeemed value is redeemed
// if all is set, its lease settled, its channel is closing, its value
// reaches the threshold, or the policy's period has passed.
func (r *Redeemer) Once(ctx context.Context, all bool) ([]Redeemed, error) {
	rs, err := r.node.Redeemable(ctx)
	if err != nil {
		return nil, fmt.Errorf("redeem: list chain vouchers: %w", err)
	}
	reps, err := r.node.Receipts(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("redeem: list leases: %w", err)
	}
	settled := map[string]bool{}
	for _, rep := range reps {
		settled[rep.LeaseID] = rep.Settled
	}
	if r.policy.Every > 0 && time.Since(r.last) >= r.policy.Every {
		all = true
	}
	var out []Redeemed
	channels := map[chainpay.Address]Channel{} // one read of each renter's channel a pass
	for _, x := range rs {
		raw, err := hex.DecodeString(x.Raw)
		if err != nil {
			return out, fmt.Errorf("redeem: lease %s: %w", x.LeaseID, err)
		}
		d, cv, err := chainpay.DecodeRedeemable(raw)
		if err != nil {
			return out, fmt.Errorf("redeem: lease %s: %w", x.LeaseID, err)
		}
		if !d.Equal(r.a.Domain()) || cv.Supplier != r.a.Address() {
			continue // another deployment's, or another key's
		}
		res := Redeemed{LeaseID: x.LeaseID, Renter: cv.Renter.String(), Nonce: cv.Nonce, CumMicros: money.Micros(cv.CumMicros)}
		lane, err := r.a.Paid(ctx, cv.Renter, cv.Supplier, cv.LeaseID)
		if err != nil {
			return out, fmt.Errorf("redeem: lease %s: %w", x.LeaseID, err)
		}
		res.PaidBefore = lane.Paid
		if lane.Nonce >= cv.Nonce {
			res.Why = "already redeemed"
			out = append(out, res)
			continue
		}
		ch, ok := channels[cv.Renter]
		if !ok {
			if ch, err = r.a.Channel(ctx, cv.Renter, cv.Supplier); err != nil {
				return out, fmt.Errorf("redeem: lease %s: %w", x.LeaseID, err)
			}
			channels[cv.Renter] = ch
		}
		unredeemed := money.Micros(cv.CumMicros) - lane.Paid
		switch {
		case !ch.ClosesAt.IsZero():
			res.Why = "the renter is closing the channel"
		case settled[x.LeaseID]:
			res.Why = "the lease settled"
		case r.policy.Threshold > 0 && unredeemed >= r.policy.Threshold:
			res.Why = "above the threshold"
		case all:
			res.Why = "asked"
		default:
			res.Why = "waiting (below the threshold, lease not settled)"
			out = append(out, res)
			continue
		}
		rc, err := r.a.Redeem(ctx, cv)
		if err != nil {
			res.Err = err.Error()
			r.log.Error("redeem failed", "lease", x.LeaseID, "renter", cv.Renter, "nonce", cv.Nonce, "err", err)
		} else {
			res.Redeemed, res.Tx, res.GasUsed = unredeemed, rc.TxHash.Hex(), rc.GasUsed
			r.log.Info("redeemed", "lease", x.LeaseID, "renter", cv.Renter, "nonce", cv.Nonce, "micros", unredeemed, "tx", rc.TxHash, "why", res.Why)
		}
		out = append(out, res)
	}
	if all {
		r.last = time.Now()
	}
	return out, nil
}

// Run makes a pass every poll until ctx ends. poll must be well inside
// the shortest close window (the contract's minimum), since a close is
// noticed at the next pass.
func (r *Redeemer) Run(ctx context.Context, poll time.Duration) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx, false); err != nil {
			r.log.Warn("redeem pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
