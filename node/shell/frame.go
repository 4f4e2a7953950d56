package shell

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/p2p"
)

// Kind is a frame's type, its first byte on the wire.
type Kind byte

// Frame kinds (docs/PROTOCOL.md §40.2). Open and the input kinds go from
// the renter to the supplier; Reply and the output kinds the other way.
const (
	KindOpen   Kind = 'O' // renter: which attempt, terminal or not, its size; first frame
	KindReply  Kind = 'R' // supplier: "" accepted, else "code\x00message"; first frame
	KindStdin  Kind = 'i' // renter: bytes for the job's stdin
	KindEOF    Kind = 'e' // renter: stdin has ended (no payload)
	KindResize Kind = 'w' // renter: the terminal's new size, rows and cols (u16 each)
	KindStdout Kind = 'o' // supplier: bytes of the job's stdout (its terminal's output)
	KindStderr Kind = 'r' // supplier: bytes of the job's stderr (never with a terminal)
	KindExit   Kind = 'x' // supplier: the job's exit: code (i32), signal number (u8, 0: exited); last frame
	KindEnded  Kind = 'l' // supplier: the attempt ended without the job's own exit (the lease ended, a stop): why; last frame
)

// Wire limits.
const (
	// HeaderSize is a frame's header: its kind and its payload's length
	// (u16, big-endian).
	HeaderSize = 3
	// MaxPayload bounds a frame's payload: a reader refuses a longer one
	// before reading it.
	MaxPayload = 16 << 10
	// openSize is an Open's payload: version (u8), lease ID (32 bytes),
	// attempt (u32), flags (u8: FlagTTY), rows and cols (u16 each).
	openSize = 1 + 32 + 4 + 1 + 2 + 2
	// FlagTTY in an Open asks for the attempt's terminal.
	FlagTTY = 1
)

// Frame is one decoded frame. Payload aliases the reader's buffer until
// the next read.
type Frame struct {
	Kind    Kind
	Payload []byte
}

// Size is a terminal's size in characters.
type Size struct {
	Rows, Cols uint16
}

// Open is a renter's first frame: the attempt whose stdio it attaches to.
type Open struct {
	Version uint8
	LeaseID [32]byte
	Attempt uint32
	TTY     bool
	Size    Size // with TTY: the terminal's size, both at least 1
}

// Exit is the job's end as a KindExit frame carries it.
type Exit struct {
	Code   int32 // -1 when killed by a signal
	Signal uint8 // the signal's number; 0 when it exited
}

// Status is the exit status a shell gives its caller: the code, or
// 128+signal as shells do.
func (e Exit) Status() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return int(e.Code)
}

// Bytes returns the frame's encoding.
func (f Frame) Bytes() []byte {
	b := make([]byte, HeaderSize+len(f.Payload))
	b[0] = byte(f.Kind)
	binary.BigEndian.PutUint16(b[1:], uint16(len(f.Payload)))
	copy(b[HeaderSize:], f.Payload)
	return b
}

// WriteFrame writes one frame of kind k. A payload longer than
// MaxPayload is an error: split data with WriteData.
func WriteFrame(w io.Writer, k Kind, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("shell frame %q: %d bytes, limit %d", k, len(payload), MaxPayload)
	}
	_, err := w.Write(Frame{Kind: k, Payload: payload}.Bytes())
	return err
}

// WriteData writes p as frames of kind k of at most MaxPayload bytes
// each (none for an empty p).
func WriteData(w io.Writer, k Kind, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		if err := WriteFrame(w, k, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// Encode returns o's payload.
func (o Open) Encode() []byte {
	b := make([]byte, openSize)
	b[0] = o.Version
	copy(b[1:33], o.LeaseID[:])
	binary.BigEndian.PutUint32(b[33:], o.Attempt)
	if o.TTY {
		b[37] = FlagTTY
	}
	binary.BigEndian.PutUint16(b[38:], o.Size.Rows)
	binary.BigEndian.PutUint16(b[40:], o.Size.Cols)
	return b
}

// Encode returns s's payload (KindResize).
func (s Size) Encode() []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b, s.Rows)
	binary.BigEndian.PutUint16(b[2:], s.Cols)
	return b
}

// Encode returns e's payload (KindExit).
func (e Exit) Encode() []byte {
	b := make([]byte, 5)
	binary.BigEndian.PutUint32(b, uint32(e.Code))
	b[4] = e.Signal
	return b
}

