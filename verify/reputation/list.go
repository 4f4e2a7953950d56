package reputation

import (
	"cmp"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
)

// List returns the attestations the book keeps about subject (about
// every supplier when subject is ""), newest first, at most limit
// (every one when limit <= 0). Each is checked again as it is read
// (signature and fields, within Config.Retention); one that no longer
// checks is left out.
func (b *Book) List(subject peer.ID, limit int) []*Attestation {
	now := b.cfg.Now()
	var out []*Attestation
	_ = b.s.Iterate(ksAttestations, nil, func(_, raw []byte) error {
		a, err := openAttestation(raw, now, b.cfg.Retention)
		if err != nil || subject != "" && a.Subject != subject {
			return nil
		}
		a.Raw = slices.Clone(a.Raw)
		out = append(out, a)
		return nil
	})
	slices.SortFunc(out, func(x, y *Attestation) int { return cmp.Compare(y.CreatedMs, x.CreatedMs) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
