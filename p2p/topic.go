package p2p

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// CheckFunc validates one gossiped message published by author and
// returns its decoded value, of the topic's type T. Its error decides
// pubsub's verdict (see Verdict).
type CheckFunc[T any] func(author peer.ID, data []byte) (T, error)

// Topic is one gossip topic of signed records: joined with its validator,
// subscribed, and read as a stream of validated values of type T, the
// type its validator decodes (a market.Order, a *market.TradePrint ...).
type Topic[T any] struct {
	ps    *pubsub.PubSub
	name  string
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	self  peer.ID
	obs   Observer // nil: nothing is counted

	mu       sync.Mutex     // guards isClosed against waiters added while Close runs
	isClosed bool           // Close has begun
	closed   chan struct{}  // closed by Close: a Publish waiting for a peer gives up
	waiters  sync.WaitGroup // Publishes holding a topic event handler (waitPeer)
}

// Observer is told what happens on a topic, for metrics. Its methods
// must be cheap and safe for concurrent use: Validated runs in pubsub's
// validation.
type Observer interface {
	// Validated is told the verdict on a record another peer delivered:
	// err is nil when the validator accepted it, else the validator's
	// error (see Verdict).
	Validated(topic string, err error)
	// Published is told of each record this node published on topic.
	Published(topic string)
}

// TopicOption adjusts how a topic is joined.
type TopicOption func(*topicOptions)

type topicOptions struct {
	obs Observer
}

// WithObserver has o told of the topic's validations and publications.
func WithObserver(o Observer) TopicOption { return func(t *topicOptions) { t.obs = o } }

// Message is one validated message read from a Topic.
type Message[T any] struct {
	Author peer.ID // who published (and signed) it
	Value  T       // what the CheckFunc returned
	Data   []byte  // the raw message
}

// RelayCheckFunc is a CheckFunc that is also told the peer that
// delivered the message (pubsub's ReceivedFrom; self for the node's own
// messages), for validators that keep per-relay quotas.
type RelayCheckFunc[T any] func(author, from peer.ID, data []byte) (T, error)

// JoinTopic registers check as the validator of topic name, joins the
// topic with gpumesh's scoring parameters and subscribes to it.
func JoinTopic[T any](ps *pubsub.PubSub, self peer.ID, name string, check CheckFunc[T], log *slog.Logger, opts ...TopicOption) (*Topic[T], error) {
	return JoinRelayTopic(ps, self, name, func(author, _ peer.ID, data []byte) (T, error) { return check(author, data) }, log, opts...)
}

// JoinRelayTopic is JoinTopic with a validator told the relaying peer.
func JoinRelayTopic[T any](ps *pubsub.PubSub, self peer.ID, name string, check RelayCheckFunc[T], log *slog.Logger, opts ...TopicOption) (*Topic[T], error) {
	if log == nil {
		log = slog.Default()
	}
	var o topicOptions
	for _, opt := range opts {
		opt(&o)
	}
	validate := func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		v, err := check(msg.GetFrom(), msg.ReceivedFrom, msg.Data)
		// The node's own records are validated as they are published;
		// only what other peers deliver is counted.
		if o.obs != nil && msg.ReceivedFrom != self {
			o.obs.Validated(name, err)
		}
		if err != nil {
			log.Debug("gossip dropped", "topic", name, "from", msg.ReceivedFrom, "author", msg.GetFrom(), "err", err)
			return Verdict(err)
		}
		msg.ValidatorData = v
		return pubsub.ValidationAccept
	}
	if err := ps.RegisterTopicValidator(name, validate, pubsub.WithValidatorTimeout(5*time.Second)); err != nil {
		return nil, fmt.Errorf("topic %s: register validator: %w", name, err)
	}
	t, err := ps.Join(name)
	if err != nil {
		_ = ps.UnregisterTopicValidator(name)
		return nil, fmt.Errorf("topic %s: join: %w", name, err)
	}
	fail := func(err error) (*Topic[T], error) {
		_ = t.Close()
		_ = ps.UnregisterTopicValidator(name)
		return nil, fmt.Errorf("topic %s: %w", name, err)
	}
	if err := t.SetScoreParams(TopicScoreParams()); err != nil {
		return fail(err)
	}
	sub, err := t.Subscribe()
	if err != nil {
		return fail(err)
	}
	return &Topic[T]{ps: ps, name: name, topic: t, sub: sub, self: self, obs: o.obs, closed: make(chan struct{})}, nil
}

// Verdict maps a validation error to pubsub's verdict. Forged, malformed,
// oversized, future-dated and replayed records are rejected, which lowers
// the score of the peer that delivered them. Merely old records (expired,
// or superseded, which honest peers can relay late) are ignored, and so
// are messages of an author over its rate limit: every node enforces the
// limit at the first hop, so a flood goes no further, while an honest relay
// whose bucket happened to be fuller than ours is not penalised for it.
// Records over a quota of ours (ErrOverQuota) are ignored too: they are
// valid, but neither kept nor forwarded, and earn the relay no score.
func Verdict(err error) pubsub.ValidationResult {
	switch {
	case err == nil:
		return pubsub.ValidationAccept
	case errors.Is(err, ErrStale), errors.Is(err, ErrExpired), errors.Is(err, ErrRateLimited), errors.Is(err, ErrOverQuota):
		return pubsub.ValidationIgnore
	default:
		return pubsub.ValidationReject
	}
}

