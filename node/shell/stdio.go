package shell

import (
	"errors"
	"io"
	"sync"
	"time"
)

// Conn is the attached shell stream, as a Stdio writes to it.
type Conn interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

// Stdio is the standard streams of one attempt that a shell attaches to:
// its Stdin, Stdout and Stderr go to the runtime (runtime.Spec), and one
// shell stream at most attaches to them. Until then the output is held,
// MaxPending bytes at most (the job's writes wait beyond). The executor
// calls Finish once the job has ended and its output has been drained: a
// job that ends before its shell attaches (sh -c 'exit 3') keeps its
// output and its last frame for the shell to come, until Drop.
type Stdio struct {
	tty      bool
	inR      *io.PipeReader
	inW      *io.PipeWriter
	attached chan struct{} // closed when a stream attaches
	hangup   chan struct{} // closed when the attached stream ends before Finish
	finished chan struct{} // closed by Finish

	mu      sync.Mutex
	cond    *sync.Cond
	pending [][]byte // encoded frames held until a stream attaches
	held    int      // their bytes
	conn    Conn     // the attached stream; nil before, and once it failed
	isAtt   bool
	ended   bool
	hung    bool
	last    []byte // the encoded last frame, kept by Finish until a stream attaches
	closed  bool   // finished is closed

	wmu sync.Mutex // serializes writes to conn
}

// NewStdio makes the standard streams of an attempt: a terminal's when
// tty.
func NewStdio(tty bool) *Stdio {
	s := &Stdio{tty: tty, attached: make(chan struct{}), hangup: make(chan struct{}), finished: make(chan struct{})}
	s.inR, s.inW = io.Pipe()
	s.cond = sync.NewCond(&s.mu)
	return s
}

// TTY reports whether the attempt runs on a terminal.
func (s *Stdio) TTY() bool { return s.tty }

// Stdin is the job's standard input (runtime.Spec.Stdin): what the
// attached shell sends.
func (s *Stdio) Stdin() io.Reader { return s.inR }

// Stdout is the job's standard output (runtime.Spec.Stdout).
func (s *Stdio) Stdout() io.Writer { return output{s, KindStdout} }

// Stderr is the job's standard error (runtime.Spec.Stderr): with a
// terminal, the same as Stdout.
func (s *Stdio) Stderr() io.Writer {
	if s.tty {
		return s.Stdout()
	}
	return output{s, KindStderr}
}

// Attached is closed when a shell stream attaches.
func (s *Stdio) Attached() <-chan struct{} { return s.attached }

// Hangup is closed when the attached stream ended or failed before
// Finish: the executor stops the job then.
func (s *Stdio) Hangup() <-chan struct{} { return s.hangup }

type output struct {
	s *Stdio
	k Kind
}

func (o output) Write(p []byte) (int, error) {
	o.s.write(o.k, p)
	return len(p), nil
}

// write sends p as frames of kind k to the attached stream, holds it
// until one attaches (waiting while MaxPending bytes are held), or drops
// it once the stream is gone or the attempt has finished.
func (s *Stdio) write(k Kind, p []byte) {
	s.mu.Lock()
	for !s.isAtt && !s.ended && s.held > 0 && s.held+len(p) > MaxPending {
		s.cond.Wait()
	}
	switch {
	case s.ended || (s.isAtt && s.conn == nil):
		s.mu.Unlock()
	case !s.isAtt:
		for len(p) > 0 {
			n := min(len(p), MaxPayload)
			s.pending = append(s.pending, Frame{Kind: k, Payload: p[:n]}.Bytes())
			s.held += n
			p = p[n:]
		}
		s.mu.Unlock()
	default:
		// Not holding mu while a write waits: Finish must get it to set
		// the stream's write deadline. Attach took wmu before it let go
		// of mu, so the held output goes out first.
		c := s.conn
		s.mu.Unlock()
		s.wmu.Lock()
		err := WriteData(c, k, p)
		s.wmu.Unlock()
		if err != nil {
			s.lost()
		}
	}
}

// errAttached and errEnded are Attach's refusals.
var (
	errAttached = errors.New("a shell is attached already")
	errEnded    = errors.New("the attempt has ended")
)

// Attach makes c the shell stream: it writes the accepting Reply and the
// output held so far, then the output as it comes. It refuses a second
// stream, and any once the attempt has finished.
func (s *Stdio) Attach(c Conn) error {
	s.mu.Lock()
	switch {
	case s.isAtt:
		s.mu.Unlock()
		return errAttached
	case s.ended && s.last == nil:
		s.mu.Unlock()
		return errEnded
	}
	s.isAtt, s.conn = true, c
	pending, last := s.pending, s.last
	s.pending, s.held, s.last = nil, 0, nil
	if last != nil {
		pending = append(pending, last)
	}
	s.wmu.Lock()
	s.mu.Unlock()
	close(s.attached)
	err := WriteFrame(c, KindReply, nil)
	for _, b := range pending {
		if err != nil {
			break
		}
		_, err = c.Write(b)
	}
	s.wmu.Unlock()
	s.cond.Broadcast()
	if last != nil { // the job had ended: its last frame is out
		s.closeFinished()
		return nil
	}
	if err != nil {
		s.lost()
	}
	return nil
}

// closeFinished closes finished once.
func (s *Stdio) closeFinished() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.finished)
	}
}

// Drop gives up on a shell that never attached: the output and last
// frame a finished job left are dropped, and a later Attach is refused.
func (s *Stdio) Drop() {
	s.mu.Lock()
	drop := !s.isAtt && s.ended
	if drop {
		s.pending, s.held, s.last = nil, 0, nil
	}
	s.mu.Unlock()
	if drop {
		s.closeFinished()
	}
}

// lost marks the attached stream gone: later output is dropped, the job's
// stdin ends, and Hangup closes unless the attempt has finished.
func (s *Stdio) lost() {
	s.mu.Lock()
	s.conn = nil
	hang := !s.ended && !s.hung
	s.hung = s.hung || hang
	s.mu.Unlock()
	s.inW.CloseWithError(io.EOF)
	if hang {
		close(s.hangup)
	}
}

// input is the attached stream's reader side: it writes frames' stdin
// bytes to the job and ends its stdin.
func (s *Stdio) input(p []byte) error {
	_, err := s.inW.Write(p)
	return err
}

func (s *Stdio) closeInput() { _ = s.inW.Close() }

// finishWrite bounds Finish's write of the last frame: a renter that
// stopped reading does not hold the executor.
const finishWrite = 10 * time.Second

// Finish ends the attempt's streams with frame k (KindExit or KindEnded)
// and its payload, sent to the attached stream after all the output.
// Without one yet, the held output and that frame wait for one (Attach)
// until Drop. Later output is dropped, the job's stdin ends. Calls after
// the first do nothing.
func (s *Stdio) Finish(k Kind, payload []byte) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	if !s.isAtt {
		s.last = Frame{Kind: k, Payload: payload}.Bytes()
		s.mu.Unlock()
		s.cond.Broadcast()
		_ = s.inR.CloseWithError(io.ErrClosedPipe)
		return
	}
	c := s.conn
	s.mu.Unlock()
	s.cond.Broadcast()
	_ = s.inR.CloseWithError(io.ErrClosedPipe)
	if c != nil {
		_ = c.SetWriteDeadline(time.Now().Add(finishWrite))
		s.wmu.Lock()
		_ = WriteFrame(c, k, payload)
		s.wmu.Unlock()
	}
	s.closeFinished()
}

// Finished is closed by Finish.
func (s *Stdio) Finished() <-chan struct{} { return s.finished }
