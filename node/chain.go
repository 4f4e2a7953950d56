package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"

	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
)

// chainSettlement loads the payment key of the chain the config names
// and makes what the job layer settles there with: the supplier's
// ChainKey and channel reader, the renter's ChainKey and key. All nil
// when the node settles off chain only.
func (n *Node) chainSettlement(ctx context.Context) (*job.SupplierChain, *job.RenterChain, error) {
	ch, err := n.cfg.ActiveChain()
	if err != nil || ch == nil {
		return nil, nil, err
	}
	key, err := LoadChainKey(ch, os.LookupEnv)
	if err != nil {
		return nil, nil, err
	}
	// scrypt took tens to hundreds of MiB for a moment (256 MiB at the
	// standard cost): give them back now, not when the scavenger gets to
	// them, so that an idle node's footprint is its own.
	debug.FreeOSMemory()
	rec, err := chainpay.SealChainKey(ch.Domain, n.key, key, n.now())
	if err != nil {
		return nil, nil, fmt.Errorf("chain %s: %w", ch.Name, err)
	}
	reader, err := chainpay.NewReader(ch.RPC, ch.Domain, chainpay.ReaderOptions{Confirmations: ch.Confirmations})
	if err != nil {
		return nil, nil, fmt.Errorf("chain %s: %w", ch.Name, err)
	}
	// Checked beside the start, not in its way: an endpoint that hangs
	// must not hold the node up. Not fatal either: it may come back;
	// until then chain vouchers cover nothing and settle_require answers
	// "busy".
	n.goLoop(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := reader.CheckChain(cctx); err != nil && ctx.Err() == nil {
			n.log.Warn("chain endpoint not usable now", "chain", ch.Name, "err", err)
		}
	})
	addr := chainpay.AddressOf(key.PubKey())
	n.log.Info("settling on chain", "chain", ch.Name, "chain_id", ch.Domain.ChainID, "contract", ch.Domain.Contract, "address", addr, "require", n.cfg.SettleRequire)
	return &job.SupplierChain{Record: rec, Funds: reader, Require: n.cfg.SettleRequire},
		&job.RenterChain{Record: rec, Key: key}, nil
}

// LoadChainKey decrypts ch's payment key file with the passphrase in the
// environment (ChainPassphraseEnv) or, failing that, ch's passphrase
// file. Neither is ever logged.
func LoadChainKey(ch *Chain, lookupEnv func(string) (string, bool)) (*secp256k1.PrivateKey, error) {
	pass, err := ChainPassphrase(ch, lookupEnv)
	if err != nil {
		return nil, err
	}
	key, err := chainpay.LoadKeyFile(ch.KeyFile, pass)
	if err != nil {
		return nil, fmt.Errorf("chain %s: %w", ch.Name, err)
	}
	return key, nil
}

// ChainPassphrase is the key file's passphrase: $GPUMESH_CHAIN_PASSPHRASE,
// else the passphrase file's first line.
func ChainPassphrase(ch *Chain, lookupEnv func(string) (string, bool)) ([]byte, error) {
	if p, ok := lookupEnv(ChainPassphraseEnv); ok && p != "" {
		return []byte(p), nil
	}
	if ch.PassphraseFile == "" {
		return nil, fmt.Errorf("chain %s: no passphrase for %s: set %s or the table's passphrase_file", ch.Name, ch.KeyFile, ChainPassphraseEnv)
	}
	b, err := os.ReadFile(ch.PassphraseFile)
	if err != nil {
		return nil, fmt.Errorf("chain %s: passphrase file: %w", ch.Name, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimRight(line, "\r"); line == "" {
		return nil, errors.New("chain " + ch.Name + ": the passphrase file is empty")
	}
	return []byte(line), nil
}

// ChainStatus reads, on ch's chain, the channels from me to suppliers and
// what each of rs (the chain vouchers a supplier node keeps) has been
// paid: `gpumesh settle status`.
func ChainStatus(ctx context.Context, ch *Chain, me chainpay.Address, suppliers []chainpay.Address, rs []api.Redeemable) (api.SettleStatus, error) {
	st := api.SettleStatus{Chain: ch.Name, ChainID: ch.Domain.ChainID.String(), Contract: ch.Domain.Contract.String(), Address: me.String(),
		Channels: []api.ChannelStatus{}, Redeemable: []api.RedeemStatus{}}
	rd, err := chainpay.NewReader(ch.RPC, ch.Domain, chainpay.ReaderOptions{Confirmations: ch.Confirmations})
	if err != nil {
		return st, err
	}
	if err := rd.CheckChain(ctx); err != nil {
		return st, err
	}
	for _, sup := range suppliers {
		cs, err := rd.State(ctx, me, sup)
		if err != nil {
			return st, err
		}
		c := api.ChannelStatus{Supplier: sup.String(), Balance: money.Micros(cs.Balance), Window: cs.Window.String()}
		if !cs.ClosesAt.IsZero() {
			c.ClosesAt = cs.ClosesAt.UTC().Format(time.RFC3339)
		}
		st.Channels = append(st.Channels, c)
	}
	closing := map[chainpay.Address]bool{} // one read of each renter's channel
	for _, r := range rs {
		raw, err := hex.DecodeString(r.Raw)
		if err != nil {
			return st, fmt.Errorf("lease %s: %w", r.LeaseID, err)
		}
		d, cv, err := chainpay.DecodeRedeemable(raw)
		if err != nil {
			return st, fmt.Errorf("lease %s: %w", r.LeaseID, err)
		}
		if !d.Equal(ch.Domain) || cv.Supplier != me {
			continue
		}
		paid, _, err := rd.LanePaid(ctx, cv.Renter, me, cv.LeaseID)
		if err != nil {
			return st, err
		}
		c, ok := closing[cv.Renter]
		if !ok {
			cs, err := rd.State(ctx, cv.Renter, me)
			if err != nil {
				return st, err
			}
			c = !cs.ClosesAt.IsZero()
			closing[cv.Renter] = c
		}
		st.Redeemable = append(st.Redeemable, api.RedeemStatus{LeaseID: r.LeaseID, Renter: cv.Renter.String(), Nonce: cv.Nonce,
			Cum: money.Micros(cv.CumMicros), Redeemed: money.Micros(paid), Unredeemed: money.Micros(int64(cv.CumMicros) - paid), Closing: c})
	}
	return st, nil
}
