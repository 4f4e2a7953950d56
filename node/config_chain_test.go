package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/chainpay"
)

const chainTable = `
chain = "base"
settle_require = true

[chains.base]
rpc = "https://rpc.example/base"
chain_id = 8453
contract = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
token = "0xfb6916095ca1df60bb79ce92ce3ea74c37c5d359"
key_file = "chain-key.json"
confirmations = 3

[chains.other]
rpc = "http://127.0.0.1:8545"
chain_id = 1337
contract = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
token = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
key_file = "/keys/other.json"
`

func loadChainConfig(t *testing.T, file string, envs map[string]string) (Config, error) {
	t.Helper()
	return LoadConfig(Input{Home: "/h", Env: env(envs), ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": file})})
}

// TestChainConfig: the table `chain` names is checked and resolved (key
// file under the data dir, the default window), the other tables are
// kept, and `chain` picked by the environment selects another.
func TestChainConfig(t *testing.T) {
	c, err := loadChainConfig(t, chainTable, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.ActiveChain()
	if err != nil || ch == nil {
		t.Fatalf("active chain: %v", err)
	}
	if ch.Name != "base" || ch.Domain.ChainID.Int64() != 8453 || ch.Domain.Contract.String() != "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed" ||
		ch.KeyFile != "/h/.gpumesh/chain-key.json" || ch.Confirmations != 3 || ch.MinWindow != 24*time.Hour || !c.SettleRequire || len(c.Chains) != 2 {
		t.Fatalf("chain %+v, require %v, %d tables", ch, c.SettleRequire, len(c.Chains))
	}
	c, err = loadChainConfig(t, chainTable, map[string]string{"GPUMESH_CHAIN": "other"})
	if err != nil {
		t.Fatal(err)
	}
	if ch, _ := c.ActiveChain(); ch.Name != "other" || ch.KeyFile != "/keys/other.json" || c.Sources["chain"] != "env:GPUMESH_CHAIN" {
		t.Fatalf("chain from the environment: %+v from %s", ch, c.Sources["chain"])
	}
}

// TestChainConfigErrors: each mistake in a chain table is refused at load
// with a reason that names it.
func TestChainConfigErrors(t *testing.T) {
	for name, c := range map[string]struct{ file, want string }{
		"no such table":      {`chain = "nope"` + "\n", `no [chains.nope] table`},
		"require, no chain":  {"settle_require = true\n", "settle_require is set but no chain"},
		"unknown key":        {strings.Replace(chainTable, "confirmations = 3", "confirmatons = 3", 1), "unknown keys chains.base.confirmatons"},
		"bad contract":       {strings.Replace(chainTable, "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"\ntoken = \"0xfb", "0x5aaeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"\ntoken = \"0xfb", 1), "contract"},
		"rpc scheme":         {strings.Replace(chainTable, "https://rpc.example/base", "ws://rpc.example/base", 1), "rpc"},
		"chain id":           {strings.Replace(chainTable, "chain_id = 8453", "chain_id = 0", 1), "chain_id 0"},
		"no key file":        {strings.Replace(chainTable, `key_file = "chain-key.json"`, "", 1), "key_file: not set"},
		"short window":       {strings.Replace(chainTable, "confirmations = 3", `min_window = "10m"`, 1), "min_window"},
		"chains not a table": {"chains = 5\n", "chains"},
	} {
		_, err := loadChainConfig(t, c.file, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// TestLoadChainKey: the payment key loads with the passphrase from the
// environment or from the passphrase file; with neither, or a wrong one,
// it is refused without echoing the passphrase.
func TestLoadChainKey(t *testing.T) {
	dir := t.TempDir()
	ch := &Chain{Name: "base", KeyFile: filepath.Join(dir, "k.json")}
	key, err := chainpay.NewKeyFile(ch.KeyFile, []byte("s3cret pass"), chainpay.LightScryptN, chainpay.LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadChainKey(ch, env(map[string]string{ChainPassphraseEnv: "s3cret pass"}))
	if err != nil || !got.Key.Equals(&key.Key) {
		t.Fatalf("from the environment: %v", err)
	}
	if _, err := LoadChainKey(ch, env(nil)); err == nil || !strings.Contains(err.Error(), ChainPassphraseEnv) {
		t.Fatalf("no passphrase: %v", err)
	}
	ch.PassphraseFile = filepath.Join(dir, "pass")
	if err := os.WriteFile(ch.PassphraseFile, []byte("s3cret pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadChainKey(ch, env(nil)); err != nil || !got.Key.Equals(&key.Key) {
		t.Fatalf("from the file: %v", err)
	}
	_, err = LoadChainKey(ch, env(map[string]string{ChainPassphraseEnv: "wrong horse"}))
	if err == nil || strings.Contains(err.Error(), "wrong horse") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("wrong passphrase: %v", err)
	}
}
