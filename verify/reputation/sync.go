package reputation

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// SyncProtocol serves a node's kept attestations to whoever asks, so that
// a light client computes reputation itself from signed verdicts rather
// than trust a node's scores.
const SyncProtocol = "/gpumesh/attestation-sync/1.0.0"

// MaxSync caps the attestations one sync reply carries.
const MaxSync = 5000

// errStop ends an iteration early.
var errStop = errors.New("stop")

// Envelopes returns up to limit of the attestations the book keeps, as the
// signed envelopes their attesters published.
func (b *Book) Envelopes(limit int) [][]byte {
	var out [][]byte
	_ = b.s.Iterate(ksAttestations, nil, func(_, raw []byte) error {
		if len(out) >= limit {
			return errStop
		}
		out = append(out, append([]byte(nil), raw...))
		return nil
	})
	return out
}

// AddRaw checks a signed attestation as a kept one (signature and fields,
// an age limit of Config.Retention) and adds it.
func (b *Book) AddRaw(raw []byte) error {
	a, err := openAttestation(raw, b.cfg.Now(), b.cfg.Retention)
	if err != nil {
		return err
	}
	b.Add(a)
	return nil
}

// ServeSync answers SyncProtocol from b.
func ServeSync(h host.Host, b *Book) {
	p2p.Serve(h, SyncProtocol, func(s network.Stream) error {
		var req pb.SyncRequest
		if err := p2p.ReadMsg(s, 64, &req); err != nil {
			return err
		}
		limit := int(req.Limit)
		if limit <= 0 || limit > MaxSync {
			limit = MaxSync
		}
		return p2p.WriteMsg(s, &pb.SyncResponse{Attestations: b.Envelopes(limit)})
	})
}

// FetchSync asks node p for its attestations and adds every valid one to b.
// It returns how many it added.
func FetchSync(ctx context.Context, h host.Host, p peer.ID, b *Book) (int, error) {
	var resp pb.SyncResponse
	if err := p2p.Request(ctx, h, p, SyncProtocol, &pb.SyncRequest{Limit: MaxSync}, &resp, MaxSync*(MaxAttestationSize+8)+1024); err != nil {
		return 0, fmt.Errorf("attestations of %s: %w", p, err)
	}
	n := 0
	for _, raw := range resp.Attestations {
		if b.AddRaw(raw) == nil {
			n++
		}
	}
	return n, nil
}
