package node

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestKeyReadableByOthersIsRefused: as ssh does, a key file that group or
// others may read is refused with a message that says how to fix it, and
// it is left as it was.
func TestKeyReadableByOthersIsRefused(t *testing.T) {
	dir := t.TempDir()
	k, created, err := LoadOrCreateKey(dir)
	if err != nil || !created {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KeyFile)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateKey(dir)
		if !errors.Is(err, ErrKeyExposed) || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %04o: err = %v, want ErrKeyExposed with advice", mode, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	again, _, err := LoadOrCreateKey(dir)
	if err != nil || !again.Equals(k) {
		t.Fatalf("after chmod 600: %v", err)
	}
}
