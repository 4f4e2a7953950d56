package shell

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gpumesh/gpumesh/p2p"
)

// FuzzReader: any bytes a peer sends decode into checked frames whose
// payloads are within bounds and whose decoders do not panic, or fail
// with a framing error; a decoded frame encodes back to the same bytes.
func FuzzReader(f *testing.F) {
	f.Add(append(hdr(KindStdin, 2), "hi"...))
	f.Add(append(hdr(KindOpen, openSize), Open{Version: 1, TTY: true, Size: Size{24, 80}}.Encode()...))
	f.Add(append(hdr(KindResize, 4), 0, 1, 0, 1))
	f.Add(append(hdr(KindExit, 5), 0xff, 0xff, 0xff, 0xff, 9))
	f.Add(append(hdr(KindReply, 3), 'a', 0, 'b'))
	f.Add(hdr(KindStdout, 0xffff))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		var consumed int
		for {
			fr, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, p2p.ErrMalformed) {
					t.Fatalf("Next: unexpected error %v", err)
				}
				return
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			enc := fr.Bytes()
			if !bytes.Equal(enc, in[consumed:consumed+len(enc)]) {
				t.Fatalf("frame %q re-encodes differently", fr.Kind)
			}
			consumed += len(enc)
			switch fr.Kind {
			case KindOpen:
				_ = CheckOpen(fr.Open())
			case KindResize:
				if s := fr.Size(); s.Rows == 0 || s.Cols == 0 {
					t.Fatalf("a checked resize of %+v", s)
				}
			case KindExit:
				_ = fr.Exit().Status()
			case KindReply:
				_ = fr.Reply()
			}
		}
	})
}
