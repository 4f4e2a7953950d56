package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/store"
	"github.com/gpumesh/gpumesh/store/storetest"
)

func TestKeyspaceNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"peers", true},
		{"a", true},
		{"lease_v2", true},
		{"gpu-profiles", true},
		{"a234567890123456789012345678901", true},    // 31
		{"a2345678901234567890123456789012", true},   // 32
		{"a23456789012345678901234567890123", false}, // 33
		{"", false},
		{"Peers", false},
		{"1peers", false},
		{"_meta", false},
		{"-x", false},
		{"pe ers", false},
		{"peers\x00", false},
		{"pé", false},
	} {
		ks, err := store.NewKeyspace(tc.name)
		if got := err == nil; got != tc.ok {
			t.Errorf("NewKeyspace(%q) error = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && ks.Name() != tc.name {
			t.Errorf("NewKeyspace(%q).Name() = %q", tc.name, ks.Name())
		}
	}
}

func TestMustKeyspacePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("MustKeyspace(%q) did not panic", "Bad")
		}
	}()
	store.MustKeyspace("Bad")
}

func TestZeroKeyspaceRefused(t *testing.T) {
	s := store.NewMemory()
	defer s.Close()
	var zero store.Keyspace
	if err := s.Put(zero, []byte("k"), []byte("v")); err == nil {
		t.Errorf("Put with the zero Keyspace succeeded")
	}
	if err := s.Batch(func(b store.Batch) error { return b.Put(zero, []byte("k"), nil) }); err == nil {
		t.Errorf("Batch.Put with the zero Keyspace succeeded")
	}
}

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemory() })
}

func TestBadgerConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.OpenBadger(t.TempDir(), store.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("OpenBadger: %v", err)
		}
		return s
	})
}

func TestBadgerInMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.OpenBadger("", store.WithInMemory(), store.WithLogger(testLogger(t)))
		if err != nil {
			t.Fatalf("OpenBadger in memory: %v", err)
		}
		return s
	})
}

// TestMemoryTTLClock checks expiry against an injected clock, without
// sleeping.
func TestMemoryTTLClock(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := store.NewMemory(store.WithClock(func() time.Time { return now }))
	defer s.Close()
	ks := store.MustKeyspace("leases")
	if err := s.PutTTL(ks, []byte("l1"), []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		if err := s.Iterate(ks, nil, func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	now = now.Add(59 * time.Second)
	if _, err := s.Get(ks, []byte("l1")); err != nil {
		t.Fatalf("Get at 59s of a 60s TTL: %v", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("Iterate at 59s found %d keys, want 1", n)
	}
	now = now.Add(time.Second)
	if _, err := s.Get(ks, []byte("l1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get at 60s of a 60s TTL: %v, want ErrNotFound", err)
	}
	if n := count(); n != 0 {
		t.Fatalf("Iterate at 60s found %d keys, want 0", n)
	}
	// A plain Put over an expiring key clears its TTL.
	if err := s.PutTTL(ks, []byte("l2"), []byte("v"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ks, []byte("l2"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if _, err := s.Get(ks, []byte("l2")); err != nil {
		t.Fatalf("Get of a key re-put without TTL: %v", err)
	}
}

// TestIterateCallbackMayWrite checks that fn may write to the store it is
// iterating, for both implementations.
func TestIterateCallbackMayWrite(t *testing.T) {
	b, err := store.OpenBadger("", store.WithInMemory(), store.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]store.Store{"memory": store.NewMemory(), "badger": b} {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			src, dst := store.MustKeyspace("src"), store.MustKeyspace("dst")
			for _, k := range []string{"a", "b", "c"} {
				if err := s.Put(src, []byte(k), []byte(k)); err != nil {
					t.Fatal(err)
				}
			}
			err := s.Iterate(src, nil, func(k, v []byte) error { return s.Put(dst, k, v) })
			if err != nil {
				t.Fatalf("Iterate with writes: %v", err)
			}
			for _, k := range []string{"a", "b", "c"} {
				if _, err := s.Get(dst, []byte(k)); err != nil {
					t.Errorf("Get(dst, %q): %v", k, err)
				}
			}
		})
	}
}
