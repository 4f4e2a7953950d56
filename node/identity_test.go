package node

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
)

func TestKeyCreatedOnceWithMode0600(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, created, err := LoadOrCreateKey(dir)
	if err != nil || !created {
		t.Fatalf("first LoadOrCreateKey: created=%v err=%v", created, err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v, want 0600", st.Mode().Perm())
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %v, want 0700", dst.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKey(dir)
	if err != nil || created {
		t.Fatalf("second LoadOrCreateKey: created=%v err=%v", created, err)
	}
	if PeerID(k1) != PeerID(k2) {
		t.Fatalf("peer ID changed: %s -> %s", PeerID(k1), PeerID(k2))
	}
}

func TestCorruptKeyIsNotOverwritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFile)
	junk := []byte("this is not a key")
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadOrCreateKey(dir)
	if !errors.Is(err, ErrCorruptKey) {
		t.Fatalf("err = %v, want ErrCorruptKey", err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, junk) {
		t.Fatal("corrupt key file was modified")
	}
}

func newTestKey(t *testing.T) crypto.PrivKey {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
