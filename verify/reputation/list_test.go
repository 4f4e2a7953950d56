package reputation

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/store"
)

// TestList: List returns the kept attestations newest first, only about
// the subject asked for, at most limit; a stored record whose signature
// no longer checks is left out.
func TestList(t *testing.T) {
	s := store.NewMemory()
	w := newWorldIn(t, s)
	sub := newNode(t)
	var ids []ID
	for range 3 {
		w.clk.Advance(time.Minute)
		ids = append(ids, w.add(w.p, sub.id, true).ID)
	}
	got := w.book.List(sub.id, 0)
	if len(got) != 3 || got[0].ID != ids[2] || got[2].ID != ids[0] {
		t.Fatalf("List(subject) = %d attestations, want the 3 newest first", len(got))
	}
	if got := w.book.List(sub.id, 2); len(got) != 2 || got[0].ID != ids[2] {
		t.Fatalf("List(subject, 2) = %d", len(got))
	}
	all := w.book.List("", 0)
	if len(all) <= 3 {
		t.Fatalf("List(all) = %d, want the world's attestations and the 3", len(all))
	}
	// Tamper with the newest as kept: a flipped byte of its signature.
	raw, err := s.Get(ksAttestations, ids[2][:])
	if err != nil {
		t.Fatal(err)
	}
	raw = append([]byte(nil), raw...)
	raw[len(raw)-1] ^= 1
	if err := s.Put(ksAttestations, ids[2][:], raw); err != nil {
		t.Fatal(err)
	}
	if got := w.book.List(sub.id, 0); len(got) != 2 || got[0].ID != ids[1] {
		t.Fatalf("after tampering: %d attestations, want the 2 that still check", len(got))
	}
}
