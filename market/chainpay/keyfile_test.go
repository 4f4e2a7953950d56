package chainpay

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyFile: a payment key written with a passphrase loads back with
// it, the file is 0600 and holds neither the key nor the passphrase in
// the clear, a wrong passphrase is refused without echoing it, and an
// existing file is not overwritten.
func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "chain-key.json")
	pass := []byte("correct horse battery staple")
	key, err := NewKeyFile(path, pass, LightScryptN, LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v, want 0600", fi.Mode(), err)
	}
	blob, _ := os.ReadFile(path)
	addr := AddressOf(key.PubKey())
	if strings.Contains(string(blob), string(pass)) || strings.Contains(string(blob), hex.EncodeToString(key.Serialize())) {
		t.Fatal("key file holds the passphrase or the raw key")
	}
	if !strings.Contains(string(blob), hex.EncodeToString(addr[:])) {
		t.Fatalf("key file does not name its address %s", addr)
	}
	got, err := LoadKeyFile(path, pass)
	if err != nil || !got.Key.Equals(&key.Key) {
		t.Fatalf("load: %v", err)
	}
	wrong := []byte("wrong passphrase 42")
	_, err = LoadKeyFile(path, wrong)
	if !errors.Is(err, ErrSignature) || strings.Contains(err.Error(), string(wrong)) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	if _, err := NewKeyFile(path, pass, LightScryptN, LightScryptP); err == nil {
		t.Fatal("NewKeyFile overwrote an existing key file")
	}
}

// TestKeyFileRefusesBadParams: an unknown version, cipher or kdf, a
// scrypt cost past MaxScryptN (a file that would hold the node for
// minutes), a bad field and an address that is not the key's are each
// refused before any work.
func TestKeyFileRefusesBadParams(t *testing.T) {
	key, err := NewKeyFile(filepath.Join(t.TempDir(), "k.json"), []byte("p"), LightScryptN, LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := EncryptKey(key, []byte("p"), LightScryptN, LightScryptP)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(change func(k *keyFileJSON)) []byte {
		var k keyFileJSON
		if err := json.Unmarshal(blob, &k); err != nil {
			t.Fatal(err)
		}
		change(&k)
		b, _ := json.Marshal(k)
		return b
	}
	cases := map[string]struct {
		blob []byte
		want error
	}{
		"version 1":      {edit(func(k *keyFileJSON) { k.Version = 1 }), ErrUnsupported},
		"pbkdf2":         {edit(func(k *keyFileJSON) { k.Crypto.KDF = "pbkdf2" }), ErrUnsupported},
		"n huge":         {edit(func(k *keyFileJSON) { k.Crypto.KDFParams.N = 1 << 30 }), ErrMalformed},
		"n not power":    {edit(func(k *keyFileJSON) { k.Crypto.KDFParams.N = 1000 }), ErrMalformed},
		"iv short":       {edit(func(k *keyFileJSON) { k.Crypto.CipherParams.IV = "00" }), ErrMalformed},
		"mac":            {edit(func(k *keyFileJSON) { k.Crypto.MAC = strings.Repeat("00", 32) }), ErrSignature},
		"other address":  {edit(func(k *keyFileJSON) { k.Address = strings.Repeat("ab", 20) }), ErrMalformed},
		"not json":       {[]byte("{"), ErrMalformed},
		"ciphertext hex": {edit(func(k *keyFileJSON) { k.Crypto.CipherText = "zz" }), ErrMalformed},
	}
	for name, c := range cases {
		if _, err := DecryptKey(c.blob, []byte("p")); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := DecryptKey(blob, []byte("p")); err != nil {
		t.Fatalf("untouched: %v", err)
	}
}
