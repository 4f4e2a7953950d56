package chain

import (
	"crypto/ecdsa"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"
)

// A payment key is kept in a go-ethereum keystore file (scrypt and
// AES-128-CTR, the wallet-standard "version 3" format), encrypted with a
// passphrase. Neither the key nor the passphrase is ever logged or put in
// an error.

// NewKeyFile makes a secp256k1 payment key and writes it to path
// (0600, not overwriting a file there), encrypted with pass at the
// standard scrypt cost (keystore.StandardScryptN; tests pass
// keystore.LightScryptN). It returns the key.
func NewKeyFile(path string, pass []byte, scryptN, scryptP int) (*ecdsa.PrivateKey, error) {
	key, err := crypto.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	k := &keystore.Key{Id: id, Address: crypto.PubkeyToAddress(key.PublicKey), PrivateKey: key}
	blob, err := keystore.EncryptKey(k, string(pass), scryptN, scryptP)
	if err != nil {
		return nil, fmt.Errorf("payment key: encrypt: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	if _, err := f.Write(blob); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("payment key: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("payment key: write %s: %w", path, err)
	}
	return key, nil
}

// LoadKeyFile decrypts the payment key in the keystore file at path.
func LoadKeyFile(path string, pass []byte) (*ecdsa.PrivateKey, error) {
	blob, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	k, err := keystore.DecryptKey(blob, string(pass))
	if err != nil {
		// keystore's errors name neither the key nor the passphrase.
		return nil, fmt.Errorf("payment key %s: %w (is the passphrase right?)", path, err)
	}
	return k.PrivateKey, nil
}
