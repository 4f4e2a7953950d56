package p2p

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

// maxTrackedSenders bounds the replay table of HeartbeatValidator.
const maxTrackedSenders = 10000

// HeartbeatValidator is the GossipSub validator of HeartbeatTopic. It
// rejects (and so penalises the forwarding peer) heartbeats that are
// oversized, malformed, forged, not authored by the pubsub sender, expired,
// future-dated or replayed (a seq not above the last one accepted from that
// peer).
type HeartbeatValidator struct {
	now func() time.Time
	log *slog.Logger

	mu      sync.Mutex
	lastSeq map[peer.ID]uint64
}

// NewHeartbeatValidator returns a validator using now as its clock.
func NewHeartbeatValidator(now func() time.Time, log *slog.Logger) *HeartbeatValidator {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &HeartbeatValidator{now: now, log: log, lastSeq: make(map[peer.ID]uint64)}
}

// Check validates one message: data signed by author. It records the seq
// of every heartbeat it accepts.
func (v *HeartbeatValidator) Check(author peer.ID, data []byte) (*Heartbeat, error) {
	hb, err := OpenHeartbeat(data, v.now())
	if err != nil {
		return nil, err
	}
	if hb.ID != author {
		return nil, fmt.Errorf("heartbeat of %s: %w: published by %s", hb.ID, ErrSignerMismatch, author)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if last, ok := v.lastSeq[hb.ID]; ok && hb.Seq <= last {
		return nil, fmt.Errorf("heartbeat of %s: %w: seq %d, already saw %d", hb.ID, ErrStale, hb.Seq, last)
	}
	if len(v.lastSeq) >= maxTrackedSenders {
		// Forget everyone rather than grow without bound; expiry still
		// bounds what a replay can achieve.
		clear(v.lastSeq)
	}
	v.lastSeq[hb.ID] = hb.Seq
	return hb, nil
}

// Heartbeats is the heartbeat topic: join it, publish our own heartbeats
// and read everyone's, validated.
type Heartbeats struct {
	*Topic[*Heartbeat]
	key crypto.PrivKey
	now func() time.Time

	mu      sync.Mutex
	lastSeq uint64
}

// JoinHeartbeats registers the validator, joins and subscribes to the
// heartbeat topic. key signs the heartbeats this node publishes.
func JoinHeartbeats(ps *pubsub.PubSub, key crypto.PrivKey, now func() time.Time, log *slog.Logger, opts ...TopicOption) (*Heartbeats, error) {
	if now == nil {
		now = time.Now
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("heartbeats: %w", err)
	}
	v := NewHeartbeatValidator(now, log)
	t, err := JoinTopic(ps, self, HeartbeatTopic, v.Check, log, opts...)
	if err != nil {
		return nil, err
	}
	return &Heartbeats{Topic: t, key: key, now: now}, nil
}

// Publish signs and gossips hb. Seq and TimeMs are set here: seq is the
// current unix time in milliseconds, or one more than the last seq if the
// clock has not moved on, so it keeps increasing across restarts. It does
// not wait for peers: a lone node's heartbeat is simply not heard.
func (h *Heartbeats) Publish(ctx context.Context, hb *pb.Heartbeat) error {
	now := h.now()
	h.mu.Lock()
	seq := max(uint64(now.UnixMilli()), h.lastSeq+1)
	h.lastSeq = seq
	h.mu.Unlock()
	hb.Seq, hb.TimeMs = seq, now.UnixMilli()
	data, err := SealHeartbeat(hb, h.key)
	if err != nil {
		return err
	}
	if err := h.topic.Publish(ctx, data); err != nil {
		return fmt.Errorf("heartbeats: publish: %w", err)
	}
	h.published()
	return nil
}

// Next returns the next validated heartbeat from another peer.
func (h *Heartbeats) Next(ctx context.Context) (*Heartbeat, error) {
	m, err := h.Topic.Next(ctx)
	if err != nil {
		return nil, err
	}
	return m.Value, nil
}
