package shell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
)

// newHost is a real libp2p host on loopback TCP.
func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
		libp2p.Security(libp2ptls.ID, libp2ptls.New), libp2p.Security(noise.ID, noise.New))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// opener opens streams of one protocol on a host (as a node's job dialer).
type opener struct{ h host.Host }

func (o opener) NewStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error) {
	return o.h.NewStream(ctx, p, proto)
}

// catJob stands in for a job on s: it copies its stdin to its stdout
// and, at the end of its stdin, exits with code.
func catJob(t *testing.T, s *Stdio, code int32) {
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		_, _ = io.Copy(s.Stdout(), s.Stdin())
		s.Finish(KindExit, Exit{Code: code}.Encode())
	}()
}

type rig struct {
	sup, renter host.Host
	srv         *Server
	mu          sync.Mutex
	attempts    map[uint32]*Stdio
}

// newRig starts a supplier whose resolver admits the renter's shells to
// the Stdios of attempts.
func newRig(t *testing.T) *rig {
	r := &rig{sup: newHost(t), renter: newHost(t), attempts: map[uint32]*Stdio{}}
	srv, err := NewServer(ServerConfig{Host: r.sup, Resolve: func(from peer.ID, o Open) (Target, *Refusal) {
		r.mu.Lock()
		s := r.attempts[o.Attempt]
		r.mu.Unlock()
		if from != r.renter.ID() || s == nil {
			return Target{}, Refuse(RefusedNoAttempt, "no attempt %d of yours", o.Attempt)
		}
		return Target{Stdio: s}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	r.srv = srv
	if err := r.renter.Connect(context.Background(), peer.AddrInfo{ID: r.sup.ID(), Addrs: r.sup.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) add(attempt uint32, s *Stdio) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[attempt] = s
}

func (r *rig) dial(t *testing.T, from host.Host, o Open) (network.Stream, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return Dial(ctx, opener{from}, r.sup.ID(), o)
}

func TestServerCarriesAShell(t *testing.T) {
	r := newRig(t)
	s := NewStdio(false)
	r.add(1, s)
	catJob(t, s, 3)
	st, err := r.dial(t, r.renter, Open{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	in := strings.Repeat("0123456789", 5000) // several frames
	var out, errOut bytes.Buffer
	x, err := Run(st, Streams{Stdin: strings.NewReader(in), Stdout: &out, Stderr: &errOut})
	if err != nil || x.Status() != 3 {
		t.Fatalf("Run = %+v, %v; want exit status 3", x, err)
	}
	if out.String() != in || errOut.Len() != 0 {
		t.Errorf("stdout %d bytes (want the %d of stdin), stderr %q", out.Len(), len(in), errOut.String())
	}
}

// A job that ended before its shell attached keeps its output and exit
// for it; once dropped, a shell is refused.
func TestFinishBeforeAttach(t *testing.T) {
	r := newRig(t)
	s := NewStdio(false)
	r.add(1, s)
	_, _ = s.Stdout().Write([]byte("early\n"))
	_, _ = s.Stderr().Write([]byte("oops\n"))
	s.Finish(KindExit, Exit{Code: -1, Signal: 9}.Encode())
	st, err := r.dial(t, r.renter, Open{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	x, err := Run(st, Streams{Stdout: &out, Stderr: &errOut})
	st.Close()
	if err != nil || x.Status() != 137 || out.String() != "early\n" || errOut.String() != "oops\n" {
		t.Fatalf("Run = %+v, %v, stdout %q, stderr %q; want status 137 and the output", x, err, out.String(), errOut.String())
	}

	dropped := NewStdio(false)
	r.add(2, dropped)
	dropped.Finish(KindEnded, []byte("the lease ended"))
	dropped.Drop()
	if _, err := r.dial(t, r.renter, Open{Attempt: 2}); !IsRefusal(err, RefusedNotRunning) {
		t.Errorf("a shell to a dropped attempt: %v, want refused not-running", err)
	}
}

func TestServerRefuses(t *testing.T) {
	r := newRig(t)
	plain, term := NewStdio(false), NewStdio(true)
	r.add(1, plain)
	r.add(2, term)
	stranger := newHost(t)
	if err := stranger.Connect(context.Background(), peer.AddrInfo{ID: r.sup.ID(), Addrs: r.sup.Addrs()}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		from host.Host
		o    Open
		want string
	}{
		{"another peer", stranger, Open{Attempt: 1}, RefusedNoAttempt},
		{"no such attempt", r.renter, Open{Attempt: 9}, RefusedNoAttempt},
		{"terminal on a pipe", r.renter, Open{Attempt: 1, TTY: true, Size: Size{24, 80}}, RefusedTTY},
		{"pipe on a terminal", r.renter, Open{Attempt: 2}, RefusedTTY},
		{"terminal of no size", r.renter, Open{Attempt: 2, TTY: true}, RefusedMalformed},
	} {
		if _, err := r.dial(t, tc.from, tc.o); !IsRefusal(err, tc.want) {
			t.Errorf("%s: %v, want refused %s", tc.name, err, tc.want)
		}
	}
	first, err := r.dial(t, r.renter, Open{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := r.dial(t, r.renter, Open{Attempt: 1}); !IsRefusal(err, RefusedAttached) {
		t.Errorf("a second stream: %v, want refused attached", err)
	}

	// Raw first frames: not an open, another version, a length over the
	// bound.
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"stdin first", Frame{Kind: KindStdin, Payload: []byte("x")}.Bytes(), RefusedMalformed},
		{"version 2", Frame{Kind: KindOpen, Payload: Open{Version: 2, Attempt: 1}.Encode()}.Bytes(), RefusedVersion},
		{"too long", hdr(KindOpen, MaxPayload+1), RefusedMalformed},
	} {
		st, err := r.renter.NewStream(context.Background(), r.sup.ID(), Protocol)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.SetDeadline(time.Now().Add(time.Minute))
		if _, err := st.Write(tc.frame); err != nil {
			t.Fatal(err)
		}
		f, err := NewReader(st).Next()
		st.Close()
		if err != nil || f.Kind != KindReply || f.Reply() == nil || f.Reply().Code != tc.want {
			t.Errorf("%s: %q %v, want a reply refusing %s", tc.name, f.Kind, err, tc.want)
		}
	}
}

// A frame the renter may not send, once attached, is a hang-up; so is a
// reset stream.
func TestHangup(t *testing.T) {
	r := newRig(t)
	for i, bad := range []func(network.Stream){
		func(st network.Stream) { _ = WriteFrame(st, KindExit, Exit{}.Encode()) },
		func(st network.Stream) { _, _ = st.Write(hdr('z', 0)) },
		func(st network.Stream) { _ = st.Reset() },
	} {
		s := NewStdio(false)
		r.add(uint32(i+1), s)
		st, err := r.dial(t, r.renter, Open{Attempt: uint32(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		bad(st)
		select {
		case <-s.Hangup():
		case <-time.After(time.Minute):
			t.Fatalf("case %d: no hang-up", i)
		}
		st.Close()
		s.Finish(KindEnded, []byte("stopped: the renter's shell hung up"))
	}
	// A clean close of the renter's write half only ends the job's stdin.
	s := NewStdio(false)
	r.add(9, s)
	catJob(t, s, 0)
	st, err := r.dial(t, r.renter, Open{Attempt: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_ = WriteData(st, KindStdin, []byte("bye"))
	_ = st.CloseWrite()
	var out bytes.Buffer
	x, err := Run(struct {
		io.Reader
		io.Writer
	}{st, io.Discard}, Streams{Stdout: &out, Stderr: io.Discard})
	if err != nil || x.Status() != 0 || out.String() != "bye" {
		t.Fatalf("after a half-close: %+v, %v, %q", x, err, out.String())
	}
	select {
	case <-s.Hangup():
		t.Error("a half-close was taken for a hang-up")
	default:
	}
	if errors.Is(err, ErrNoExit) {
		t.Error("no exit after a half-close")
	}
}

// A renter that stops reading holds neither the job's end nor the
// executor: Finish sets a deadline on the stream's writes.
func TestFinishWithARenterThatDoesNotRead(t *testing.T) {
	r := newRig(t)
	s := NewStdio(false)
	r.add(1, s)
	st, err := r.dial(t, r.renter, Open{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wrote := make(chan struct{})
	go func() { // the job writes far more than the stream's window
		defer close(wrote)
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for range 512 {
			_, _ = s.Stdout().Write(chunk)
		}
	}()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		time.Sleep(100 * time.Millisecond) // let the writes fill the window; the assertion is that Finish returns
		s.Finish(KindExit, Exit{}.Encode())
	}()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatal("Finish waited on a renter that does not read")
	}
	select {
	case <-wrote:
	case <-time.After(time.Minute):
		t.Fatal("the job's writes stayed blocked after Finish")
	}
}
