package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// listen makes a unixgram socket as systemd's, and returns its path and
// a function reading the next datagram. (sdnotifytest.Listen does the
// same for the rest of the module; a leaf under internal may not import
// it: arch_test.go.)
func listen(t *testing.T) (string, func() string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notification: %v", err)
		}
		return string(buf[:n])
	}
}

func TestNotifySendsDatagrams(t *testing.T) {
	path, next := listen(t)
	n, err := New(env(map[string]string{"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000"}), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !n.Enabled() || n.WatchdogInterval() != 15*time.Second {
		t.Fatalf("enabled %v, watchdog every %v; want true, 15s", n.Enabled(), n.WatchdogInterval())
	}
	if err := n.Notify(Ready, Status("3 peers,\nreach public")); err != nil {
		t.Fatal(err)
	}
	if got, want := next(), "READY=1\nSTATUS=3 peers, reach public"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if err := n.Notify(Watchdog); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "WATCHDOG=1" {
		t.Fatalf("got %q", got)
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	name := "@gpumesh-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + time.Now().Format("150405.000000000")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := New(env(map[string]string{"NOTIFY_SOCKET": name}), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Stopping); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err := conn.Read(buf)
	if err != nil || string(buf[:k]) != Stopping {
		t.Fatalf("got %q, %v", buf[:k], err)
	}
}

func TestDisabledDoesNothing(t *testing.T) {
	for _, n := range []*Notifier{nil, {}} {
		if n.Enabled() || n.WatchdogInterval() != 0 || n.Notify(Ready) != nil {
			t.Fatalf("%#v: want disabled", n)
		}
	}
	n, err := New(env(nil), 1)
	if err != nil || n.Enabled() {
		t.Fatalf("no NOTIFY_SOCKET: %v, %v", n, err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"relative socket", map[string]string{"NOTIFY_SOCKET": "run/notify"}, "absolute path"},
		{"bad watchdog", map[string]string{"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "soon"}, "WATCHDOG_USEC"},
		{"zero watchdog", map[string]string{"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "0"}, "WATCHDOG_USEC"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(env(c.env), 7)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestWatchdogOfAnotherProcess(t *testing.T) {
	n, err := New(env(map[string]string{"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}), 7)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Enabled() || n.WatchdogInterval() != 0 {
		t.Fatalf("enabled %v, interval %v: want enabled without watchdog", n.Enabled(), n.WatchdogInterval())
	}
}

func TestNotifyNoListener(t *testing.T) {
	n, err := New(env(map[string]string{"NOTIFY_SOCKET": filepath.Join(t.TempDir(), "gone")}), 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Ready); err == nil || !strings.Contains(err.Error(), "sdnotify:") {
		t.Fatalf("err %v, want a wrapped dial error", err)
	}
	if err := n.Notify(); err == nil {
		t.Fatal("no states: want an error")
	}
}
