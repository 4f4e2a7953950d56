package p2p

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// TestNetworkOnGivenHost runs two Networks on mocknet hosts (Config.Host):
// gossip crosses between them, and Close closes the host it was given
// (it drops its connections).
func TestNetworkOnGivenHost(t *testing.T) {
	mn := mocknet.New()
	defer mn.Close()
	var nets []*Network
	for i := range 2 {
		key := newKey(t)
		h, err := mn.AddPeer(key, ma.StringCast("/ip6/100::"+string(rune('1'+i))+"/tcp/4242"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := New(Config{Key: key, Host: h, Mode: ModeClient, PubSub: true, Logger: quietLogger()})
		if err != nil {
			t.Fatalf("New on a given host: %v", err)
		}
		if n.Host != h {
			t.Fatal("the Network does not run on the host it was given")
		}
		defer n.Close()
		nets = append(nets, n)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nets[0].Host.Connect(ctx, peer.AddrInfo{ID: nets[1].Host.ID()}); err != nil {
		t.Fatal(err)
	}
	accept := func(_ peer.ID, data []byte) (string, error) { return string(data), nil }
	var topics []*Topic[string]
	for _, n := range nets {
		tp, err := JoinTopic(n.PubSub, n.Host.ID(), "/test/given-host", accept, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close()
		topics = append(topics, tp)
	}
	if err := topics[0].Publish(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	msg, err := topics[1].Next(ctx)
	if err != nil {
		t.Fatalf("no gossip over mocknet: %v", err)
	}
	if got := msg.Value; got != "hello" || msg.Author != nets[0].Host.ID() {
		t.Errorf("got %q from %s, want %q from %s", got, msg.Author, "hello", nets[0].Host.ID())
	}

	for _, tp := range topics {
		tp.Close()
	}
	if err := nets[0].Close(); err != nil {
		t.Fatal(err)
	}
	// The closed host has let go of its connections. (Its peer's half of
	// a mocknet connection closes asynchronously, and can wait on a
	// stream of pubsub's that mocknet does not reset at once.)
	waitFor(t, 5*time.Second, "the closed host's connections to close", func() bool {
		return len(nets[0].Host.Network().Conns()) == 0
	})
}

// TestGivenHostKeyMismatch refuses a Key that is not the given host's.
func TestGivenHostKeyMismatch(t *testing.T) {
	mn := mocknet.New()
	defer mn.Close()
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := New(Config{Key: other, Host: h, Logger: quietLogger()}); err == nil {
		n.Close()
		t.Fatal("New accepted a key that is not the host's")
	}
}
