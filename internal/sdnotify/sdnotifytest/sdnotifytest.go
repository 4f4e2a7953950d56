// Package sdnotifytest plays systemd's side of the notification protocol
// in tests: a real unixgram socket to set as NOTIFY_SOCKET, and the
// datagrams a daemon sends to it, one at a time.
package sdnotifytest

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// Listen makes a notification socket in a temporary directory of t and
// returns its path and a function that returns the next datagram,
// failing t when none comes within a minute. The socket closes with t.
func Listen(t testing.TB) (path string, next func() string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
}
