// Package storetest is the conformance suite every store.Store
// implementation passes.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/store"
)

// Run runs the conformance suite against fresh stores made by open. Each
// subtest opens its own store and closes it when done; open should register
// any other cleanup with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"PutGetOverwrite", testPutGetOverwrite},
		{"NotFound", testNotFound},
		{"CopySemantics", testCopySemantics},
		{"Delete", testDelete},
		{"KeyspaceIsolation", testKeyspaceIsolation},
		{"IterateOrder", testIterateOrder},
		{"IterateStop", testIterateStop},
		{"BatchAtomic", testBatchAtomic},
		{"TTL", testTTL},
		{"Typed", testTyped},
		{"Closed", testClosed},
		{"ConcurrentWriters", testConcurrentWriters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

var (
	ksA     = store.MustKeyspace("alpha")
	ksB     = store.MustKeyspace("beta")
	ksPeer  = store.MustKeyspace("peer")
	ksPeers = store.MustKeyspace("peers")
)

func mustPut(t *testing.T, s store.Store, ks store.Keyspace, key, value string) {
	t.Helper()
	if err := s.Put(ks, []byte(key), []byte(value)); err != nil {
		t.Fatalf("Put(%s, %q): %v", ks.Name(), key, err)
	}
}

// wantValue checks that key holds want.
func wantValue(t *testing.T, s store.Store, ks store.Keyspace, key, want string) {
	t.Helper()
	got, err := s.Get(ks, []byte(key))
	if err != nil {
		t.Fatalf("Get(%s, %q): %v, want %q", ks.Name(), key, err, want)
	}
	if string(got) != want {
		t.Fatalf("Get(%s, %q) = %q, want %q", ks.Name(), key, got, want)
	}
}

// wantAbsent checks that key is not found.
func wantAbsent(t *testing.T, s store.Store, ks store.Keyspace, key string) {
	t.Helper()
	got, err := s.Get(ks, []byte(key))
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%s, %q) = %q, %v; want ErrNotFound", ks.Name(), key, got, err)
	}
}

