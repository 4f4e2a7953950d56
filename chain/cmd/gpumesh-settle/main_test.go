package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/gpumesh/gpumesh/chain/chaintest"
	"github.com/gpumesh/gpumesh/market/chainpay"
	"github.com/gpumesh/gpumesh/money"
)

// dataDir makes a node data dir whose config settles on c with keys[i].
func dataDir(t *testing.T, c *chaintest.Chain, i int) string {
	t.Helper()
	dir := t.TempDir()
	blob, err := chainpay.EncryptKey(secp256k1.PrivKeyFromBytes(crypto.FromECDSA(c.Keys[i])), []byte("pw"), chainpay.LightScryptN, chainpay.LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k.json"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("chain = \"sim\"\n[chains.sim]\nrpc = %q\nchain_id = %d\ncontract = %q\ntoken = %q\nkey_file = \"k.json\"\nmin_window = \"1h\"\n",
		c.URL(), chaintest.ChainID.Int64(), c.Domain.Contract, chainpay.Address(c.Token))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// TestDepositCloseWithdraw: the renter's commands on a chain that mines
// by itself, as a real one: a deposit funds the channel (the JSON names
// the transaction), a close starts the window, and after it a withdraw
// takes back exactly the deposit; bad arguments are refused before any
// transaction.
func TestDepositCloseWithdraw(t *testing.T) {
	c := chaintest.New(t, 2)
	c.AutoMine(50 * time.Millisecond)
	renter, supplier := chaintest.Address(c.Keys[1]), chaintest.Address(c.Keys[2])
	c.Mint(renter, 10*money.Unit)
	dir := dataDir(t, c, 1)
	t.Setenv("GPUMESH_CHAIN_PASSPHRASE", "pw")

	out, err := run(t, "deposit", supplier.String(), "5.00", "--data", dir, "--json")
	if err != nil {
		t.Fatalf("deposit: %v", err)
	}
	var tx struct {
		Action string `json:"action"`
		Tx     string `json:"tx"`
		Gas    uint64 `json:"gas_used"`
	}
	if err := json.Unmarshal([]byte(out), &tx); err != nil || tx.Action != "deposit" || len(tx.Tx) != 66 || tx.Gas == 0 {
		t.Fatalf("deposit output %q: %v", out, err)
	}
	rd, err := chainpay.NewReader(c.URL(), c.Domain, chainpay.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rd.State(context.Background(), renter, supplier)
	if err != nil || st.Balance != 5*int64(money.Unit) || st.Window != time.Hour {
		t.Fatalf("channel after deposit: %+v %v", st, err)
	}
	if c.Balance(renter) != 5*money.Unit {
		t.Fatalf("renter holds %s after depositing 5.00 of 10.00", c.Balance(renter))
	}

	if _, err := run(t, "withdraw", supplier.String(), "--data", dir); err == nil || !strings.Contains(err.Error(), "window") {
		t.Fatalf("withdraw before a close: %v", err)
	}
	if _, err := run(t, "close", supplier.String(), "--data", dir); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := c.Sim.AdjustTime(time.Hour + time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "withdraw", supplier.String(), "--data", dir); err != nil {
		t.Fatalf("withdraw: %v", err)
	}
	if got := c.Balance(renter); got != 10*money.Unit {
		t.Fatalf("renter holds %s after withdrawing, want all 10.00 back", got)
	}

	for name, args := range map[string][]string{
		"bad address":  {"deposit", "0x12", "1.00"},
		"zero amount":  {"deposit", supplier.String(), "0"},
		"close both":   {"close", supplier.String(), "--renter", renter.String()},
		"no chain set": {"deposit", supplier.String(), "1.00", "--data", t.TempDir()},
	} {
		if !strings.Contains(strings.Join(args, " "), "--data") {
			args = append(args, "--data", dir)
		}
		if _, err := run(t, args...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	t.Setenv("GPUMESH_CHAIN_PASSPHRASE", "wrong")
	if _, err := run(t, "deposit", supplier.String(), "1.00", "--data", dir); err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong passphrase: %v", err)
	}
}
