package p2p

import (
	"crypto/sha256"
	"slices"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pspb "github.com/libp2p/go-libp2p-pubsub/pb"
)

// One signature per gossiped record.
//
// Until version 2 of the topics, every gossip message was signed twice:
// by pubsub (StrictSign: its own signature over the message, checked by
// every receiver before the validators) and by its record's envelope
// (checked again by the topic's validator, which also requires the
// envelope's signer to be the message's author). The envelope alone
// proves the author, so the topics of version 2 carry no pubsub
// signature: the node publishes without one (pubsub's signing off), a
// message on a version 2 topic that carries one is rejected
// (ErrSignaturePolicy), and since an unsigned message's from and seqno
// prove nothing, its message ID is its author followed by the SHA-256 of
// its data (ContentMsgID): a forger who sends junk under an author's
// name and next sequence number makes a message of another ID, and
// cannot have the author's real one dropped as already seen.
//
// The topics of version 1 keep pubsub's signatures. During the
// transition a Topic of version 2 watches its predecessor: while a peer
// subscribes to the old topic and not to the new one (a node of the
// previous release), it joins the old topic too and reads it, accepting
// only pubsub-signed messages there, and leaves it LegacyLinger after
// the last such peer is gone. It publishes on the new topic only: nodes
// of the previous release do not see the new ones' records.

// The legacy watch's defaults (WithLegacyWatch).
const (
	LegacyEvery  = 10 * time.Second // how often a topic looks for peers of the previous release
	LegacyLinger = 2 * time.Minute  // how long it reads the old topic after the last is gone
)

// LegacyTopic is the predecessor of topic name: the same name at version
// 1.0.0 for a topic of version 2.0.0, else "".
func LegacyTopic(name string) string {
	if base, ok := strings.CutSuffix(name, "/2.0.0"); ok {
		return base + "/1.0.0"
	}
	return ""
}

// ContentMsgID is the message ID of the topics of version 2: the
// author's peer ID (from, as sent) followed by the SHA-256 of the data.
// The author comes first so that a node can tell its own messages among
// the IDs its peers advertise (guardRPCs).
func ContentMsgID(m *pspb.Message) string {
	h := sha256.Sum256(m.GetData())
	return string(m.GetFrom()) + string(h[:])
}

// sigPolicy is what a topic's validator requires of pubsub's signature.
type sigPolicy int

const (
	sigAny      sigPolicy = iota // a topic of neither version: pubsub checks a signature if there is one
	sigNone                      // a topic of version 2: no pubsub signature
	sigRequired                  // a topic of version 1 read during the transition: pubsub-signed
)

// policyOf is the signature policy of the topic a node publishes on.
func policyOf(name string) sigPolicy {
	if strings.HasSuffix(name, "/2.0.0") {
		return sigNone
	}
	return sigAny
}

// check holds msg to the policy. Pubsub has already verified any
// signature a message carries; this decides whether it may carry one.
func (p sigPolicy) check(msg *pubsub.Message) error {
	signed := msg.Signature != nil || msg.Key != nil
	switch {
	case p == sigNone && signed:
		return Errf(ErrSignaturePolicy, "a pubsub signature on a version 2 topic, whose records are signed by their envelope alone")
	case p == sigRequired && msg.Signature == nil:
		return Errf(ErrSignaturePolicy, "no pubsub signature on a version 1 topic")
	}
	return nil
}

// legacy is a Topic's predecessor, joined while nodes of the previous
// release are connected.
type legacy struct {
	name     string
	validate pubsub.ValidatorEx
	every    time.Duration
	linger   time.Duration

	mu      sync.Mutex
	topic   *pubsub.Topic        // nil while not joined
	sub     *pubsub.Subscription // nil while not joined
	lastOld time.Time            // when a peer of the previous release was last seen
}

// oldPeers counts the peers subscribed to the old topic and not to the
// new one: nodes of the previous release.
func (t *Topic[T]) oldPeers() int {
	nw := t.ps.ListPeers(t.name)
	n := 0
	for _, p := range t.ps.ListPeers(t.legacy.name) {
		if !slices.Contains(nw, p) {
			n++
		}
	}
	return n
}

// watchLegacy joins the old topic while nodes of the previous release
// are connected, until the topic closes.
func (t *Topic[T]) watchLegacy() {
	defer t.pumps.Done()
	tick := time.NewTicker(t.legacy.every)
	defer tick.Stop()
	for {
		t.checkLegacy(time.Now())
		select {
		case <-t.closed:
			return
		case <-tick.C:
		}
	}
}

// checkLegacy joins or leaves the old topic as its peers say at now.
func (t *Topic[T]) checkLegacy(now time.Time) {
	l := t.legacy
	old := t.oldPeers()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case old > 0:
		l.lastOld = now
		if l.topic != nil {
			return
		}
		topic, sub, err := joinSubscribe(t.ps, l.name, l.validate)
		if err != nil {
			t.log.Warn("cannot read the previous release's topic", "topic", l.name, "err", err)
			return
		}
		t.mu.Lock()
		closed := t.isClosed
		if !closed {
			t.pumps.Add(1)
		}
		t.mu.Unlock()
		if closed {
			sub.Cancel()
			_ = leave(t.ps, l.name, topic)
			return
		}
		l.topic, l.sub = topic, sub
		go t.pump(sub, false)
		t.log.Info("reading the previous release's topic", "topic", l.name, "peers", old)
	case l.topic != nil && now.Sub(l.lastOld) > l.linger:
		t.log.Info("left the previous release's topic", "topic", l.name)
		l.sub.Cancel()
		err := leave(t.ps, l.name, l.topic)
		l.topic, l.sub = nil, nil
		if err != nil {
			t.log.Warn("leaving the previous release's topic", "topic", l.name, "err", err)
		}
	}
}

// leave leaves the old topic if it is joined.
func (l *legacy) leave(ps *pubsub.PubSub) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.topic == nil {
		return nil
	}
	l.sub.Cancel()
	err := leave(ps, l.name, l.topic)
	l.topic, l.sub = nil, nil
	return err
}

// Legacy reports whether the topic is reading its predecessor now.
func (t *Topic[T]) Legacy() bool {
	if t.legacy == nil {
		return false
	}
	t.legacy.mu.Lock()
	defer t.legacy.mu.Unlock()
	return t.legacy.topic != nil
}
