package market

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/store"
)

// TestLeaseRecordWords: lease records keep their states and roles as the
// words they were always stored with, so records written before the
// types existed read back, and new ones read the same to older code.
func TestLeaseRecordWords(t *testing.T) {
	f := newFixture(t)
	c := f.chain(t)
	id := IDOf(c.proposal)
	st := store.NewMemory()

	old := `{"envelope":"` + base64.StdEncoding.EncodeToString(c.lease) + `","state":"pending","role":"renter","saved":"2026-01-01T00:00:00Z"}`
	if err := st.Put(ksLeases, id[:], []byte(old)); err != nil {
		t.Fatal(err)
	}
	got, err := GetLease(st, id, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != LeasePending || got.Role != RoleRenter {
		t.Errorf("old record reads as %q/%q, want %q/%q", got.State, got.Role, LeasePending, RoleRenter)
	}
	// A pending lease not confirmed in time reads as lapsed.
	late := f.now.Add(ConfirmWindow)
	if got, err := GetLease(st, id, late); err != nil || got.State != LeaseLapsed {
		t.Errorf("unconfirmed past its window: %q, %v; want %q", got.State, err, LeaseLapsed)
	}

	if err := saveLease(st, id, c.lease, LeaseReleased, RoleSupplier, f.now); err != nil {
		t.Fatal(err)
	}
	raw, err := st.Get(ksLeases, id[:])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"state":"released"`, `"role":"supplier"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("stored record %s lacks %s", raw, want)
		}
	}
	ls, err := Leases(st, f.now)
	if err != nil || len(ls) != 1 || ls[0].State != LeaseReleased || ls[0].Role != RoleSupplier || ls[0].ID != id {
		t.Fatalf("Leases = %+v, %v; want the one released supplier lease", ls, err)
	}

	var unknown ID
	unknown[0] = 1
	if _, err := GetLease(st, unknown, f.now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown lease: %v, want store.ErrNotFound", err)
	}
}
