package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/audit"
	"github.com/gpumesh/gpumesh/verify/cuda"
	"github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// verifyParts are the verification pieces every node runs: the reputation
// book fed by gossiped attestations, and the attestation topic.
type verifyParts struct {
	rep  *reputation.Book
	atts *p2p.Topic[*reputation.Attestation]
	chal *audit.Challenger
	// cuda is the CUDA driver of the GPU prover of the node's real GPUs
	// (nil when it has none); proverErr says why there is none.
	cuda      *cuda.Driver
	proverErr error

	mu   sync.Mutex
	last map[peer.ID]time.Time // when each supplier was last challenged
}

// trustedPeers are the node's pre-trusted attesters: itself, its
// bootstrap peers, and those the configuration names.
func (n *Node) trustedPeers() []peer.ID {
	return append(append([]peer.ID{n.id}, n.bootstrapIDs()...), n.cfg.Trusted...)
}

// startVerify opens the reputation book, joins the attestation topic and
// serves attestation sync.
func (n *Node) startVerify(ctx context.Context) error {
	v := &n.verify
	var err error
	v.rep, err = reputation.Open(n.store, n.id, reputation.Config{Now: n.now, PreTrusted: n.trustedPeers(), Log: n.log})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	av := reputation.NewAttestationValidator(n.now, reputation.DefaultAttestationRate, reputation.DefaultAttestationBurst)
	if v.atts, err = p2p.JoinTopic(n.net.PubSub, n.id, reputation.AttestationTopic, av.Check, n.log, n.topic(reputation.AttestationTopic)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.market.trust.rep.Store(v.rep) // the price index and book now weigh reputation
	reputation.ServeSync(n.net.Host, v.rep)
	n.goLoop(func() { n.readAttestations(ctx) })
	return n.startAudit(ctx)
}

func (n *Node) readAttestations(ctx context.Context) {
	for {
		msg, err := n.verify.atts.Next(ctx)
		if err != nil {
			return
		}
		n.verify.rep.Add(msg.Value)
	}
}

// Attest signs an attestation, keeps it and gossips it.
func (n *Node) Attest(ctx context.Context, a *pb.Attestation) (*reputation.Attestation, error) {
	raw, err := reputation.SealAttestation(a, n.key)
	if err != nil {
		return nil, err
	}
	att, err := reputation.OpenAttestation(raw, n.now())
	if err != nil {
		return nil, err
	}
	n.verify.rep.Add(att)
	if err := n.verify.atts.Publish(ctx, raw); err != nil {
		return att, fmt.Errorf("gossip attestation: %w", err)
	}
	return att, nil
}

// Reputation is the node's reputation book.
func (n *Node) Reputation() *reputation.Book { return n.verify.rep }
