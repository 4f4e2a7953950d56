// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): a daemon started by a Type=notify unit tells systemd
// it is ready (READY=1), what it is doing (STATUS=...), that it is alive
// (WATCHDOG=1) and that it is stopping (STOPPING=1), each as a datagram
// to the unix socket named by $NOTIFY_SOCKET. Outside such a unit
// $NOTIFY_SOCKET is unset and every call does nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The states a daemon sends (see sd_notify(3)).
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
	Watchdog = "WATCHDOG=1"
)

// Status is the STATUS= line systemctl status shows for the unit.
func Status(s string) string {
	// One line: a newline would start another assignment.
	return "STATUS=" + strings.ReplaceAll(s, "\n", " ")
}

// Notifier sends states to systemd's notification socket. The zero
// Notifier (and a nil one) is disabled: Notify does nothing.
type Notifier struct {
	addr     *net.UnixAddr
	watchdog time.Duration
}

// New returns the Notifier that $NOTIFY_SOCKET and $WATCHDOG_USEC
// describe, as getenv reads them; disabled when NOTIFY_SOCKET is unset
// or empty. A socket name starting with "@" is in the abstract
// namespace. A WATCHDOG_USEC that is not a positive integer is an error,
// as is a WATCHDOG_PID that names another process (pid is this one's):
// that watchdog is not this process's to feed.
func New(getenv func(string) string, pid int) (*Notifier, error) {
	name := getenv("NOTIFY_SOCKET")
	if name == "" {
		return &Notifier{}, nil
	}
	if name[0] != '/' && name[0] != '@' {
		return nil, fmt.Errorf("sdnotify: NOTIFY_SOCKET %q: want an absolute path or an @abstract name", name)
	}
	n := &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}
	if usec := getenv("WATCHDOG_USEC"); usec != "" {
		if wpid := getenv("WATCHDOG_PID"); wpid != "" && wpid != strconv.Itoa(pid) {
			return n, nil // the watchdog is another process's
		}
		v, err := strconv.ParseInt(usec, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("sdnotify: WATCHDOG_USEC %q: want a positive number of microseconds", usec)
		}
		n.watchdog = time.Duration(v) * time.Microsecond
	}
	return n, nil
}

// Enabled reports whether a notification socket is set.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// WatchdogInterval is how often WATCHDOG=1 should be sent: half the
// unit's WatchdogSec, as sd_watchdog_enabled(3) advises; 0 when the unit
// has no watchdog for this process.
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog / 2
}

// Notify sends states, newline-joined, in one datagram. It does nothing
// when n is disabled.
func (n *Notifier) Notify(states ...string) error {
	if !n.Enabled() {
		return nil
	}
	if len(states) == 0 {
		return errors.New("sdnotify: no state to send")
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: dial %s: %w", n.addr.Name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(states, "\n"))); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", n.addr.Name, err)
	}
	return nil
}
