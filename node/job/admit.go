package job

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// gate caps the session streams a supplier holds before their Hello is
// admitted, per remote peer and in all: a peer without a lease can make
// it hold only a few small reads, each for at most the header timeout.
type gate struct {
	perPeer, total int

	mu     sync.Mutex
	n      int
	byPeer map[peer.ID]int
}

func newGate(perPeer, total int) *gate {
	return &gate{perPeer: perPeer, total: total, byPeer: map[peer.ID]int{}}
}

// enter takes a slot for a stream from p. It reports false when p, or
// everyone together, holds all the slots; otherwise leave gives the slot
// back (once, however often it is called).
func (g *gate) enter(p peer.ID) (leave func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= g.total || g.byPeer[p] >= g.perPeer {
		return nil, false
	}
	g.n++
	g.byPeer[p]++
	var once sync.Once
	return func() { once.Do(func() { g.leave(p) }) }, true
}

func (g *gate) leave(p peer.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.byPeer[p]--; g.byPeer[p] <= 0 {
		delete(g.byPeer, p)
	}
}

// held is the number of slots taken, by p or (p empty) in all.
func (g *gate) held(p peer.ID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p == "" {
		return g.n
	}
	return g.byPeer[p]
}

// checkStartSizes checks the sizes a start Hello announces, before
// anything of that size is read.
func checkStartSizes(h *pb.Hello) string {
	switch {
	case h.SpecSize == 0 || h.SpecSize > MaxSpecSize:
		return fmt.Sprintf("spec_size %d: want 1 to %d bytes", h.SpecSize, MaxSpecSize)
	case h.CheckpointSize > MaxCheckpointSize:
		return fmt.Sprintf("checkpoint_size %d: over %d bytes", h.CheckpointSize, MaxCheckpointSize)
	case h.CheckpointSize > 0 && len(h.CheckpointHash) != 32:
		return "checkpoint without a 32-byte hash"
	}
	return ""
}

// errCheckpointHash is a start's checkpoint that is not the one its Hello
// announced.
var errCheckpointHash = errors.New("the checkpoint does not match checkpoint_hash")

// readBody reads an admitted start's spec and checkpoint: exactly the
// sizes its Hello announced, back to back and unframed, the checkpoint
// checked against its hash. The caller has reserved that much memory for
// the stream.
func readBody(st io.Reader, h *pb.Hello) (spec, checkpoint []byte, err error) {
	spec = make([]byte, h.SpecSize)
	if _, err := io.ReadFull(st, spec); err != nil {
		return nil, nil, fmt.Errorf("read %d bytes of spec: %w", h.SpecSize, err)
	}
	if h.CheckpointSize == 0 {
		return spec, nil, nil
	}
	checkpoint = make([]byte, h.CheckpointSize)
	if _, err := io.ReadFull(st, checkpoint); err != nil {
		return nil, nil, fmt.Errorf("read %d bytes of checkpoint: %w", h.CheckpointSize, err)
	}
	if sum := sha256.Sum256(checkpoint); string(sum[:]) != string(h.CheckpointHash) {
		return nil, nil, errCheckpointHash
	}
	return spec, checkpoint, nil
}

// refused is a Welcome that refuses a Hello, saying why.
func refused(format string, args ...any) *pb.Welcome {
	return &pb.Welcome{Refused: fmt.Sprintf(format, args...)}
}

// busy is a Welcome that refuses a Hello for now: the renter tries again.
func busy(format string, args ...any) *pb.Welcome {
	return &pb.Welcome{Refused: "busy: " + fmt.Sprintf(format, args...), Busy: true}
}

// Handshake is the renter's side of a session's opening on a fresh
// stream: it writes h, reads the supplier's Welcome and, when a start is
// admitted (send_body), writes the spec and checkpoint and reads the final
// Welcome. A start's h must announce spec_size and checkpoint_size; spec
// and checkpoint are nil for an attach. The caller sets the deadlines.
func Handshake(st network.Stream, h *pb.Hello, spec, checkpoint []byte) (*pb.Welcome, error) {
	if len(h.Lease) > 0 && (int(h.SpecSize) != len(spec) || int(h.CheckpointSize) != len(checkpoint)) {
		return nil, fmt.Errorf("hello announces %d + %d bytes, body has %d + %d", h.SpecSize, h.CheckpointSize, len(spec), len(checkpoint))
	}
	if err := p2p.WriteMsg(st, h); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	var w pb.Welcome
	if err := p2p.ReadMsg(st, MaxWelcomeSize, &w); err != nil {
		return nil, fmt.Errorf("read welcome: %w", err)
	}
	if !w.SendBody || w.Refused != "" {
		return &w, nil
	}
	for _, b := range [][]byte{spec, checkpoint} {
		if _, err := st.Write(b); err != nil {
			return nil, fmt.Errorf("send spec and checkpoint: %w", err)
		}
	}
	w.Reset()
	if err := p2p.ReadMsg(st, MaxWelcomeSize, &w); err != nil {
		return nil, fmt.Errorf("read welcome: %w", err)
	}
	if w.SendBody {
		return nil, errors.New("read welcome: the supplier asked for the body twice")
	}
	return &w, nil
}
