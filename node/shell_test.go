package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/clock/clocktest"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/shell"
)

// lockedBuffer is a bytes.Buffer safe for a shell's reader and a test's
// polling.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestShellOnLease: a renter rents a lease with no job bound, then opens
// shells on it through its node's API (POST /api/v1/leases/{id}/shell,
// upgraded): a command whose stdin, stdout, stderr and exit status 3 pass
// through; an interactive shell on a terminal (its size, a resize,
// Ctrl-C interrupting sleep, Ctrl-D ending it with its status); a shell
// that another peer (not the lease's renter) and a second stream cannot
// attach to; and one that the lease's end cuts, which says so.
func TestShellOnLease(t *testing.T) {
	t.Parallel()
	clk := clocktest.New()
	jn := startJobNetWith(t, time.Minute, []Option{WithClock(clk)})
	b := &apiBackend{n: jn.renter}
	const token = "shell-test-token-0123456789abcdef"
	srv := httptest.NewServer(api.NewHandler(b, token))
	t.Cleanup(srv.Close)
	c := api.NewClient(strings.TrimPrefix(srv.URL, "http://"), token)
	t.Cleanup(c.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lv, err := b.Rent(ctx, market.RentRequest{AllowSimulated: true, AllowUnproven: true, Filter: mustFilter(t, "model=rtx4090"),
		Count: 1, Duration: time.Hour, MaxPrice: money.Unit, Wait: quoteWait, MinReputation: 0.5})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	sup := jn.cheap
	if lv.Supplier == jn.boot.ID().String() {
		sup = jn.boot
	}
	jobOver := func(id string) {
		t.Helper()
		eventually(t, time.Minute, "the shell's job to end on the renter's node", func() bool {
			v, err := jn.renter.jobs.ctrl.Job(id)
			return err == nil && job.Ended(v.State)
		})
	}

	// A command that ends before its shell stream attaches: its output
	// and exit status wait for it.
	sc, err := c.Shell(ctx, lv.LeaseID[:12], api.ShellRequest{Argv: []string{"sh", "-c", "echo early; exit 3"}})
	if err != nil {
		t.Fatalf("shell: %v", err)
	}
	var early lockedBuffer
	x, err := shell.Run(sc, shell.Streams{Stdout: &early, Stderr: &early})
	sc.Close()
	if err != nil || x.Status() != 3 || early.String() != "early\n" {
		t.Fatalf("shell -- sh -c 'echo early; exit 3' = %+v, %v, output %q; want exit status 3 and early", x, err, early.String())
	}
	jobOver(sc.JobID)

	// A command: stdin, stdout, stderr and its exit status pass through.
	sc, err = c.Shell(ctx, lv.LeaseID[:12], api.ShellRequest{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}})
	if err != nil {
		t.Fatalf("shell: %v", err)
	}
	var out, errOut lockedBuffer
	x, err = shell.Run(sc, shell.Streams{Stdin: strings.NewReader("hello\nworld\n"), Stdout: &out, Stderr: &errOut})
	sc.Close()
	if err != nil || x.Status() != 3 {
		t.Fatalf("shell -- sh -c 'cat; exit 3' = %+v, %v; want exit status 3", x, err)
	}
	if out.String() != "hello\nworld\n" || errOut.String() != "err\n" {
		t.Errorf("stdout %q, stderr %q; want the stdin back and err", out.String(), errOut.String())
	}
	jobOver(sc.JobID)

	// An interactive shell on a terminal.
	sc, err = c.Shell(ctx, lv.LeaseID, api.ShellRequest{TTY: true, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatalf("interactive shell: %v", err)
	}
	in, keys := io.Pipe()
	sizes := make(chan shell.Size, 1)
	type result struct {
		x   shell.Exit
		err error
	}
	ran := make(chan result, 1)
	var term lockedBuffer
	go func() {
		x, err := shell.Run(sc, shell.Streams{Stdin: in, Stdout: &term, Stderr: &term, Resize: sizes})
		ran <- result{x, err}
	}()
	type_ := func(s string) {
		t.Helper()
		if _, err := io.WriteString(keys, s); err != nil {
			t.Fatalf("type %q: %v", s, err)
		}
	}
	see := func(what string) {
		t.Helper()
		eventually(t, time.Minute, "the terminal to show "+what, func() bool { return strings.Contains(term.String(), what) })
	}
	type_("stty size\n")
	see("24 80\r\n")
	sizes <- shell.Size{Rows: 30, Cols: 100}
	eventually(t, time.Minute, "the resize to reach the job", func() bool {
		type_("stty size\n")
		time.Sleep(50 * time.Millisecond) // between tries only: the assertion waits on the output
		return strings.Contains(term.String(), "30 100\r\n")
	})
	type_("echo RE''ADY; sleep 100\n")
	see("READY\r\n")
	type_("\x03")
	type_("echo status $?\n")
	see("status 130\r\n")
	type_("(exit 7)\n\x04")
	select {
	case r := <-ran:
		if r.err != nil || r.x.Status() != 7 {
			t.Fatalf("interactive shell ended with %+v, %v; want exit status 7 (terminal %q)", r.x, r.err, term.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the interactive shell did not end on Ctrl-D (terminal %q)", term.String())
	}
	keys.Close()
	sc.Close()
	jobOver(sc.JobID)

	// A shell runs until the lease ends: no one else attaches to it.
	sc, err = c.Shell(ctx, lv.LeaseID, api.ShellRequest{Argv: []string{"sh", "-c", "echo up; sleep 1000"}})
	if err != nil {
		t.Fatalf("shell to outlive: %v", err)
	}
	defer sc.Close()
	out = lockedBuffer{}
	go func() {
		x, err := shell.Run(sc, shell.Streams{Stdout: &out, Stderr: io.Discard})
		ran <- result{x, err}
	}()
	see2 := func() bool { return out.String() == "up\n" }
	eventually(t, time.Minute, "the shell's output", see2)
	v, err := jn.renter.jobs.ctrl.Job(sc.JobID)
	if err != nil {
		t.Fatal(err)
	}
	id := mustID(t, lv.LeaseID)
	o := shell.Open{LeaseID: id, Attempt: v.Attempt}
	if _, err := shell.Dial(ctx, jobDialer{jn.boot}, sup.ID(), o); !shell.IsRefusal(err, shell.RefusedNoAttempt) {
		t.Errorf("another peer's shell on the lease: %v, want refused no-attempt", err)
	}
	if _, err := shell.Dial(ctx, jobDialer{jn.renter}, sup.ID(), o); !shell.IsRefusal(err, shell.RefusedAttached) {
		t.Errorf("a second shell stream to the attempt: %v, want refused attached", err)
	}
	o.Attempt++
	if _, err := shell.Dial(ctx, jobDialer{jn.renter}, sup.ID(), o); !shell.IsRefusal(err, shell.RefusedNoAttempt) {
		t.Errorf("a shell stream to another attempt: %v, want refused no-attempt", err)
	}
	clk.Advance(time.Hour + time.Minute)
	select {
	case r := <-ran:
		var ended *shell.EndedError
		if !errors.As(r.err, &ended) || !strings.Contains(ended.Why, "the lease ended") {
			t.Fatalf("shell at the lease's end: %+v, %v; want told the lease ended", r.x, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the shell did not end with its lease")
	}
}
