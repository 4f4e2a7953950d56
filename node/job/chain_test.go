package job

import (
	"context"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
)

// channels is a chain's payment channels as ChainFunds reads them: the
// chain module's tests put the contract itself behind this interface;
// here the balance is what each test sets.
type channels struct {
	mu      sync.Mutex
	balance map[[2]chainpay.Address]int64
	reads   int
}

func (c *channels) Channel(_ context.Context, renter, supplier chainpay.Address, _ [32]byte) (int64, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.balance[[2]chainpay.Address{renter, supplier}], 0, nil
}

func (c *channels) fund(renter, supplier chainpay.Address, m int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.balance[[2]chainpay.Address{renter, supplier}] = m
}

var testChainDomain = chainpay.Domain{ChainID: big.NewInt(1337), Contract: chainpay.Address{0: 0xc0, 19: 0x01}}

// payKey makes a payment key and the ChainKey record binding it to peer.
func payKey(t *testing.T, peerKey crypto.PrivKey) (*secp256k1.PrivateKey, []byte) {
	t.Helper()
	k, err := secp256k1.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := chainpay.SealChainKey(testChainDomain, peerKey, k, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return k, rec
}

// chainMesh is a renter and one supplier that both settle on chain.
type chainMesh struct {
	*mesh
	funds               *channels
	renterAddr, supAddr chainpay.Address
	renterRecord        []byte
}

func newChainMesh(t *testing.T, require bool) *chainMesh {
	cm := &chainMesh{funds: &channels{balance: map[[2]chainpay.Address]int64{}}}
	cm.mesh = newMeshWith(t, 1, func(c *ControllerConfig) {
		k, rec := payKey(t, c.Key)
		cm.renterAddr, cm.renterRecord = chainpay.AddressOf(k.PubKey()), rec
		c.Chain = &RenterChain{Record: rec, Key: k}
	}, func(c *ExecutorConfig) {
		k, rec := payKey(t, c.Key)
		cm.supAddr = chainpay.AddressOf(k.PubKey())
		c.Chain = &SupplierChain{Record: rec, Funds: cm.funds, Require: require}
		c.HaltGrace = time.Minute // the empty-channel test resumes the job: never stopped first
	})
	return cm
}

// TestChainSettledJob: a renter and a supplier that both settle on one
// deployment run a job whose every voucher comes with a chain voucher;
// the supplier keeps the best one, which checks against the renter's
// address and the voucher it accepted, and the renter owes nothing.
func TestChainSettledJob(t *testing.T) {
	cm := newChainMesh(t, true)
	sup := cm.sups[0]
	cm.funds.fund(cm.renterAddr, cm.supAddr, 100*int64(1_000_000))
	v := cm.submit(shJob(`echo chain; sleep 1`, nil))
	v = cm.waitJob(v.JobID, StateSucceeded)
	a := v.Attempts[0]
	if !a.Settled || a.PaidMicros <= 0 {
		t.Fatalf("attempt: %s", describe(v))
	}
	if r := sup.runOf(a.LeaseID); r == nil || r.OwedMicros != 0 {
		t.Fatalf("the supplier's run: %+v; want nothing owed", r)
	}
	id, err := market.ParseID(a.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	kept, nonce, err := sup.exec.cfg.Ledger.ChainVoucher(id)
	if err != nil || kept == nil {
		t.Fatalf("no chain voucher kept: %v", err)
	}
	d, cv, err := chainpay.DecodeRedeemable(kept)
	if err != nil || !d.Equal(testChainDomain) {
		t.Fatalf("kept chain voucher: %v", err)
	}
	if cv.Renter != cm.renterAddr || cv.Supplier != cm.supAddr || cv.LeaseID != id || cv.Nonce != nonce || cv.CumMicros != uint64(a.PaidMicros) {
		t.Fatalf("kept chain voucher %+v: want the renter %s to pay %s %d micros on lease %s", cv, cm.renterAddr, cm.supAddr, a.PaidMicros, id.Short())
	}
}

// TestChainRequireRefuses: a supplier that requires chain settlement
// refuses a start with no ChainKey, with another peer's ChainKey, and
// with an empty channel, each with a reason that says so, and admits it
// once the channel holds something.
func TestChainRequireRefuses(t *testing.T) {
	cm := newChainMesh(t, true)
	s := cm.sups[0]
	spec, l := cm.sleeper(s, 1)
	_, other := payKey(t, s.key)
	for _, c := range []struct {
		record []byte
		want   string
	}{
		{nil, "sent no ChainKey"},
		{other, "not the lease's renter"},
		{cm.renterRecord, "holds nothing"},
	} {
		h := startHello(l, spec, 1)
		h.ChainKey = c.record
		st, w := cm.rawSession(cm.renter, s, h, spec.Raw)
		st.Reset()
		if !strings.Contains(w.Refused, "chain settlement required") || !strings.Contains(w.Refused, c.want) {
			t.Errorf("want a refusal saying %q, got %q", c.want, w.Refused)
		}
	}
	cm.funds.fund(cm.renterAddr, cm.supAddr, 1)
	h := startHello(l, spec, 1)
	h.ChainKey = cm.renterRecord
	st, w := cm.rawSession(cm.renter, s, h, spec.Raw)
	defer st.Reset()
	if w.Refused != "" || len(w.ChainKey) == 0 {
		t.Fatalf("funded start: refused %q, chain key %d bytes", w.Refused, len(w.ChainKey))
	}
}

// TestChainEmptyChannelPaused: a renter whose channel is empty signs
// every voucher and chain voucher, and is paused by the over-credit rule
// all the same: what the chain does not cover is not paid. Once the
// channel is funded, the job runs again.
func TestChainEmptyChannelPaused(t *testing.T) {
	cm := newChainMesh(t, false)
	sup := cm.sups[0]
	v := cm.submit(shJob(`sleep 60`, nil))
	deadline := time.Now().Add(30 * time.Second)
	for {
		view := cm.view(v.JobID)
		if len(view.Attempts) > 0 {
			if r := sup.runOf(view.Attempts[0].LeaseID); r != nil && r.State == StateHalted {
				if r.OwedMicros <= 0 {
					t.Fatalf("halted owing %d", r.OwedMicros)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never paused: %s", describe(view))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cm.funds.mu.Lock()
	reads := cm.funds.reads
	cm.funds.mu.Unlock()
	if reads == 0 {
		t.Fatal("the supplier never read the channel")
	}
	// The renter funds its channel: the next chain voucher (the paused
	// job's receipts keep coming, billing nothing) is covered, and the job
	// runs again.
	cm.funds.fund(cm.renterAddr, cm.supAddr, 100*int64(1_000_000))
	deadline = time.Now().Add(30 * time.Second)
	for {
		view := cm.view(v.JobID)
		if r := sup.runOf(view.Attempts[0].LeaseID); r != nil && r.State == StateRunning && r.OwedMicros <= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never resumed after the channel was funded: %s", describe(view))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
