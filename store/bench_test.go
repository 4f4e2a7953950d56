package store_test

import (
	"encoding/binary"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpumesh/gpumesh/store"
)

// The three benchmarks write 200-byte values under 8-byte keys on disk with
// the options OpenBadger uses, so BenchmarkBadgerPut against
// BenchmarkRawBadgerUpdate is the cost of our layer over raw Badger, and
// BenchmarkRawBadgerWriteBatch is the bulk-write ceiling.

const benchValueSize = 200

func benchKey(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

// BenchmarkBadgerPut is a synced Put through the Store.
func BenchmarkBadgerPut(b *testing.B) {
	s, err := store.OpenBadger(b.TempDir(), store.WithLogger(testLogger(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	value := make([]byte, benchValueSize)
	b.SetBytes(benchValueSize)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := s.Put(ksTest, benchKey(i), value); err != nil {
			b.Fatal(err)
		}
	}
}

func openRawBadger(b *testing.B) *badger.DB {
	b.Helper()
	opts := store.TunedBadgerOptions(b.TempDir(), store.WithLogger(testLogger(b))).WithSyncWrites(true)
	db, err := badger.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	return db
}

// BenchmarkRawBadgerUpdate is the same write as BenchmarkBadgerPut through
// db.Update with SyncWrites.
func BenchmarkRawBadgerUpdate(b *testing.B) {
	db := openRawBadger(b)
	defer db.Close()
	value := make([]byte, benchValueSize)
	b.SetBytes(benchValueSize)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := benchKey(i)
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set(key, value) }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawBadgerWriteBatch writes the same values through one
// WriteBatch; the timed part includes the final Flush.
func BenchmarkRawBadgerWriteBatch(b *testing.B) {
	db := openRawBadger(b)
	defer db.Close()
	value := make([]byte, benchValueSize)
	b.SetBytes(benchValueSize)
	b.ReportAllocs()
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	b.ResetTimer()
	for i := range b.N {
		if err := wb.Set(benchKey(i), value); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
}
