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
//
// A topic of version 2 (a name ending in /2.0.0) carries messages without
// pubsub's signature: the record's own envelope signature is the only
// one, and the validator ties it to the message's author (from). Its
// predecessor, the same name at /1.0.0, carried pubsub-signed messages;
// while a peer of the previous release is connected (subscribed to the
// old topic and not to the new one), the Topic joins the old one too and
// reads it (see legacy.go).
type Topic[T any] struct {
	ps    *pubsub.PubSub
	name  string
	topic *pubsub.Topic
	sub   *pubsub.Subscription
	self  peer.ID
	obs   Observer // nil: nothing is counted
	log   *slog.Logger

	in     chan *pubsub.Message // what the subscriptions deliver, the legacy one's too
	ended  chan struct{}        // closed when the main subscription has ended
	endErr error                // why, set before ended closes
	legacy *legacy              // nil: the topic has no predecessor

	mu       sync.Mutex     // guards isClosed against waiters added while Close runs
	isClosed bool           // Close has begun
	closed   chan struct{}  // closed by Close: a Publish waiting for a peer gives up
	waiters  sync.WaitGroup // Publishes holding a topic event handler (waitPeer)
	pumps    sync.WaitGroup // goroutines reading subscriptions and watching the legacy topic
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
	obs          Observer
	legacyEvery  time.Duration
	legacyLinger time.Duration
}

// WithObserver has o told of the topic's validations and publications.
func WithObserver(o Observer) TopicOption { return func(t *topicOptions) { t.obs = o } }

// WithLegacyWatch sets how often the topic looks for peers of the
// previous release on its predecessor (LegacyEvery), and how long it
// stays joined there after the last is gone (LegacyLinger).
func WithLegacyWatch(every, linger time.Duration) TopicOption {
	return func(t *topicOptions) { t.legacyEvery, t.legacyLinger = every, linger }
}

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
	o := topicOptions{legacyEvery: LegacyEvery, legacyLinger: LegacyLinger}
	for _, opt := range opts {
		opt(&o)
	}
	validator := func(topic string, policy sigPolicy) pubsub.ValidatorEx {
		return func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
			var v T
			err := policy.check(msg)
			if err == nil {
				v, err = check(msg.GetFrom(), msg.ReceivedFrom, msg.Data)
			}
			// The node's own records are validated as they are published;
			// only what other peers deliver is counted.
			if o.obs != nil && msg.ReceivedFrom != self {
				o.obs.Validated(name, err)
			}
			if err != nil {
				log.Debug("gossip dropped", "topic", topic, "from", msg.ReceivedFrom, "author", msg.GetFrom(), "err", err)
				return Verdict(err)
			}
			msg.ValidatorData = v
			return pubsub.ValidationAccept
		}
	}
	old := LegacyTopic(name)
	t, sub, err := joinSubscribe(ps, name, validator(name, policyOf(name)))
	if err != nil {
		return nil, err
	}
	tp := &Topic[T]{ps: ps, name: name, topic: t, sub: sub, self: self, obs: o.obs, log: log,
		in: make(chan *pubsub.Message), ended: make(chan struct{}), closed: make(chan struct{})}
	tp.pumps.Add(1)
	go tp.pump(sub, true)
	if old != "" {
		tp.legacy = &legacy{name: old, validate: validator(old, sigRequired), every: o.legacyEvery, linger: o.legacyLinger}
		tp.pumps.Add(1)
		go tp.watchLegacy()
	}
	return tp, nil
}

// joinSubscribe registers validate as topic name's validator, joins the
// topic with gpumesh's scoring parameters (and, on a version 2 topic,
// its message IDs: ContentMsgID) and subscribes to it.
func joinSubscribe(ps *pubsub.PubSub, name string, validate pubsub.ValidatorEx) (*pubsub.Topic, *pubsub.Subscription, error) {
	if err := ps.RegisterTopicValidator(name, validate, pubsub.WithValidatorTimeout(5*time.Second)); err != nil {
		return nil, nil, fmt.Errorf("topic %s: register validator: %w", name, err)
	}
	var opts []pubsub.TopicOpt
	if strings.HasSuffix(name, "/2.0.0") {
		opts = append(opts, pubsub.WithTopicMessageIdFn(ContentMsgID))
	}
	t, err := ps.Join(name, opts...)
	if err != nil {
		_ = ps.UnregisterTopicValidator(name)
		return nil, nil, fmt.Errorf("topic %s: join: %w", name, err)
	}
	fail := func(err error) (*pubsub.Topic, *pubsub.Subscription, error) {
		_ = t.Close()
		_ = ps.UnregisterTopicValidator(name)
		return nil, nil, fmt.Errorf("topic %s: %w", name, err)
	}
	if err := t.SetScoreParams(TopicScoreParams()); err != nil {
		return fail(err)
	}
	sub, err := t.Subscribe()
	if err != nil {
		return fail(err)
	}
	return t, sub, nil
}

// untilClosed is parent, also cancelled when the topic closes.
func (t *Topic[T]) untilClosed(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-t.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// pump hands what sub delivers to Next, until sub ends (cancelled) or
// the topic closes. When the main subscription ends, Next ends with it.
func (t *Topic[T]) pump(sub *pubsub.Subscription, main bool) {
	defer t.pumps.Done()
	ctx, cancel := t.untilClosed(context.Background())
	defer cancel()
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			if main {
				select {
				case <-t.closed:
					err = ErrTopicClosed
				default:
				}
				t.endErr = err
				close(t.ended)
			}
			return
		}
		select {
		case t.in <- msg:
		case <-t.closed:
			return
		}
	}
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
	ctx, cancel := t.untilClosed(ctx)
	defer cancel()
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

// Next returns the next validated message published by another peer,
// on the topic or, during a transition, on its predecessor. Its Value is
// what the topic's validator returned for it: pubsub delivers only
// messages its validator accepted.
func (t *Topic[T]) Next(ctx context.Context) (Message[T], error) {
	for {
		var msg *pubsub.Message
		select {
		case msg = <-t.in:
		case <-t.ended:
			return Message[T]{}, fmt.Errorf("topic %s: %w", t.name, t.endErr)
		case <-ctx.Done():
			return Message[T]{}, fmt.Errorf("topic %s: %w", t.name, ctx.Err())
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
	t.pumps.Wait()
	err := leave(t.ps, t.name, t.topic)
	if t.legacy != nil {
		err = errors.Join(err, t.legacy.leave(t.ps))
	}
	return err
}

// leave closes topic name (whose subscription was cancelled) and
// unregisters its validator.
func leave(ps *pubsub.PubSub, name string, topic *pubsub.Topic) error {
	err := topic.Close()
	for deadline, gap := time.Now().Add(closeWait), time.Millisecond; err != nil &&
		strings.Contains(err.Error(), "outstanding") && time.Now().Before(deadline); gap = min(2*gap, 100*time.Millisecond) {
		time.Sleep(gap)
		err = topic.Close()
	}
	if err != nil {
		err = fmt.Errorf("topic %s: close: %w", name, err)
	}
	return errors.Join(err, ps.UnregisterTopicValidator(name))
}
