package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/node/shell"
)

// farEnd speaks the supplier's side of a shell's frames on c: it echoes
// stdin as stdout, reports each resize as a line, and exits with status
// 7 at Ctrl-D (0x04).
func farEnd(c net.Conn) {
	defer c.Close()
	rd := shell.NewReader(c)
	for {
		f, err := rd.Next()
		if err != nil {
			return
		}
		switch f.Kind {
		case shell.KindStdin:
			p := f.Payload
			if i := bytes.IndexByte(p, 0x04); i >= 0 {
				_ = shell.WriteData(c, shell.KindStdout, p[:i])
				_ = shell.WriteFrame(c, shell.KindExit, shell.Exit{Code: 7}.Encode())
				return
			}
			_ = shell.WriteData(c, shell.KindStdout, p)
		case shell.KindResize:
			s := f.Size()
			_ = shell.WriteData(c, shell.KindStdout, []byte("size "+strconv.Itoa(int(s.Rows))+"x"+strconv.Itoa(int(s.Cols))+"\n"))
		}
	}
}

// TestShellTerminal: the CLI's terminal end of a shell, on a real
// pseudo-terminal: raw mode while it runs (Ctrl-C is a byte that goes
// through, not a signal, and no echo or line editing), SIGWINCH sent as
// the new size, the remote exit status returned, and the terminal as it
// was afterwards.
func TestShellTerminal(t *testing.T) {
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptm.Close()
	defer pts.Close()
	before, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	go farEnd(b)
	type result struct {
		x   shell.Exit
		err error
	}
	ran := make(chan result, 1)
	go func() {
		x, err := runTerminal(a, pts, pts)
		a.Close()
		ran <- result{x, err}
	}()
	var seen bytes.Buffer
	read := make(chan []byte, 64)
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := ptm.Read(buf)
			if n > 0 {
				read <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				close(read)
				return
			}
		}
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.After(time.Minute)
		for !bytes.Contains(seen.Bytes(), []byte(what)) {
			select {
			case b, ok := <-read:
				if !ok {
					t.Fatalf("terminal closed before %q (saw %q)", what, seen.String())
				}
				seen.Write(b)
			case <-deadline:
				t.Fatalf("no %q on the terminal (saw %q)", what, seen.String())
			}
		}
	}
	// Raw mode: the terminal neither echoes nor signals; Ctrl-C reaches
	// the far end, which echoes it back once.
	eventuallyRaw(t, pts)
	if _, err := ptm.Write([]byte("ab\x03cd")); err != nil {
		t.Fatal(err)
	}
	waitFor("ab\x03cd")
	if bytes.Count(seen.Bytes(), []byte("ab")) != 1 {
		t.Errorf("the terminal echoed the input (%q): not raw", seen.String())
	}
	if err := pty.Setsize(ptm, &pty.Winsize{Rows: 33, Cols: 99}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	waitFor("size 33x99")
	if _, err := ptm.Write([]byte{0x04}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ran:
		if r.err != nil || r.x.Status() != 7 {
			t.Fatalf("runTerminal = %+v, %v; want exit status 7", r.x, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("runTerminal did not return after the exit")
	}
	after, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	// The terminal's files block in read(2), which their Close does not
	// end: a line wakes the shell's reader of the terminal (its stream is
	// closed: it returns), and the master reads EIO once the slave is
	// closed.
	if _, err := ptm.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	for range read {
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("terminal not restored: lflag %#x iflag %#x oflag %#x, were %#x %#x %#x", after.Lflag, after.Iflag, after.Oflag, before.Lflag, before.Iflag, before.Oflag)
	}
	if err := shellExit(io.Discard, shell.Exit{Code: 7}, nil); err == nil {
		t.Error("shellExit of status 7 is no error")
	} else if ee, ok := err.(exitError); !ok || ee.code != 7 {
		t.Errorf("shellExit of status 7 = %#v, want exit code 7", err)
	}
}

// eventuallyRaw waits until runTerminal has put the terminal in raw mode.
func eventuallyRaw(t *testing.T, f *os.File) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		if err == nil && st.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the terminal never went raw")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
