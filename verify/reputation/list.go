package reputation

import (
	"cmp"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
)

// List returns the attestations the book keeps about subject (about
// every supplier when subject is ""), newest first, at most limit
// (every one when limit <= 0). Each is checked (signature and fields,
// within Config.Retention) the first time List reads it; a kept envelope
// whose bytes change is a new one, checked again, and one that does not
// check is left out. Later calls check only the age of those already
// checked, so that a page polling it does not verify every signature
// again each time.
func (b *Book) List(subject peer.ID, limit int) []*Attestation {
	now := b.cfg.Now()
	b.lmu.Lock()
	defer b.lmu.Unlock()
	checked := make(map[ID]*Attestation, len(b.listed))
	var out []*Attestation
	_ = b.s.Iterate(ksAttestations, nil, func(_, raw []byte) error {
		id := IDOf(raw)
		a := b.listed[id]
		if a != nil && now.Sub(a.Created()) > b.cfg.Retention {
			return nil
		}
		if a == nil {
			var err error
			if a, err = openAttestation(raw, now, b.cfg.Retention); err != nil {
				return nil
			}
			a.Raw = slices.Clone(a.Raw)
		}
		checked[id] = a
		if subject == "" || a.Subject == subject {
			out = append(out, a)
		}
		return nil
	})
	b.listed = checked
	slices.SortFunc(out, func(x, y *Attestation) int { return cmp.Compare(y.CreatedMs, x.CreatedMs) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}
