package audit

import (
	"context"

	"github.com/libp2p/go-libp2p/core/network"
)

// watched is a challenge stream whose reads run in the background from
// the moment the prover starts working: the challenger sends nothing
// while it waits for an answer, so a read that ends then means the
// stream ended (a reset, a close, a lost connection, a deadline passed)
// and cancels the work. Reads of the stream go through it; writes go to
// the stream.
type watched struct {
	network.Stream
	chunks chan []byte
	done   chan struct{}
	err    error // why the background read ended; set before chunks closes
	buf    []byte
}

// watch starts reading s in the background; cancel is called when a read
// of s fails.
func watch(s network.Stream, cancel context.CancelFunc) *watched {
	w := &watched{Stream: s, chunks: make(chan []byte), done: make(chan struct{})}
	go func() {
		defer close(w.chunks)
		for {
			b := make([]byte, 4096)
			n, err := s.Read(b)
			if n > 0 {
				select {
				case w.chunks <- b[:n]:
				case <-w.done:
					return
				}
			}
			if err != nil {
				w.err = err
				cancel()
				return
			}
		}
	}()
	return w
}

// Read implements io.Reader over what the background reader read.
func (w *watched) Read(p []byte) (int, error) {
	if len(w.buf) == 0 {
		b, ok := <-w.chunks
		if !ok {
			return 0, w.err
		}
		w.buf = b
	}
	n := copy(p, w.buf)
	w.buf = w.buf[n:]
	return n, nil
}

// stop ends the background reader once the stream is closed or reset.
func (w *watched) stop() { close(w.done) }