// Publish gossips data, waiting until at least one peer shares the topic
// or ctx ends (a node that publishes into an empty topic loses the message).
//
// It waits for a topic peer, not for a mesh peer as pubsub's
// MinTopicSize readiness does: the node flood-publishes (WithFloodPublish)
// to every topic peer in good standing, mesh or not, and a mesh can stay
// empty for minutes. A node restarted with the same key finds its peers
// backing off its ID (its old self left the topic), so they prune its
// GRAFTs for PruneBackoff: with MinTopicSize a restarted supplier could not
// post its asks for a minute or more, though its peer was right there.
func (t *Topic[T]) Publish(ctx context.Context, data []byte) error {
	if err := t.waitPeer(ctx); err != nil {
		return fmt.Errorf("topic %s: publish: %w", t.name, err)
	}
	if err := t.topic.Publish(ctx, data); err != nil {
		select {
		case <-t.closed:
			err = ErrTopicClosed
		default:
		}
		return fmt.Errorf("topic %s: publish: %w", t.name, err)
	}
	t.published()
	return nil
}

// published tells the observer, if any, of a record published.
func (t *Topic[T]) published() {
	if t.obs != nil {
		t.obs.Published(t.name)
	}
}

// waitPeer returns once a peer shares the topic, or ctx's error. It
// waits on the topic's peer events, not on a timer: a node alone in a
// topic does not wake until someone joins.
//
// A join is not yet a peer: GossipSub (v0.19) announces the join as soon
// as the peer's subscription arrives over the peer's own stream, which
// its event loop may handle before the connection that makes this node's
// send queue for the peer, and until then ListPeers leaves the peer out
// and a message published is dropped for it ("No send queue for peer").
// When the joined peer was the only one (a supplier meeting its first
// peer, a renter that just connected to the suppliers it bids to), the
// message reached nobody and nothing sent it again. So after a join,
// waitPeer polls ListPeers, from 5 ms apart up to 200 ms, until the peer
// is listed.
func (t *Topic[T]) waitPeer(ctx context.Context) error {
	if len(t.topic.ListPeers()) > 0 {
		return nil
	}
	t.mu.Lock()
	if t.isClosed {
		t.mu.Unlock()
		return ErrTopicClosed
	}
	t.waiters.Add(1)
	t.mu.Unlock()
	defer t.waiters.Done()
	h, err := t.topic.EventHandler()
	if err != nil {
		return fmt.Errorf("watch topic peers: %w", err)
	}
	defer h.Cancel()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-t.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(err error) error {
		select {
		case <-t.closed:
			return ErrTopicClosed
		default:
		}
		return fmt.Errorf("no topic peer: %w", err)
	}
	// The handler's first events are a join of every peer already in the
	// topic, so a peer that joined since ListPeers is not missed.
	for {
		ev, err := h.NextPeerEvent(ctx)
		if err != nil {
			return fail(err)
		}
		if ev.Type != pubsub.PeerJoin {
			continue
		}
		for gap := 5 * time.Millisecond; len(t.topic.ListPeers()) == 0; gap = min(2*gap, 200*time.Millisecond) {
			select {
			case <-ctx.Done():
				return fail(ctx.Err())
			case <-time.After(gap):
			}
		}
		return nil
	}
}

// Next returns the next validated message published by another peer.
// Its Value is what the topic's validator returned for it: pubsub
// delivers only messages its validator accepted.
func (t *Topic[T]) Next(ctx context.Context) (Message[T], error) {
	for {
		msg, err := t.sub.Next(ctx)
		if err != nil {
			return Message[T]{}, fmt.Errorf("topic %s: %w", t.name, err)
		}
		if msg.GetFrom() == t.self {
			continue
		}
		v, ok := msg.ValidatorData.(T)
		if !ok {
			// Not this topic's validator's value (another
			// subscription's validator on the same name): skip it.
			continue
		}
		return Message[T]{Author: msg.GetFrom(), Value: v, Data: msg.Data}, nil
	}
}

// Peers lists the peers we share the topic with.
func (t *Topic[T]) Peers() []peer.ID { return t.topic.ListPeers() }

// closeWait bounds how long Close waits for pubsub to let the topic go.
const closeWait = 5 * time.Second

// Close leaves the topic. pubsub refuses to close a topic that still has
// a subscription or an event handler ("outstanding event handlers or
// subscriptions"), and cancelling a subscription is only a request to
// its event loop, which may take the topic's removal first. So Close
// waits until every Publish waiting for a peer has let go of its event
// handler, then asks pubsub to close the topic until the cancelled
// subscription is gone (pubsub has no error value to test for, so its
// message is), for at most closeWait. A second Close returns nil.
func (t *Topic[T]) Close() error {
	t.mu.Lock()
	if t.isClosed {
		t.mu.Unlock()
		return nil
	}
	t.isClosed = true
	close(t.closed)
	t.mu.Unlock()
	t.sub.Cancel()
	t.waiters.Wait()
	err := t.topic.Close()
	for deadline, gap := time.Now().Add(closeWait), time.Millisecond; err != nil &&
		strings.Contains(err.Error(), "outstanding") && time.Now().Before(deadline); gap = min(2*gap, 100*time.Millisecond) {
		time.Sleep(gap)
		err = t.topic.Close()
	}
	if err != nil {
		err = fmt.Errorf("topic %s: close: %w", t.name, err)
	}
	return errors.Join(err, t.ps.UnregisterTopicValidator(t.name))
}
