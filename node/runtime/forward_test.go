//go:build linux

package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnableForwarding: ip_forward is written only when it is not 1
// already, so a node whose /proc/sys is read-only (ProtectKernelTunables=)
// runs jobs on a machine where sysctl.d set it.
func TestEnableForwarding(t *testing.T) {
	dir := t.TempDir()
	on := filepath.Join(dir, "on")
	if err := os.WriteFile(on, []byte("1\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil { // nothing in it may be written
		t.Fatal(err)
	}
	if err := enableForwarding(on); err != nil {
		t.Fatalf("already 1: %v", err)
	}
	os.Chmod(dir, 0o700)
	off := filepath.Join(dir, "off")
	if err := os.WriteFile(off, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := enableForwarding(off); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(off); string(b) != "1" {
		t.Fatalf("after: %q, want 1", b)
	}
	if err := enableForwarding(filepath.Join(dir, "none", "ip_forward")); err == nil || !strings.Contains(err.Error(), "enable ip_forward") {
		t.Fatalf("unwritable: %v, want an error", err)
	}
}
