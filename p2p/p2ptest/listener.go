// Package p2ptest holds helpers for tests of the network layers.
package p2ptest

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

// Listener is a third party's plain TCP listener on loopback, for tests
// that check nobody is made to connect to it: it counts the connections it
// accepts and closes them at once.
type Listener struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted []string // remote addresses, in order
}

// Listen starts a Listener, closed when t ends.
func Listen(t testing.TB) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{ln: ln}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.accepted = append(l.accepted, conn.RemoteAddr().String())
			l.mu.Unlock()
			conn.Close()
		}
	}()
	return l
}

// Multiaddr is where l listens.
func (l *Listener) Multiaddr() ma.Multiaddr {
	return ma.StringCast(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", l.ln.Addr().(*net.TCPAddr).Port))
}

// Others connects once itself and, once l has accepted that connection
// (and so every connection completed before it: the kernel queues them in
// order), returns how many connections came from anyone else.
func (l *Listener) Others(t testing.TB) int {
	t.Helper()
	probe, err := net.Dial("tcp", l.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	self := probe.LocalAddr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.Lock()
		n, seen := len(l.accepted)-1, slices.Contains(l.accepted, self)
		l.mu.Unlock()
		if seen {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out after 30s waiting for the listener to accept the probe")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
