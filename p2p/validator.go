package p2p

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	record "github.com/libp2p/go-libp2p-record"
)

// ProfileValidator is the DHT record validator of the profile namespace. A
// value is valid when it is a profile signed by the key of the peer named in
// the record key, is unexpired, not future-dated, within the size limit, and
// well formed. Among valid values the highest seq wins.
type ProfileValidator struct {
	// Now returns the current time; time.Now when nil.
	Now func() time.Time
}

var _ record.Validator = ProfileValidator{}

func (v ProfileValidator) now() time.Time {
	if v.Now == nil {
		return time.Now()
	}
	return v.Now()
}

// Validate implements record.Validator.
func (v ProfileValidator) Validate(key string, value []byte) error {
	_, err := v.open(key, value)
	return err
}

func (v ProfileValidator) open(key string, value []byte) (*Profile, error) {
	id, err := PeerFromProfileKey(key)
	if err != nil {
		return nil, err
	}
	p, err := OpenProfile(value, v.now())
	if err != nil {
		return nil, err
	}
	if p.ID != id {
		return nil, fmt.Errorf("profile under key of %s: %w: signed by %s", id, ErrSignerMismatch, p.ID)
	}
	return p, nil
}

// Select implements record.Validator: the valid value with the highest seq
// wins; equal seqs are broken by the later issue time and then by the
// bytewise smaller envelope, so every node picks the same one.
func (v ProfileValidator) Select(key string, values [][]byte) (int, error) {
	best, bestIdx := (*Profile)(nil), -1
	for i, val := range values {
		p, err := v.open(key, val)
		if err != nil {
			continue
		}
		if best == nil || newer(p, best) {
			best, bestIdx = p, i
		}
	}
	if bestIdx < 0 {
		return 0, errors.New("profile: no valid value to select")
	}
	return bestIdx, nil
}

func newer(a, b *Profile) bool {
	if a.Seq != b.Seq {
		return a.Seq > b.Seq
	}
	if a.IssuedAtMs != b.IssuedAtMs {
		return a.IssuedAtMs > b.IssuedAtMs
	}
	return bytes.Compare(a.Raw, b.Raw) < 0
}
