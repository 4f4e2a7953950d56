package chain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/crypto"
)

// TestKeyFile: a payment key written with a passphrase loads back with
// it, the file is 0600 and holds neither the key nor the passphrase in
// the clear, a wrong passphrase is refused without echoing it, and an
// existing file is not overwritten.
func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chain-key.json")
	pass := []byte("correct horse battery staple")
	key, err := NewKeyFile(path, pass, keystore.LightScryptN, keystore.LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v, want 0600", fi.Mode(), err)
	}
	blob, _ := os.ReadFile(path)
	hexKey := strings.ToLower(strings.TrimPrefix(crypto.PubkeyToAddress(key.PublicKey).Hex(), "0x"))
	if strings.Contains(string(blob), string(pass)) || strings.Contains(string(blob), string(crypto.FromECDSA(key))) {
		t.Fatal("key file holds the passphrase or the raw key")
	}
	if !strings.Contains(strings.ToLower(string(blob)), hexKey) {
		t.Fatalf("key file does not name its address %s", hexKey)
	}
	got, err := LoadKeyFile(path, pass)
	if err != nil || !got.Equal(key) {
		t.Fatalf("load: %v", err)
	}
	wrong := []byte("wrong passphrase 42")
	_, err = LoadKeyFile(path, wrong)
	if err == nil || strings.Contains(err.Error(), string(wrong)) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	if _, err := NewKeyFile(path, pass, keystore.LightScryptN, keystore.LightScryptP); err == nil {
		t.Fatal("NewKeyFile overwrote an existing key file")
	}
}
