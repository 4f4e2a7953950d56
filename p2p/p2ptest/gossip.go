package p2ptest

import (
	"context"
	"fmt"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// StripSignatures has a bare GossipSub (pubsub's default policy, which
// signs) send what it publishes on topic without pubsub's signature, as
// the version 2 topics carry it (docs/PROTOCOL.md §7): a test's hostile
// peer can then publish records in any author's name with
// pubsub.WithSecretKeyAndPeerId(key, id), and they arrive as that author's
// unsigned messages. It registers, as ps's own validator of topic, a
// function that clears the signature of each message ps publishes, after
// pubsub has checked it and before it is sent. Other peers' messages
// relayed through ps lose their signature too.
func StripSignatures(ps *pubsub.PubSub, topic string) error {
	strip := func(_ context.Context, _ peer.ID, msg *pubsub.Message) bool {
		msg.Signature, msg.Key = nil, nil
		return true
	}
	if err := ps.RegisterTopicValidator(topic, strip); err != nil {
		return fmt.Errorf("strip signatures on %s: %w", topic, err)
	}
	return nil
}
