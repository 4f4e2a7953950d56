package tunnel

import (
	"testing"

	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
)

// TestCopyBufWholeFrames: a pipe's buffer holds whole frames of the yamux
// that nodes run (p2p.New uses yamux.DefaultTransport), so that a full read
// leaves no short frame behind it. A libp2p that changes the frame size
// fails here rather than quietly costing writes.
func TestCopyBufWholeFrames(t *testing.T) {
	if got := yamux.DefaultTransport.MaxMessageSize; got != yamuxFrame {
		t.Fatalf("yamux MaxMessageSize = %d, want %d: set yamuxFrame to it", got, yamuxFrame)
	}
	if copyBuf%(yamuxFrame-yamuxHeader) != 0 {
		t.Fatalf("copyBuf = %d, not a multiple of a frame's payload %d", copyBuf, yamuxFrame-yamuxHeader)
	}
}
