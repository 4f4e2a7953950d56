package shell

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// EndedError is a shell whose attempt ended without the job's own exit:
// the lease ended, or the supplier stopped the job.
type EndedError struct{ Why string }

func (e *EndedError) Error() string {
	return "the shell's job was ended on the supplier: " + e.Why
}

// ErrNoExit is a shell stream that ended without the job's exit or end.
var ErrNoExit = errors.New("the shell's stream ended without the job's exit: the supplier or the renter's node went away")

// Streams are the renter's ends of a shell.
type Streams struct {
	Stdin          io.Reader // sent to the job; its end is sent as KindEOF
	Stdout, Stderr io.Writer
	// Resize sends each size as KindResize (a terminal's SIGWINCH); nil:
	// none.
	Resize <-chan Size
}

// Run is the renter's end of an accepted shell stream c: it sends
// s.Stdin and the sizes from s.Resize, writes the output to s.Stdout and
// s.Stderr, and returns the job's exit, an *EndedError, or ErrNoExit (or
// a read error). It returns once the exit has come, without waiting for
// s.Stdin: the caller closes c and, where a read of s.Stdin can block,
// stops reading it.
func Run(c io.ReadWriter, s Streams) (Exit, error) {
	var wmu sync.Mutex
	send := func(k Kind, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		if k == KindStdin {
			return WriteData(c, k, p)
		}
		return WriteFrame(c, k, p)
	}
	done := make(chan struct{})
	defer close(done)
	if s.Stdin != nil {
		go func() {
			buf := make([]byte, MaxPayload)
			for {
				n, err := s.Stdin.Read(buf)
				if n > 0 && send(KindStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = send(KindEOF, nil)
					return
				}
			}
		}()
	} else {
		_ = send(KindEOF, nil)
	}
	if s.Resize != nil {
		go func() {
			for {
				select {
				case sz := <-s.Resize:
					if sz.Rows > 0 && sz.Cols > 0 && send(KindResize, sz.Encode()) != nil {
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	rd := NewReader(c)
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return Exit{}, ErrNoExit
		}
		if err != nil {
			return Exit{}, fmt.Errorf("shell stream: %w", err)
		}
		switch f.Kind {
		case KindStdout:
			if _, err := s.Stdout.Write(f.Payload); err != nil {
				return Exit{}, fmt.Errorf("write stdout: %w", err)
			}
		case KindStderr:
			if _, err := s.Stderr.Write(f.Payload); err != nil {
				return Exit{}, fmt.Errorf("write stderr: %w", err)
			}
		case KindExit:
			return f.Exit(), nil
		case KindEnded:
			return Exit{}, &EndedError{Why: string(f.Payload)}
		default:
			return Exit{}, fmt.Errorf("shell stream: a %q frame from the supplier", f.Kind)
		}
	}
}