// collect returns "key=value" for each entry Iterate yields, in order.
func collect(t *testing.T, s store.Store, ks store.Keyspace, prefix string) []string {
	t.Helper()
	var out []string
	err := s.Iterate(ks, []byte(prefix), func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatalf("Iterate(%s, %q): %v", ks.Name(), prefix, err)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testPutGetOverwrite(t *testing.T, s store.Store) {
	mustPut(t, s, ksA, "k", "v1")
	wantValue(t, s, ksA, "k", "v1")
	mustPut(t, s, ksA, "k", "v2")
	wantValue(t, s, ksA, "k", "v2")
	mustPut(t, s, ksA, "empty", "")
	wantValue(t, s, ksA, "empty", "")
	bin := []byte{0, 1, 0xff, 0}
	if err := s.Put(ksA, bin, bin); err != nil {
		t.Fatalf("Put binary key: %v", err)
	}
	got, err := s.Get(ksA, bin)
	if err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("Get binary key = %x, %v; want %x", got, err, bin)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	wantAbsent(t, s, ksA, "missing")
	mustPut(t, s, ksA, "present", "v")
	wantAbsent(t, s, ksA, "pres")
	wantAbsent(t, s, ksA, "present2")
}

func testCopySemantics(t *testing.T, s store.Store) {
	key := []byte("key")
	val := []byte("value")
	if err := s.Put(ksA, key, val); err != nil {
		t.Fatal(err)
	}
	copy(key, "XXX")
	copy(val, "XXXXX")
	wantValue(t, s, ksA, "key", "value")

	got, err := s.Get(ksA, []byte("key"))
	if err != nil {
		t.Fatal(err)
	}
	copy(got, "YYYYY")
	wantValue(t, s, ksA, "key", "value")

	// Buffers reused inside a batch.
	buf := []byte("b1")
	err = s.Batch(func(b store.Batch) error {
		if err := b.Put(ksA, buf, buf); err != nil {
			return err
		}
		copy(buf, "b2")
		return b.Put(ksA, buf, buf)
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, ksA, "b1", "b1")
	wantValue(t, s, ksA, "b2", "b2")
}

func testDelete(t *testing.T, s store.Store) {
	mustPut(t, s, ksA, "k", "v")
	mustPut(t, s, ksA, "k2", "v2")
	if err := s.Delete(ksA, []byte("k")); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantAbsent(t, s, ksA, "k")
	wantValue(t, s, ksA, "k2", "v2")
	if err := s.Delete(ksA, []byte("k")); err != nil {
		t.Fatalf("Delete of a deleted key: %v", err)
	}
	if err := s.Delete(ksA, []byte("never")); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
	if got, want := collect(t, s, ksA, ""), []string{"k2=v2"}; !equal(got, want) {
		t.Fatalf("after delete, Iterate = %q, want %q", got, want)
	}
}

func testKeyspaceIsolation(t *testing.T, s store.Store) {
	mustPut(t, s, ksA, "k", "in alpha")
	mustPut(t, s, ksB, "k", "in beta")
	wantValue(t, s, ksA, "k", "in alpha")
	wantValue(t, s, ksB, "k", "in beta")
	if err := s.Delete(ksA, []byte("k")); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, s, ksA, "k")
	wantValue(t, s, ksB, "k", "in beta")

	// "peer" is a prefix of "peers": neither may see the other's keys.
	mustPut(t, s, ksPeer, "1", "peer one")
	mustPut(t, s, ksPeers, "1", "peers one")
	mustPut(t, s, ksPeers, "2", "peers two")
	if got, want := collect(t, s, ksPeer, ""), []string{"1=peer one"}; !equal(got, want) {
		t.Errorf("Iterate(peer) = %q, want %q", got, want)
	}
	if got, want := collect(t, s, ksPeers, ""), []string{"1=peers one", "2=peers two"}; !equal(got, want) {
		t.Errorf("Iterate(peers) = %q, want %q", got, want)
	}
	// A key starting with "s" in "peer" must not be confused with "peers".
	mustPut(t, s, ksPeer, "s\x001", "tricky")
	wantValue(t, s, ksPeers, "1", "peers one")
	wantAbsent(t, s, ksPeer, "2")
	if got := collect(t, s, ksB, ""); !equal(got, []string{"k=in beta"}) {
		t.Errorf("Iterate(beta) = %q, want only its own key", got)
	}
}

func testIterateOrder(t *testing.T, s store.Store) {
	for _, k := range []string{"b/2", "a/1", "b/10", "b/1", "c", "b", "a/2", "b/\xff"} {
		mustPut(t, s, ksA, k, "v"+k)
	}
	mustPut(t, s, ksB, "b/0", "other keyspace")
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a/1=va/1", "a/2=va/2", "b=vb", "b/1=vb/1", "b/10=vb/10", "b/2=vb/2", "b/\xff=vb/\xff", "c=vc"}},
		{"b/", []string{"b/1=vb/1", "b/10=vb/10", "b/2=vb/2", "b/\xff=vb/\xff"}},
		{"b/1", []string{"b/1=vb/1", "b/10=vb/10"}},
		{"a/1", []string{"a/1=va/1"}},
		{"d", nil},
	} {
		if got := collect(t, s, ksA, tc.prefix); !equal(got, tc.want) {
			t.Errorf("Iterate(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func testIterateStop(t *testing.T, s store.Store) {
	for i := range 10 {
		mustPut(t, s, ksA, fmt.Sprintf("k%02d", i), "v")
	}
	stop := errors.New("stop here")
	var seen []string
	err := s.Iterate(ksA, nil, func(k, _ []byte) error {
		seen = append(seen, string(k))
		if len(seen) == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Iterate returned %v, want the callback's error", err)
	}
	if want := []string{"k00", "k01", "k02"}; !equal(seen, want) {
		t.Fatalf("Iterate visited %q before stopping, want %q", seen, want)
	}
}

func testBatchAtomic(t *testing.T, s store.Store) {
	mustPut(t, s, ksA, "gone", "v")
	mustPut(t, s, ksA, "kept", "old")
	err := s.Batch(func(b store.Batch) error {
		if err := b.Put(ksA, []byte("x"), []byte("1")); err != nil {
			return err
		}
		if err := b.Put(ksB, []byte("y"), []byte("2")); err != nil {
			return err
		}
		return b.Delete(ksA, []byte("gone"))
	})
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	wantValue(t, s, ksA, "x", "1")
	wantValue(t, s, ksB, "y", "2")
	wantAbsent(t, s, ksA, "gone")

	failed := errors.New("batch failed")
	err = s.Batch(func(b store.Batch) error {
		for i := range 50 {
			if err := b.Put(ksA, fmt.Appendf(nil, "n%d", i), []byte("new")); err != nil {
				return err
			}
		}
		if err := b.Put(ksA, []byte("kept"), []byte("new")); err != nil {
			return err
		}
		if err := b.Delete(ksA, []byte("x")); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Batch returned %v, want fn's error", err)
	}
	wantValue(t, s, ksA, "kept", "old")
	wantValue(t, s, ksA, "x", "1")
	for i := range 50 {
		wantAbsent(t, s, ksA, fmt.Sprintf("n%d", i))
	}
}

func testTTL(t *testing.T, s store.Store) {
	if err := s.PutTTL(ksA, []byte("short"), []byte("v"), 0); err == nil {
		t.Errorf("PutTTL with ttl 0 succeeded, want an error")
	}
	mustPut(t, s, ksA, "forever", "v")
	if err := s.PutTTL(ksA, []byte("short"), []byte("v"), time.Second); err != nil {
		t.Fatalf("PutTTL: %v", err)
	}
	if err := s.PutTTL(ksA, []byte("long"), []byte("v"), time.Hour); err != nil {
		t.Fatalf("PutTTL: %v", err)
	}
	// A fresh TTL key is there; stores may keep it a little longer than
	// its TTL, so wait for it to go, bounded, rather than timing it.
	wantValue(t, s, ksA, "long", "v")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(ksA, []byte("short"))
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatalf("Get(short): %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("key with a 1s TTL still present after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, want := collect(t, s, ksA, ""), []string{"forever=v", "long=v"}; !equal(got, want) {
		t.Errorf("Iterate after expiry = %q, want %q", got, want)
	}
	wantValue(t, s, ksA, "forever", "v")
}

type record struct {
	Name  string            `json:"name"`
	Count int               `json:"count"`
	Tags  map[string]string `json:"tags,omitempty"`
}

func testTyped(t *testing.T, s store.Store) {
	typed := store.NewTyped(s, ksA, store.JSONCodec[record]{})
	want := record{Name: "gpu-0", Count: 3, Tags: map[string]string{"arch": "hopper"}}
	if err := typed.Put([]byte("r/1"), want); err != nil {
		t.Fatalf("Typed.Put: %v", err)
	}
	if err := typed.Put([]byte("r/2"), record{Name: "gpu-1"}); err != nil {
		t.Fatalf("Typed.Put: %v", err)
	}
	got, err := typed.Get([]byte("r/1"))
	if err != nil {
		t.Fatalf("Typed.Get: %v", err)
	}
	if got.Name != want.Name || got.Count != want.Count || got.Tags["arch"] != "hopper" {
		t.Errorf("Typed.Get = %+v, want %+v", got, want)
	}
	var names []string
	err = typed.Iterate([]byte("r/"), func(k []byte, v record) error {
		names = append(names, string(k)+"="+v.Name)
		return nil
	})
	if err != nil {
		t.Fatalf("Typed.Iterate: %v", err)
	}
	if want := []string{"r/1=gpu-0", "r/2=gpu-1"}; !equal(names, want) {
		t.Errorf("Typed.Iterate = %q, want %q", names, want)
	}
	if err := typed.Delete([]byte("r/1")); err != nil {
		t.Fatalf("Typed.Delete: %v", err)
	}
	if _, err := typed.Get([]byte("r/1")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Typed.Get after Delete: %v, want ErrNotFound", err)
	}
	// A value that is not JSON is a decode error, not a panic or a zero T.
	mustPut(t, s, ksA, "r/bad", "{not json")
	if _, err := typed.Get([]byte("r/bad")); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("Typed.Get of a bad value: %v, want a decode error", err)
	}
	if err := typed.Iterate([]byte("r/"), func([]byte, record) error { return nil }); err == nil {
		t.Errorf("Typed.Iterate over a bad value succeeded, want a decode error")
	}
}

func testClosed(t *testing.T, s store.Store) {
	mustPut(t, s, ksA, "k", "v")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	checks := map[string]error{}
	_, checks["Get"] = s.Get(ksA, []byte("k"))
	checks["Put"] = s.Put(ksA, []byte("k"), []byte("v"))
	checks["PutTTL"] = s.PutTTL(ksA, []byte("k"), []byte("v"), time.Minute)
	checks["Delete"] = s.Delete(ksA, []byte("k"))
	checks["Batch"] = s.Batch(func(b store.Batch) error { return b.Put(ksA, []byte("k"), []byte("v")) })
	checks["Iterate"] = s.Iterate(ksA, nil, func(_, _ []byte) error { return nil })
	for op, err := range checks {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", op, err)
		}
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, puts = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range puts {
				k := fmt.Appendf(nil, "w%d/%03d", w, i)
				if err := s.Put(ksA, k, k); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// Readers alongside the writers.
	for range 2 {
		wg.Go(func() {
			for range 20 {
				if err := s.Iterate(ksA, []byte("w0/"), func(k, v []byte) error {
					if !bytes.Equal(k, v) {
						return fmt.Errorf("key %q holds %q", k, v)
					}
					return nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent use: %v", err)
	}
	n := 0
	if err := s.Iterate(ksA, nil, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != writers*puts {
		t.Errorf("Iterate found %d keys, want %d", n, writers*puts)
	}
	for w := range writers {
		for i := range puts {
			k := fmt.Sprintf("w%d/%03d", w, i)
			wantValue(t, s, ksA, k, k)
		}
	}
}
