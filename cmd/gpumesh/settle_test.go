package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/market/chainpay"
)

// settleData is a data dir whose config names a chain table.
func settleData(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := `chain = "sim"
[chains.sim]
rpc = "http://127.0.0.1:1"
chain_id = 1337
contract = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
token = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
key_file = "keys/chain.json"
passphrase_file = "pass"
`
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pass"), []byte("correct horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSettleKey: `gpumesh settle key` makes the encrypted payment key on
// first use and prints its address; again, it loads the same key and
// makes nothing; the file is 0600 and decrypts with the passphrase
// file's; without a chain configured it fails with a usage error saying
// what to set.
func TestSettleKey(t *testing.T) {
	t.Setenv("GPUMESH_CHAIN_PASSPHRASE", "") // the passphrase file's, not one the caller's environment holds
	dir := settleData(t)
	type out struct {
		Address string `json:"address"`
		KeyFile string `json:"key_file"`
		Created bool   `json:"created"`
	}
	var first, second out
	code, stdout, stderr := gm(t, "settle", "key", "--light-kdf", "--data", dir, "--json")
	if code != 0 || json.Unmarshal([]byte(stdout), &first) != nil || !first.Created {
		t.Fatalf("first key: exit %d %q %q", code, stdout, stderr)
	}
	if _, err := chainpay.ParseAddress(first.Address); err != nil {
		t.Fatalf("address %q: %v", first.Address, err)
	}
	code, stdout, _ = gm(t, "settle", "key", "--data", dir, "--json")
	if code != 0 || json.Unmarshal([]byte(stdout), &second) != nil || second.Created || second.Address != first.Address {
		t.Fatalf("second key: exit %d %q, want the same address, nothing created", code, stdout)
	}
	fi, err := os.Stat(first.KeyFile)
	if err != nil || fi.Mode().Perm() != 0o600 || first.KeyFile != filepath.Join(dir, "keys", "chain.json") {
		t.Fatalf("key file %s: %v %v", first.KeyFile, fi.Mode(), err)
	}
	if k, err := chainpay.LoadKeyFile(first.KeyFile, []byte("correct horse")); err != nil || chainpay.AddressOf(k.PubKey()).String() != first.Address {
		t.Fatalf("the key file does not hold the address printed: %v", err)
	}
	code, _, stderr = gm(t, "settle", "key", "--data", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "no chain") {
		t.Fatalf("no chain: exit %d %q", code, stderr)
	}
}

// TestSettleHelperMissing: the transaction commands say how to get
// gpumesh-settle when it is neither beside the binary nor on PATH.
func TestSettleHelperMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, _, stderr := gm(t, "settle", "deposit", "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "1.00", "--data", settleData(t))
	if code == 0 || !strings.Contains(stderr, "make settle") {
		t.Fatalf("exit %d %q", code, stderr)
	}
}