// EncodeReply returns a Reply's payload: empty when r is nil (accepted).
func EncodeReply(r *Refusal) []byte {
	if r == nil {
		return nil
	}
	b := []byte(r.Code + "\x00" + r.Message)
	return truncateUTF8(b, MaxPayload)
}

// truncateUTF8 cuts b to at most n bytes without splitting a character.
func truncateUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[:n]
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return b
}

// Reader reads frames with one buffer of MaxPayload bytes.
type Reader struct {
	r   io.Reader
	buf []byte
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r, buf: make([]byte, HeaderSize+MaxPayload)}
}

// Next reads the next frame and checks it (Check). io.EOF: the stream
// ended cleanly between frames; a frame cut short is
// io.ErrUnexpectedEOF; a bad one wraps p2p.ErrMalformed.
func (r *Reader) Next() (Frame, error) {
	h := r.buf[:HeaderSize]
	if _, err := io.ReadFull(r.r, h); err != nil {
		return Frame{}, err
	}
	f := Frame{Kind: Kind(h[0])}
	n := int(binary.BigEndian.Uint16(h[1:]))
	if n > MaxPayload {
		return Frame{}, p2p.Errf(p2p.ErrMalformed, "shell frame %q: %d bytes, limit %d", f.Kind, n, MaxPayload)
	}
	f.Payload = r.buf[HeaderSize : HeaderSize+n]
	if _, err := io.ReadFull(r.r, f.Payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, f.Check()
}

// Check checks a frame's payload against its kind: a known kind, the
// fixed sizes of Open, Resize, EOF and Exit, data frames not empty, text
// valid UTF-8. Errors wrap p2p.ErrMalformed.
func (f Frame) Check() error {
	n := len(f.Payload)
	bad := func(format string, args ...any) error {
		return p2p.Errf(p2p.ErrMalformed, "shell frame %q: "+format, append([]any{f.Kind}, args...)...)
	}
	switch f.Kind {
	case KindOpen:
		if n != openSize {
			return bad("%d bytes, want %d", n, openSize)
		}
	case KindResize:
		if n != 4 {
			return bad("%d bytes, want 4", n)
		}
		if s := f.Size(); s.Rows == 0 || s.Cols == 0 {
			return bad("size %dx%d", s.Cols, s.Rows)
		}
	case KindEOF:
		if n != 0 {
			return bad("%d bytes, want none", n)
		}
	case KindExit:
		if n != 5 {
			return bad("%d bytes, want 5", n)
		}
	case KindStdin, KindStdout, KindStderr:
		if n == 0 {
			return bad("empty")
		}
	case KindReply, KindEnded:
		if !utf8.Valid(f.Payload) {
			return bad("not UTF-8")
		}
	default:
		return p2p.Errf(p2p.ErrMalformed, "shell frame kind 0x%02x unknown", byte(f.Kind))
	}
	return nil
}

// Open decodes a KindOpen payload (checked: Check passed). The version is
// not checked here: CheckOpen does.
func (f Frame) Open() Open {
	p := f.Payload
	o := Open{Version: p[0], Attempt: binary.BigEndian.Uint32(p[33:]), TTY: p[37]&FlagTTY != 0}
	copy(o.LeaseID[:], p[1:33])
	o.Size = Size{Rows: binary.BigEndian.Uint16(p[38:]), Cols: binary.BigEndian.Uint16(p[40:])}
	return o
}

// Size decodes a KindResize payload (checked).
func (f Frame) Size() Size {
	return Size{Rows: binary.BigEndian.Uint16(f.Payload), Cols: binary.BigEndian.Uint16(f.Payload[2:])}
}

// Exit decodes a KindExit payload (checked).
func (f Frame) Exit() Exit {
	return Exit{Code: int32(binary.BigEndian.Uint32(f.Payload)), Signal: f.Payload[4]}
}

// Reply decodes a KindReply payload: nil when it accepts.
func (f Frame) Reply() *Refusal {
	if len(f.Payload) == 0 {
		return nil
	}
	code, msg, _ := strings.Cut(string(f.Payload), "\x00")
	if code == "" {
		code = RefusedMalformed
	}
	return &Refusal{Protocol: refusalOf, Code: code, Message: msg}
}
