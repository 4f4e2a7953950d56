package chain_test

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/chain"
	"github.com/gpumesh/gpumesh/chain/chaintest"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/crypto"
)

// chainNodeConfig is a node on loopback that settles on c through its
// JSON-RPC endpoint, paying and paid with key.
func chainNodeConfig(t *testing.T, c *chaintest.Chain, dir string, key *ecdsa.PrivateKey, require bool, flags map[string][]string) node.Config {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	blob, err := chainpay.EncryptKey(secp256k1.PrivKeyFromBytes(crypto.FromECDSA(key)), []byte("pass "+dir), chainpay.LightScryptN, chainpay.LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "chain-key.json"), blob, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "chain-pass"), []byte("pass "+dir+"\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "config.toml"), fmt.Appendf(nil, `chain = "sim"
settle_require = %v

[chains.sim]
rpc = %q
chain_id = %d
contract = %q
token = %q
key_file = "chain-key.json"
passphrase_file = "chain-pass"
min_window = "1h"
`, require, c.URL(), chaintest.ChainID.Int64(), c.Domain.Contract, chainpay.Address(c.Token)), 0o600))
	all := map[string][]string{
		"listen": {"/ip4/127.0.0.1/tcp/0"}, "api": {"127.0.0.1:0"}, "region": {"eu-west"}, "heartbeat_interval": {"200ms"},
		"bootstrap_timeout": {"5s"}, "job_network": {"false"}, "audit_interval": {"off"}, "halt_grace": {"3s"},
	}
	for k, v := range flags {
		all[k] = v
	}
	cfg, err := node.LoadConfig(node.Input{DataFlag: dir, Flags: all})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func startChainNode(t *testing.T, c node.Config) *node.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var w io.Writer = io.Discard
	if os.Getenv("GPUMESH_TEST_LOG") != "" {
		w = os.Stderr
	}
	n, err := node.New(ctx, c, node.WithLogger(slog.New(slog.NewTextHandler(w, nil))))
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func eventually(t *testing.T, limit time.Duration, what string, cond func() bool, show ...func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			var more []string
			for _, s := range show {
				more = append(more, s())
			}
			t.Fatalf("timed out after %s waiting for %s\n%s", limit, what, strings.Join(more, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ledgerNode is a Redeemer's view of a supplier whose network is gone:
// its ledger, read as its API would (node.Redeemable, node.Receipts).
type ledgerNode struct{ led *settle.Ledger }

func (l ledgerNode) Redeemable(context.Context) ([]api.Redeemable, error) {
	return node.Redeemable(l.led)
}
func (l ledgerNode) Receipts(_ context.Context, lease string) ([]settle.Report, error) {
	return node.Receipts(l.led, lease, time.Now())
}

// supplierPaid is what a supplier's own ledger says its renters paid it:
// the sum of its leases' best vouchers.
func supplierPaid(t *testing.T, led *settle.Ledger) money.Micros {
	t.Helper()
	reps, err := node.Receipts(led, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var sum money.Micros
	for _, r := range reps {
		if r.Role == market.RoleSupplier {
			sum += money.Micros(r.PaidMicros)
		}
	}
	return sum
}

// TestChainSettlementEndToEnd: two supplier nodes that require chain
// settlement and a renter node, all real nodes on loopback, settle on one
// simulated chain through its JSON-RPC endpoint. The renter funds a
// channel to each supplier; its job runs on the cheaper one, which is cut
// off midway, and fails over to the other, where it finishes. Each
// supplier's redeemer (the cut-off one's from its ledger, the other's
// through its node's API) redeems its best chain vouchers; each
// supplier's on-chain takings equal what its own ledger says it was paid;
// the renter closes both channels and withdraws exactly the rest.
func TestChainSettlementEndToEnd(t *testing.T) {
	c := chaintest.New(t, 3)
	ren, cheapA, bootA := newActor(t, c, 1, c.Commit), newActor(t, c, 2, c.Commit), newActor(t, c, 3, c.Commit)
	c.Mint(ren.a.Address(), 100*money.Unit)
	root := t.TempDir()
	sellers := func(price string) map[string][]string {
		return map[string][]string{"gpus": {"sim:rtx4090:1"}, "pricing": {"fixed"}, "price": {"rtx4090=" + price}}
	}
	// boot (key 3) sells at 0.50, cheap (key 2) at 0.45.
	boot := startChainNode(t, chainNodeConfig(t, c, filepath.Join(root, "boot"), c.Keys[3], true, sellers("0.50")))
	bootstrap := []string{boot.Addrs()[0].String()}
	cheapFlags := sellers("0.45")
	cheapFlags["bootstrap"] = bootstrap
	cheap := startChainNode(t, chainNodeConfig(t, c, filepath.Join(root, "cheap"), c.Keys[2], true, cheapFlags))
	renter := startChainNode(t, chainNodeConfig(t, c, filepath.Join(root, "renter"), c.Keys[1], false,
		map[string][]string{"gpus": {"none"}, "bootstrap": bootstrap}))
	for _, n := range []*node.Node{boot, cheap} {
		select {
		case <-n.Advertised():
		case <-time.After(20 * time.Second):
			t.Fatalf("node %s never advertised", n.ID())
		}
	}
	eventually(t, 20*time.Second, "both asks in the renter's book", func() bool {
		seen := map[string]bool{}
		for _, a := range renter.Book().Asks("") {
			seen[a.Supplier.String()] = true
		}
		return len(seen) == 2
	})

	// The renter funds a channel to each supplier.
	ctx := context.Background()
	renterStart := c.Balance(ren.a.Address())
	for _, sup := range []actor{cheapA, bootA} {
		if _, err := ren.a.Deposit(ctx, sup.a.Address(), money.Unit, 2*time.Hour); err != nil {
			t.Fatal(err)
		}
	}

	filter, err := market.ParseFilter("model=rtx4090")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := renter.Jobs().Submit(sctx, job.Request{AllowSimulated: true,
		Spec: &pb.JobSpec{Argv: []string{"sh", "-c", `s=0; [ -f "$CHECKPOINT_DIR/step" ] && s=$(cat "$CHECKPOINT_DIR/step")
while [ $s -lt 30 ]; do s=$((s+1)); echo $s > "$CHECKPOINT_DIR/s.tmp" && mv "$CHECKPOINT_DIR/s.tmp" "$CHECKPOINT_DIR/step"; echo "step $s"; sleep 0.2; done; echo finished`},
			CheckpointEveryS: 1},
		Filter: filter, RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: money.Unit}, MinReputation: 0.5, AllowUnproven: true,
		ReceiptInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if v.Supplier != cheap.ID().String() {
		t.Fatalf("the job went to %s, want the cheap supplier %s", v.Supplier, cheap.ID())
	}
	view := func() job.View {
		v, err := renter.Jobs().Job(v.JobID)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	logs := func() string {
		var b strings.Builder
		if _, err := renter.Jobs().Logs(context.Background(), v.JobID, 0, false, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	eventually(t, 30*time.Second, "step 5 and a checkpoint", func() bool {
		return strings.Contains(logs(), "step 5\n") && view().Checkpoint != ""
	}, func() string { return fmt.Sprintf("%+v\n%s", view(), logs()) })
	// The cheap supplier is cut off midway.
	must(t, cheap.Network().Host.Close())
	eventually(t, 60*time.Second, "the job to run on the other supplier", func() bool {
		v = view()
		return v.Attempt == 2 && v.Supplier == boot.ID().String()
	})
	eventually(t, 90*time.Second, "the job to succeed, settled", func() bool {
		v = view()
		return v.State == job.StateSucceeded && v.Attempts[1].Settled
	})
	if !strings.Contains(logs(), "finished") {
		t.Fatalf("job did not finish:\n%s", logs())
	}

	// The cut-off supplier redeems from its ledger; the other through its
	// node's API.
	rCheap := chain.NewRedeemer(cheapA.a, ledgerNode{cheap.Ledger()}, chain.RedeemPolicy{}, quietLog())
	token, err := api.ReadToken(filepath.Join(root, "boot"))
	if err != nil {
		t.Fatal(err)
	}
	rBoot := chain.NewRedeemer(bootA.a, api.NewClient(boot.APIAddr(), token, api.WithTimeout(10*time.Second)), chain.RedeemPolicy{}, quietLog())
	// Without being asked, only the settled lease is redeemed.
	got, err := rBoot.Once(ctx, false)
	if err != nil || len(got) != 1 || got[0].Redeemed <= 0 || got[0].Why != "the lease settled" {
		t.Fatalf("the surviving supplier's pass: %+v %v", got, err)
	}
	got, err = rCheap.Once(ctx, true)
	if err != nil || len(got) != 1 || got[0].Redeemed <= 0 || got[0].Err != "" {
		t.Fatalf("the cut-off supplier's pass: %+v %v", got, err)
	}
	// A second pass finds nothing more to send.
	if again, err := rCheap.Once(ctx, true); err != nil || again[0].Redeemed != 0 || again[0].Why != "already redeemed" {
		t.Fatalf("second pass: %+v %v", again, err)
	}

	cheapPaid, bootPaid := supplierPaid(t, cheap.Ledger()), supplierPaid(t, boot.Ledger())
	if cheapPaid <= 0 || bootPaid <= 0 {
		t.Fatalf("ledgers say the suppliers were paid %s and %s", cheapPaid, bootPaid)
	}
	if got := c.Balance(cheapA.a.Address()); got != cheapPaid {
		t.Errorf("the cut-off supplier holds %s on chain, its ledger says it was paid %s", got, cheapPaid)
	}
	if got := c.Balance(bootA.a.Address()); got != bootPaid {
		t.Errorf("the surviving supplier holds %s on chain, its ledger says it was paid %s", got, bootPaid)
	}

	// The renter closes both channels and, after the window, withdraws
	// exactly the rest.
	for _, sup := range []actor{cheapA, bootA} {
		if _, err := ren.a.RequestClose(ctx, ren.a.Address(), sup.a.Address()); err != nil {
			t.Fatal(err)
		}
	}
	must(t, c.Sim.AdjustTime(2*time.Hour+time.Second))
	for _, sup := range []actor{cheapA, bootA} {
		if _, err := ren.a.Withdraw(ctx, sup.a.Address()); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := c.Balance(ren.a.Address()), renterStart-cheapPaid-bootPaid; got != want {
		t.Fatalf("the renter holds %s after withdrawing, want %s (%s less %s and %s redeemed)", got, want, renterStart, cheapPaid, bootPaid)
	}
	t.Logf("cut-off supplier redeemed %s, surviving supplier %s; the renter got back %s of its 2.00", cheapPaid, bootPaid, 2*money.Unit-cheapPaid-bootPaid)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestChainEmptyChannelPaused: a supplier node that settles on chain
// (without settle_require) starts a renter's job although the renter's
// channel to it is empty; every voucher comes with a valid chain voucher,
// and the supplier keeps it, but none is covered, so the over-credit rule
// pauses the job: the renter is not served for free.
func TestChainEmptyChannelPaused(t *testing.T) {
	c := chaintest.New(t, 2)
	root := t.TempDir()
	sup := startChainNode(t, chainNodeConfig(t, c, filepath.Join(root, "sup"), c.Keys[2], false,
		map[string][]string{"gpus": {"sim:rtx4090:1"}, "pricing": {"fixed"}, "price": {"rtx4090=0.50"}, "halt_grace": {"1m"}}))
	renter := startChainNode(t, chainNodeConfig(t, c, filepath.Join(root, "renter"), c.Keys[1], false,
		map[string][]string{"gpus": {"none"}, "bootstrap": {sup.Addrs()[0].String()}}))
	select {
	case <-sup.Advertised():
	case <-time.After(20 * time.Second):
		t.Fatal("the supplier never advertised")
	}
	eventually(t, 20*time.Second, "the ask in the renter's book", func() bool { return len(renter.Book().Asks("")) > 0 })
	filter, err := market.ParseFilter("model=rtx4090")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := renter.Jobs().Submit(ctx, job.Request{AllowSimulated: true,
		Spec:   &pb.JobSpec{Argv: []string{"sh", "-c", "while true; do echo tick; sleep 0.2; done"}},
		Filter: filter, RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: money.Unit}, MinReputation: 0.5, AllowUnproven: true,
		ReceiptInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	eventually(t, 60*time.Second, "the job to be paused", func() bool {
		got, err := renter.Jobs().Job(v.JobID)
		return err == nil && got.State == job.StateHalted
	})
	id, err := market.ParseID(v.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	kept, _, err := sup.Ledger().ChainVoucher(id)
	if err != nil || kept == nil {
		t.Fatalf("the supplier kept no chain voucher: %v", err)
	}
	if _, cv, err := chainpay.DecodeRedeemable(kept); err != nil || cv.CumMicros == 0 {
		t.Fatalf("kept chain voucher %+v: %v", cv, err)
	}
	if got := c.Balance(chaintest.Address(c.Keys[2])); got != 0 {
		t.Fatalf("the supplier holds %s on chain with an empty channel", got)
	}
}
