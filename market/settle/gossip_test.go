package settle

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// TestEvidenceValidator: the evidence topic's validator accepts evidence
// once, from its reporter, while it is fresh, and refuses the rest with
// the named error of the first check that fails.
func TestEvidenceValidator(t *testing.T) {
	x := newPair(t)
	r1, _ := x.step(t)
	twin := sealReceipt(t, receiptMsg(r1, func(m *pb.Receipt) { m.UtilPermille++ }), x.sup)
	other := newNode(t)
	r1other := sealReceipt(t, receiptMsg(r1, func(*pb.Receipt) {}), other)
	now := x.now
	seal := func(a, b []byte, created time.Time) []byte {
		t.Helper()
		raw, err := SealEvidence(&pb.Evidence{Kind: KindReceiptEquivocation, A: a, B: b, CreatedMs: created.UnixMilli()}, x.ren.key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	good := seal(r1.Raw, twin, now)

	v := NewEvidenceValidator(func() time.Time { return now })
	got, err := v.Check(x.ren.id, good)
	if err != nil {
		t.Fatalf("good evidence refused: %v", err)
	}
	if !bytes.Equal(got, good) {
		t.Fatalf("Check returned %x, want the evidence's bytes", got)
	}
	for _, c := range []struct {
		name   string
		author node
		data   []byte
		want   error
	}{
		{"the same evidence again", x.ren, good, p2p.ErrStale},
		{"published by someone else", other, seal(r1.Raw, twin, now.Add(time.Second)), p2p.ErrSignerMismatch},
		{"oversized", x.ren, make([]byte, MaxEvidenceSize+1), p2p.ErrTooLarge},
		{"forged", x.ren, seal(r1.Raw, r1other, now), ErrBadEvidence},
		{"dated in the future", x.ren, seal(r1.Raw, twin, now.Add(time.Hour)), p2p.ErrFutureDated},
		{"older than the gossip age", x.ren, seal(r1.Raw, twin, now.Add(-EvidenceGossipAge-time.Minute)), p2p.ErrStale},
	} {
		_, err := v.Check(c.author.id, c.data)
		wantErr(t, c.name, err, c.want)
		if !wrapsOneNamed(err) {
			t.Errorf("%s: %v wraps more than one named error", c.name, err)
		}
	}

	// A reporter gets evidenceBurst messages at once, then no more until
	// its rate allows; another reporter is not held back.
	v = NewEvidenceValidator(func() time.Time { return now })
	for i := range evidenceBurst {
		if _, err := v.Check(x.ren.id, []byte{byte(i)}); err == nil {
			t.Fatalf("garbage %d accepted", i)
		}
	}
	_, err = v.Check(x.ren.id, good)
	wantErr(t, "a burst too many", err, p2p.ErrRateLimited)
	now = now.Add(time.Second)
	if _, err := v.Check(x.ren.id, good); err != nil {
		t.Fatalf("evidence a second after the burst: %v", err)
	}
}
