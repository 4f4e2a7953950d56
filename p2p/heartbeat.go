package p2p

import (
	"context"
	"errors"
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

// Validate is the pubsub.ValidatorEx form of Check.
func (v *HeartbeatValidator) Validate(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	hb, err := v.Check(msg.GetFrom(), msg.Data)
	if err != nil {
		v.log.Debug("heartbeat dropped", "from", msg.ReceivedFrom, "err", err)
		return validationResult(err)
	}
	msg.ValidatorData = hb
	return pubsub.ValidationAccept
}

// Heartbeats is the heartbeat topic: join it, publish our own heartbeats
// and read everyone's, validated.
type Heartbeats struct {
	ps    *pubsub.PubSub
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	key   crypto.PrivKey
	self  peer.ID
	now   func() time.Time

	mu      sync.Mutex
	lastSeq uint64
}

// JoinHeartbeats registers the validator, joins and subscribes to the
// heartbeat topic. key signs the heartbeats this node publishes.
func JoinHeartbeats(ps *pubsub.PubSub, key crypto.PrivKey, now func() time.Time, log *slog.Logger) (*Heartbeats, error) {
	if now == nil {
		now = time.Now
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("heartbeats: %w", err)
	}
	v := NewHeartbeatValidator(now, log)
	if err := ps.RegisterTopicValidator(HeartbeatTopic, v.Validate, pubsub.WithValidatorTimeout(5*time.Second)); err != nil {
		return nil, fmt.Errorf("heartbeats: register validator: %w", err)
	}
	t, err := ps.Join(HeartbeatTopic)
	if err != nil {
		_ = ps.UnregisterTopicValidator(HeartbeatTopic)
		return nil, fmt.Errorf("heartbeats: join: %w", err)
	}
	if err := t.SetScoreParams(TopicScoreParams()); err != nil {
		_ = t.Close()
		_ = ps.UnregisterTopicValidator(HeartbeatTopic)
		return nil, fmt.Errorf("heartbeats: score params: %w", err)
	}
	sub, err := t.Subscribe()
	if err != nil {
		_ = t.Close()
		_ = ps.UnregisterTopicValidator(HeartbeatTopic)
		return nil, fmt.Errorf("heartbeats: subscribe: %w", err)
	}
	return &Heartbeats{ps: ps, topic: t, sub: sub, key: key, self: self, now: now}, nil
}

// Publish signs and gossips hb. Seq and TimeMs are set here: seq is the
// current unix time in milliseconds, or one more than the last seq if the
// clock has not moved on, so it keeps increasing across restarts.
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
	return nil
}

// Next returns the next validated heartbeat from another peer.
func (h *Heartbeats) Next(ctx context.Context) (*Heartbeat, error) {
	for {
		msg, err := h.sub.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("heartbeats: %w", err)
		}
		hb, ok := msg.ValidatorData.(*Heartbeat)
		if !ok {
			return nil, errors.New("heartbeats: message without validator data")
		}
		if hb.ID == h.self {
			continue
		}
		return hb, nil
	}
}

// Peers lists the peers we share the topic with.
func (h *Heartbeats) Peers() []peer.ID { return h.topic.ListPeers() }

// Close leaves the topic.
func (h *Heartbeats) Close() error {
	h.sub.Cancel()
	err := h.topic.Close()
	return errors.Join(err, h.ps.UnregisterTopicValidator(HeartbeatTopic))
}

// validationResult maps a validation error to pubsub's verdict: merely old
// records (expired, or a seq already superseded, which honest peers can
// relay late) are ignored; forged, malformed, oversized and future-dated
// ones are rejected, which lowers the forwarding peer's score.
func validationResult(err error) pubsub.ValidationResult {
	if errors.Is(err, ErrStale) || errors.Is(err, ErrExpired) {
		return pubsub.ValidationIgnore
	}
	return pubsub.ValidationReject
}
