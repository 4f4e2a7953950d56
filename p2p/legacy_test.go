package p2p

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pspb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// policyObserver records the validation errors a topic's validators
// report (Observer).
type policyObserver struct {
	mu   sync.Mutex
	errs []error
}

func (o *policyObserver) Validated(_ string, err error) {
	if err != nil {
		o.mu.Lock()
		o.errs = append(o.errs, err)
		o.mu.Unlock()
	}
}

func (o *policyObserver) Published(string) {}

// refused counts the errors that wrap target.
func (o *policyObserver) refused(target error) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, err := range o.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// oldRelease is a peer of the previous release: a libp2p host on
// loopback whose GossipSub signs every message (StrictSign, pubsub's
// default), connected to to.
func oldRelease(t *testing.T, to *Network) (*pubsub.PubSub, peer.ID) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); h.Close() })
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithFloodPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Connect(ctx, addrInfo(to)); err != nil {
		t.Fatal(err)
	}
	return ps, h.ID()
}

// TestLegacyTopicReadDuringTransition: a version 2 topic reads its
// predecessor while a node of the previous release is connected, and
// only pubsub-signed messages there; a pubsub-signed message on the
// version 2 topic, and an unsigned one on the old topic, are rejected
// for their signature; once the old node is gone the topic leaves its
// predecessor.
func TestLegacyTopicReadDuringTransition(t *testing.T) {
	const name, old = "/gpumesh/test/2.0.0", "/gpumesh/test/1.0.0"
	a := startNetwork(t, ModeServer, true, nil)
	obs := &policyObserver{}
	at, err := JoinTopic(a.PubSub, a.Host.ID(), name, func(_ peer.ID, data []byte) (string, error) { return string(data), nil },
		quietLogger(), WithObserver(obs), WithLegacyWatch(50*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { at.Close() })
	if at.Legacy() {
		t.Fatal("the topic reads its predecessor with no peer of the previous release")
	}

	ops, oldID := oldRelease(t, a)
	ot, err := ops.Join(old)
	if err != nil {
		t.Fatal(err)
	}
	osub, err := ot.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a to read the old topic", at.Legacy)
	// a's subscription must reach the old node before it publishes.
	waitFor(t, 10*time.Second, "the old node to see a on the old topic", func() bool { return len(ot.ListPeers()) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ot.Publish(ctx, []byte("from the old release")); err != nil {
		t.Fatal(err)
	}
	m, err := at.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Value != "from the old release" || m.Author != oldID {
		t.Fatalf("read %q by %s, want the old node's message", m.Value, m.Author)
	}

	// The old node's signed message on the version 2 topic is refused.
	nt, err := ops.Join(name)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the old node to see a on the new topic", func() bool { return len(nt.ListPeers()) > 0 })
	if err := nt.Publish(ctx, []byte("signed on v2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a to refuse the signed message on the v2 topic", func() bool { return obs.refused(ErrSignaturePolicy) == 1 })

	// A new node's unsigned message on the old topic is refused too.
	b := startNetwork(t, ModeServer, true, []peer.AddrInfo{addrInfo(a)})
	bt, err := b.PubSub.Join(old)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b to see a on the old topic", func() bool { return len(bt.ListPeers()) > 0 })
	if err := bt.Publish(ctx, []byte("unsigned on v1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a to refuse the unsigned message on the v1 topic", func() bool { return obs.refused(ErrSignaturePolicy) == 2 })

	// The old node leaves the old topic (b, which joined it without a
	// subscription, is no subscriber): after the linger, so does a.
	osub.Cancel()
	waitFor(t, 10*time.Second, "a to leave the old topic", func() bool { return !at.Legacy() })
	time.Sleep(200 * time.Millisecond) // four more watches
	if at.Legacy() {
		t.Fatal("a joined the old topic again with no peer of the previous release")
	}
}

// TestNewTopicMessagesUnsigned: what a node publishes on a version 2
// topic arrives without a pubsub signature (the receiving topic's
// validator refuses signed ones), under a content message ID.
func TestNewTopicMessagesUnsigned(t *testing.T) {
	a := startNetwork(t, ModeServer, true, nil)
	b := startNetwork(t, ModeServer, true, []peer.AddrInfo{addrInfo(a)})
	obs := &policyObserver{}
	bt, err := JoinTopic(b.PubSub, b.Host.ID(), "/gpumesh/test/2.0.0", func(_ peer.ID, data []byte) (string, error) { return string(data), nil }, quietLogger(), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bt.Close() })
	at := joinTestTopic(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := at.Publish(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	m, err := bt.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Value != "hello" || m.Author != a.Host.ID() {
		t.Fatalf("read %q by %s", m.Value, m.Author)
	}
	if n := obs.refused(ErrSignaturePolicy); n != 0 {
		t.Fatalf("%d messages refused for their signature", n)
	}
}

// TestContentMsgID: on a version 2 topic a message's ID is its author
// and the hash of its data, so that a forger who sends junk under an
// author's name and sequence number cannot have the author's real
// message dropped as already seen (as pubsub's default ID, author and
// seqno, would), while the same record relayed twice is one message.
func TestContentMsgID(t *testing.T) {
	author := mustID(t, newKey(t))
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 9}
	real := &pspb.Message{From: []byte(author), Seqno: seq, Data: []byte("the author's record")}
	junk := &pspb.Message{From: []byte(author), Seqno: seq, Data: []byte("a forger's junk")}
	if pubsub.DefaultMsgIdFn(real) != pubsub.DefaultMsgIdFn(junk) {
		t.Fatal("the default IDs differ: the test no longer shows the attack")
	}
	if ContentMsgID(real) == ContentMsgID(junk) {
		t.Fatal("a forger's junk has the ID of the author's record")
	}
	again := &pspb.Message{From: []byte(author), Seqno: []byte{1}, Data: []byte("the author's record")}
	if ContentMsgID(real) != ContentMsgID(again) {
		t.Fatal("the same record under another seqno has another ID")
	}
	if id := ContentMsgID(real); id[:len(author)] != string(author) {
		t.Fatal("the ID does not start with its author")
	}
}

func TestLegacyTopicName(t *testing.T) {
	for name, want := range map[string]string{
		"/gpumesh/heartbeat/2.0.0": "/gpumesh/heartbeat/1.0.0",
		"/gpumesh/orders/2.0.0":    "/gpumesh/orders/1.0.0",
		"/gpumesh/orders/1.0.0":    "",
		"/test/lonely":             "",
	} {
		if got := LegacyTopic(name); got != want {
			t.Errorf("LegacyTopic(%q) = %q, want %q", name, got, want)
		}
	}
}
