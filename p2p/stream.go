package p2p

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// Stream protocols exchange protobuf messages, each prefixed by its length
// as an unsigned varint, with a size limit per protocol and a deadline on
// every stream.

// StreamTimeout bounds one request-response exchange.
const StreamTimeout = 10 * time.Second

// WriteMsg writes m with its varint length prefix.
func WriteMsg(s network.Stream, m proto.Message) error {
	b, err := marshalDeterministic(m)
	if err != nil {
		return err
	}
	return msgio.NewVarintWriter(s).WriteMsg(b)
}

// ReadMsg reads one length-prefixed message of at most limit bytes into m.
func ReadMsg(s network.Stream, limit int, m proto.Message) error {
	r := msgio.NewVarintReaderSize(s, limit)
	b, err := r.ReadMsg()
	if err != nil {
		return err
	}
	defer r.ReleaseMsg(b)
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// Request opens a stream to p on protocol pid, writes req, reads one
// response of at most limit bytes into resp and closes the stream. The
// whole exchange is bounded by ctx and StreamTimeout.
func Request(ctx context.Context, h host.Host, p peer.ID, pid protocol.ID, req, resp proto.Message, limit int) error {
	ctx, cancel := context.WithTimeout(ctx, StreamTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, pid)
	if err != nil {
		return fmt.Errorf("%s to %s: open stream: %w", pid, p, err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := WriteMsg(s, req); err != nil {
		s.Reset()
		return fmt.Errorf("%s to %s: write: %w", pid, p, err)
	}
	if resp == nil {
		return s.CloseWrite()
	}
	if err := ReadMsg(s, limit, resp); err != nil {
		s.Reset()
		return fmt.Errorf("%s to %s: read: %w", pid, p, err)
	}
	return nil
}

// Serve installs handle for pid on h (a host, or anything else that takes
// stream handlers): each inbound stream gets a deadline of StreamTimeout;
// it is reset if handle returns an error, closed otherwise.
func Serve(h interface {
	SetStreamHandler(protocol.ID, network.StreamHandler)
}, pid protocol.ID, handle func(s network.Stream) error) {
	h.SetStreamHandler(pid, func(s network.Stream) {
		_ = s.SetDeadline(time.Now().Add(StreamTimeout))
		if err := handle(s); err != nil {
			s.Reset()
			return
		}
		s.Close()
	})
}

// WriteRaw writes b (e.g. a signed envelope) with its varint length prefix.
func WriteRaw(s network.Stream, b []byte) error {
	return msgio.NewVarintWriter(s).WriteMsg(b)
}

// ReadRaw reads one length-prefixed message of at most limit bytes.
func ReadRaw(s network.Stream, limit int) ([]byte, error) {
	r := msgio.NewVarintReaderSize(s, limit)
	b, err := r.ReadMsg()
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), b...)
	r.ReleaseMsg(b)
	return out, nil
}

// Send opens a stream to p on pid, writes one raw length-prefixed message
// and closes the stream, all within ctx and StreamTimeout.
func Send(ctx context.Context, h host.Host, p peer.ID, pid protocol.ID, raw []byte) error {
	ctx, cancel := context.WithTimeout(ctx, StreamTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, pid)
	if err != nil {
		return fmt.Errorf("%s to %s: open stream: %w", pid, p, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := WriteRaw(s, raw); err != nil {
		s.Reset()
		return fmt.Errorf("%s to %s: write: %w", pid, p, err)
	}
	return s.Close()
}
