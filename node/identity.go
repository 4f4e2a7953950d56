package node

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// KeyFile is the name of the identity key inside the data dir.
const KeyFile = "identity.key"

var (
	// ErrCorruptKey means the identity key file exists but cannot be used.
	ErrCorruptKey = errors.New("identity key is unreadable")
	// ErrKeyExposed means the identity key file may be read by users
	// other than its owner.
	ErrKeyExposed = errors.New("identity key is readable by others")
)

// LoadOrCreateKey returns the node's Ed25519 identity from dataDir, creating
// it (mode 0600, in a data dir of mode 0700) on first use. An existing key
// is never overwritten: a damaged one is an error that says what to do.
func LoadOrCreateKey(dataDir string) (crypto.PrivKey, bool, error) {
	path := filepath.Join(dataDir, KeyFile)
	k, err := loadKey(path)
	if err == nil {
		return k, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, false, fmt.Errorf("identity: create data dir %s: %w", dataDir, err)
	}
	k, _, err = crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("identity: generate key: %w", err)
	}
	b, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, false, fmt.Errorf("identity: marshal key: %w", err)
	}
	if err := writeNew(path, b); err != nil {
		if errors.Is(err, os.ErrExist) {
			// Another process created it first: use theirs.
			k, err = loadKey(path)
			return k, false, err
		}
		return nil, false, fmt.Errorf("identity: write %s: %w", path, err)
	}
	return k, true, nil
}

// LoadKey reads an existing identity key.
func LoadKey(dataDir string) (crypto.PrivKey, error) {
	return loadKey(filepath.Join(dataDir, KeyFile))
}

func loadKey(path string) (crypto.PrivKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("identity: read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("identity: read %s: %w", path, err)
	}
	// As ssh does: a key that others may read is refused, since anyone
	// who read it can sign as this node.
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("identity: %s: %w: mode %04o lets other users read it; run `chmod 600 %s` (and consider the key compromised if they did)", path, ErrKeyExposed, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("identity: read %s: %w", path, err)
	}
	k, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity: %s: %w: %v; restore it from a backup, or move it aside to start with a new identity (a new peer ID)", path, ErrCorruptKey, err)
	}
	if k.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("identity: %s: %w: key type %s, want Ed25519", path, ErrCorruptKey, k.Type())
	}
	return k, nil
}

// writeNew writes b to path durably, failing with os.ErrExist if path
// exists: it writes a temporary file, syncs it, then hard-links it into
// place, which never replaces an existing file.
func writeNew(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".identity-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// PeerID is the peer ID of key.
func PeerID(key crypto.PrivKey) peer.ID {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		// Ed25519 keys always yield an ID; anything else is a bug.
		panic(fmt.Sprintf("node: peer id of %s key: %v", key.Type(), err))
	}
	return id
}
