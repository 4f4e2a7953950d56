//go:build linux

package runtime_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/runtime"
)

func TestStdinPipeEndsWithEOF(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	s := spec(t, &out, "sh", "-c", "cat; echo done; exit 3")
	s.Stdin = strings.NewReader("hello\nworld\n")
	res := runJob(t, rt, s)
	if res.ExitCode != 3 || res.Err != nil {
		t.Errorf("result = %+v, want exit 3", res)
	}
	if got, want := out.String(), "hello\nworld\ndone\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestNoStdinReadsNothing(t *testing.T) {
	rt := newRuntime(t)
	var out syncBuffer
	res := runJob(t, rt, spec(t, &out, "sh", "-c", "cat; test -t 0 || echo notty"))
	if res.ExitCode != 0 || out.String() != "notty\n" {
		t.Errorf("result = %+v, output %q; want exit 0, %q", res, out.String(), "notty\n")
	}
}

// terminalJob starts argv on a terminal of 80x24 and returns the writer
// of its input and its output.
func terminalJob(t *testing.T, argv ...string) (runtime.Process, *io.PipeWriter, *syncBuffer) {
	t.Helper()
	rt := newRuntime(t)
	out := &syncBuffer{}
	in, w := io.Pipe()
	t.Cleanup(func() { in.Close() })
	s := spec(t, out, argv...)
	s.Stdin, s.TTY = in, &runtime.WinSize{Rows: 24, Cols: 80}
	p := start(t, rt, s)
	return p, w, out
}

func send(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatalf("write %q to the terminal: %v", s, err)
	}
}

func TestTerminalSizeAndResize(t *testing.T) {
	p, w, out := terminalJob(t, "sh", "-c", "test -t 0 && test -t 1 && stty size; read x; stty size; exit 4")
	eventually(t, "24 80 from stty", func() bool { return strings.Contains(out.String(), "24 80\r\n") })
	term, ok := p.(runtime.Terminal)
	if !ok {
		t.Fatalf("%T is not a runtime.Terminal", p)
	}
	if err := term.Resize(runtime.WinSize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	send(t, w, "\n")
	res := wait(t, p)
	if res.ExitCode != 4 {
		t.Errorf("result = %+v, want exit 4 (output %q)", res, out.String())
	}
	if !strings.Contains(out.String(), "40 120\r\n") {
		t.Errorf("output = %q, want the new size 40 120", out.String())
	}
	if err := term.Resize(runtime.WinSize{Rows: 1, Cols: 1}); !errors.Is(err, runtime.ErrExited) {
		t.Errorf("Resize after the end = %v, want ErrExited", err)
	}
}

// An interactive shell on the terminal: Ctrl-C interrupts its foreground
// job (the terminal is its controlling terminal), Ctrl-D ends it, and its
// exit status is the job's.
func TestTerminalCtrlCAndCtrlD(t *testing.T) {
	p, w, out := terminalJob(t, "sh", "-i")
	// The echo of the input shows RE''ADY: only the command prints READY.
	send(t, w, "echo RE''ADY; sleep 100\n")
	eventually(t, "READY", func() bool { return strings.Contains(out.String(), "READY\r\n") })
	send(t, w, "\x03")
	send(t, w, "echo status $?\n")
	eventually(t, "the interrupted sleep's status", func() bool { return strings.Contains(out.String(), "status 130\r\n") })
	send(t, w, "(exit 7)\n\x04")
	res := wait(t, p)
	if res.ExitCode != 7 || res.Signal != "" {
		t.Errorf("result = %+v, want exit 7 (output %q)", res, out.String())
	}
}

func TestTerminalSizeMustBePositive(t *testing.T) {
	rt := newRuntime(t)
	s := spec(t, io.Discard, "true")
	s.TTY = &runtime.WinSize{Rows: 0, Cols: 80}
	if _, err := rt.Start(t.Context(), s); !errors.Is(err, runtime.ErrInvalidSpec) {
		t.Errorf("Start with a 80x0 terminal = %v, want ErrInvalidSpec", err)
	}
}
