package sim

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/verify/pb"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// claims are the GPUs each supplier's profile lists, by model: what a
// node learns from the profiles it fetches (impostors' included; their
// GPUs do not exist). Read-only once built.
type claims map[peer.ID]map[string]map[string]bool

// nodeTrust is one node's market.Trust, as node/trust.go's trustView
// builds it: profiles (here, the claims every node would fetch from the
// DHT) and the reputation book.
type nodeTrust struct {
	self   peer.ID
	claims claims
	rep    *reputation.Book
}

var _ market.Trust = nodeTrust{}

func (t nodeTrust) ProfileHas(supplier peer.ID, model string, uuids []string, count int) bool {
	have := t.claims[supplier][model]
	if len(have) == 0 || len(have) < count {
		return false
	}
	for _, u := range uuids {
		if !have[u] {
			return false
		}
	}
	return true
}

// Reputation is the book's, as a node reads it: a supplier in a UUID
// conflict scores 0; the node itself is trusted.
func (t nodeTrust) Reputation(supplier peer.ID) (float64, bool) {
	if supplier == t.self {
		return 1, true
	}
	s := t.rep.Score(supplier)
	if s.Conflict {
		return 0, true
	}
	return s.Reputation, s.Passes+s.Fails > 0
}

// auditors is how many pre-trusted auditors challenge the suppliers.
const auditors = 3

// newReputation is the reputation book every node reads (one book: each
// node would hear the same attestations on the attestations topic, and
// gossiping them is not what this simulation measures). The auditors
// have challenged every honest supplier and passed it, and every
// attested impostor and failed it; the other impostors are unknown keys.
func newReputation(now func() time.Time, suppliers []SupplierSpec, ids []peer.ID, uuids map[peer.ID][]string) (*reputation.Book, error) {
	keys := make([]crypto.PrivKey, auditors)
	pre := make([]peer.ID, auditors)
	for i := range keys {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("auditor key: %w", err)
		}
		keys[i] = k
		if pre[i], err = peer.IDFromPrivateKey(k); err != nil {
			return nil, fmt.Errorf("auditor id: %w", err)
		}
	}
	book, err := reputation.Open(store.NewMemory(store.WithClock(now)), pre[0], reputation.Config{Now: now, PreTrusted: pre})
	if err != nil {
		return nil, fmt.Errorf("reputation book: %w", err)
	}
	for _, s := range suppliers {
		id := ids[s.Node]
		book.ObserveGPUs(id, uuids[id], false)
		if s.Impostor && !s.Attested {
			continue
		}
		for _, k := range keys {
			raw, err := reputation.SealAttestation(challenge(id, s, uuids[id], !s.Impostor, now()), k)
			if err != nil {
				return nil, fmt.Errorf("attest %s: %w", id, err)
			}
			a, err := reputation.OpenAttestation(raw, now())
			if err != nil {
				return nil, fmt.Errorf("attest %s: %w", id, err)
			}
			book.Add(a)
		}
	}
	return book, nil
}

// challenge is an auditor's verdict on s: an impostor's claimed GPUs
// fall far short of the model's throughput.
func challenge(id peer.ID, s SupplierSpec, uuids []string, passed bool, now time.Time) *pb.Attestation {
	m := &pb.Attestation{
		CreatedMs: now.UnixMilli(), Subject: []byte(id), Kind: reputation.KindChallenge, Passed: passed,
		Gpus: uint32(len(uuids)), GpuUuids: uuids, Model: s.Model,
		MeasuredMilliOps: 950_000, ExpectedMilliOps: 1_000_000, RowsChecked: 64, DurationMs: 1500,
		ChallengeId: make([]byte, reputation.ChallengeIDBytes),
	}
	if !passed {
		m.MeasuredMilliOps, m.Reason = 40_000, "slow: 25x the claimed model's time"
	}
	_, _ = rand.Read(m.ChallengeId)
	return m
}
