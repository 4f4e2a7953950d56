package store_test

import (
	"fmt"
	"testing"

	"github.com/gpumesh/gpumesh/store"
)

// TestBadgerSize: a store on disk reports its value log from the start
// and its LSM tables once a memtable is flushed (on Close at the latest);
// one in memory reports nothing.
func TestBadgerSize(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	if _, vlog := b.Size(); vlog <= 0 {
		t.Fatalf("a fresh store's value log: %d bytes", vlog)
	}
	err := b.Batch(func(tx store.Batch) error {
		for i := range 1000 {
			if err := tx.Put(ksTest, fmt.Appendf(nil, "key-%04d", i), make([]byte, 512)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBadger(t, dir)
	defer b.Close()
	if lsm, vlog := b.Size(); lsm <= 0 || vlog <= 0 {
		t.Fatalf("after 1000 writes and a reopen: lsm %d, vlog %d bytes", lsm, vlog)
	}

	mem := openBadger(t, "", store.WithInMemory())
	defer mem.Close()
	if lsm, vlog := mem.Size(); lsm != 0 || vlog != 0 {
		t.Fatalf("in memory: lsm %d, vlog %d", lsm, vlog)
	}
}
