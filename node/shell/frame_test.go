package shell

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/p2p"
)

func hdr(k Kind, n int) []byte { return []byte{byte(k), byte(n >> 8), byte(n)} }

func TestReadFrame(t *testing.T) {
	open := Open{Version: Version, Attempt: 7, TTY: true, Size: Size{Rows: 24, Cols: 80}}
	open.LeaseID[0], open.LeaseID[31] = 0xab, 0xcd
	for _, tc := range []struct {
		name string
		in   []byte
		want Frame
		err  error // nil, io.EOF, io.ErrUnexpectedEOF or p2p.ErrMalformed
	}{
		{"stdin", append(hdr(KindStdin, 2), "hi"...), Frame{KindStdin, []byte("hi")}, nil},
		{"stdout", append(hdr(KindStdout, 1), 'x'), Frame{KindStdout, []byte("x")}, nil},
		{"stderr", append(hdr(KindStderr, 1), 'x'), Frame{KindStderr, []byte("x")}, nil},
		{"eof", hdr(KindEOF, 0), Frame{KindEOF, []byte{}}, nil},
		{"resize", append(hdr(KindResize, 4), 0, 30, 0, 100), Frame{KindResize, []byte{0, 30, 0, 100}}, nil},
		{"exit", append(hdr(KindExit, 5), 0, 0, 0, 3, 0), Frame{KindExit, []byte{0, 0, 0, 3, 0}}, nil},
		{"open", append(hdr(KindOpen, openSize), open.Encode()...), Frame{KindOpen, open.Encode()}, nil},
		{"accept", hdr(KindReply, 0), Frame{KindReply, []byte{}}, nil},
		{"ended", append(hdr(KindEnded, 15), "the lease ended"...), Frame{KindEnded, []byte("the lease ended")}, nil},
		{"max payload", append(hdr(KindStdout, MaxPayload), bytes.Repeat([]byte{'a'}, MaxPayload)...), Frame{KindStdout, bytes.Repeat([]byte{'a'}, MaxPayload)}, nil},

		{"nothing", nil, Frame{}, io.EOF},
		{"short header", []byte{'i', 0}, Frame{}, io.ErrUnexpectedEOF},
		{"short payload", append(hdr(KindStdin, 3), "hi"...), Frame{}, io.ErrUnexpectedEOF},
		{"too long", hdr(KindStdout, MaxPayload+1), Frame{}, p2p.ErrMalformed},
		{"unknown kind", append(hdr('z', 1), 'x'), Frame{}, p2p.ErrMalformed},
		{"empty stdin", hdr(KindStdin, 0), Frame{}, p2p.ErrMalformed},
		{"eof with bytes", append(hdr(KindEOF, 1), 'x'), Frame{}, p2p.ErrMalformed},
		{"resize short", append(hdr(KindResize, 2), 0, 1), Frame{}, p2p.ErrMalformed},
		{"resize zero", append(hdr(KindResize, 4), 0, 0, 0, 80), Frame{}, p2p.ErrMalformed},
		{"exit short", append(hdr(KindExit, 4), 0, 0, 0, 3), Frame{}, p2p.ErrMalformed},
		{"open short", append(hdr(KindOpen, 41), make([]byte, 41)...), Frame{}, p2p.ErrMalformed},
		{"ended not utf-8", append(hdr(KindEnded, 2), 0xff, 0xfe), Frame{}, p2p.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewReader(bytes.NewReader(tc.in)).Next()
			switch {
			case tc.err == nil && err != nil:
				t.Fatalf("Next = %v, want %q", err, tc.want.Kind)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("Next = %+v, %v; want %v", f, err, tc.err)
			case tc.err == nil && (f.Kind != tc.want.Kind || !bytes.Equal(f.Payload, tc.want.Payload)):
				t.Fatalf("Next = %q %q, want %q %q", f.Kind, f.Payload, tc.want.Kind, tc.want.Payload)
			}
		})
	}
}

func TestFrameRoundTrips(t *testing.T) {
	open := Open{Version: Version, Attempt: 1<<32 - 1, TTY: true, Size: Size{Rows: 65535, Cols: 1}}
	for i := range open.LeaseID {
		open.LeaseID[i] = byte(i)
	}
	var buf bytes.Buffer
	exits := []Exit{{Code: 3}, {Code: -1, Signal: 9}, {Code: 255}}
	if err := WriteFrame(&buf, KindOpen, open.Encode()); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&buf, KindResize, Size{Rows: 40, Cols: 120}.Encode()); err != nil {
		t.Fatal(err)
	}
	for _, x := range exits {
		_ = WriteFrame(&buf, KindExit, x.Encode())
	}
	_ = WriteFrame(&buf, KindReply, EncodeReply(Refuse(RefusedAttached, "a shell is attached already")))
	big := bytes.Repeat([]byte("0123456789"), MaxPayload/4) // 2.5 frames
	_ = WriteData(&buf, KindStdout, big)
	if err := WriteFrame(&buf, KindStdout, make([]byte, MaxPayload+1)); err == nil {
		t.Error("WriteFrame wrote a payload over MaxPayload")
	}

	r := NewReader(&buf)
	next := func(k Kind) Frame {
		t.Helper()
		f, err := r.Next()
		if err != nil || f.Kind != k {
			t.Fatalf("Next = %q, %v; want %q", f.Kind, err, k)
		}
		return f
	}
	if got := next(KindOpen).Open(); got != open {
		t.Errorf("open = %+v, want %+v", got, open)
	}
	if got := next(KindResize).Size(); got != (Size{Rows: 40, Cols: 120}) {
		t.Errorf("resize = %+v", got)
	}
	for _, want := range exits {
		if got := next(KindExit).Exit(); got != want {
			t.Errorf("exit = %+v, want %+v", got, want)
		}
	}
	if got := next(KindReply).Reply(); got == nil || got.Code != RefusedAttached || got.Message != "a shell is attached already" {
		t.Errorf("reply = %+v", got)
	}
	var data []byte
	for len(data) < len(big) {
		data = append(data, next(KindStdout).Payload...)
	}
	if !bytes.Equal(data, big) {
		t.Errorf("data frames carried %d bytes, not the %d written", len(data), len(big))
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		x    Exit
		want int
	}{{Exit{Code: 0}, 0}, {Exit{Code: 3}, 3}, {Exit{Code: -1, Signal: 2}, 130}, {Exit{Code: -1, Signal: 9}, 137}} {
		if got := tc.x.Status(); got != tc.want {
			t.Errorf("%+v.Status() = %d, want %d", tc.x, got, tc.want)
		}
	}
}

func TestCheckOpen(t *testing.T) {
	for _, tc := range []struct {
		o    Open
		want error
	}{
		{Open{Version: Version}, nil},
		{Open{Version: Version, TTY: true, Size: Size{1, 1}}, nil},
		{Open{Version: 2}, p2p.ErrUnsupported},
		{Open{Version: Version, TTY: true, Size: Size{0, 80}}, p2p.ErrMalformed},
	} {
		if err := CheckOpen(tc.o); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("CheckOpen(%+v) = %v, want %v", tc.o, err, tc.want)
		}
	}
}

func TestReplyTruncatedToFrame(t *testing.T) {
	long := Refuse(RefusedNoAttempt, "%s", strings.Repeat("é", MaxPayload))
	p := EncodeReply(long)
	if len(p) > MaxPayload {
		t.Fatalf("reply payload %d bytes, over MaxPayload", len(p))
	}
	if err := (Frame{Kind: KindReply, Payload: p}).Check(); err != nil {
		t.Fatalf("a truncated reply does not check: %v", err)
	}
}
