package settle

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/store"
)

// The durable benchmarks write to Badger stores in b.TempDir() with synced
// writes. BenchmarkReceiptDurable against BenchmarkRawBadgerBatch is the
// cost of settlement's checks and signatures over the synced batch they
// ride on; BenchmarkReceiptVerify against BenchmarkRawEd25519Verify is the
// cost of decoding and checking a receipt over its signature check.

// issued returns n receipts of a fresh lease issued by a meter on an
// in-memory ledger, and a payer for them on a Badger store.
func issued(b *testing.B, n int) (*Payer, []*Receipt) {
	b.Helper()
	sup, ren := newNode(b), newNode(b)
	terms := testTerms(sup, ren)
	terms.End = terms.Start.Add(time.Duration(n+1) * terms.Interval)
	terms.CreditLimit = MaxAmountMicros // the meter issues them all unpaid
	m, err := NewMeter(openLedger(b, store.NewMemory()), sup.key, terms)
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewPayer(openLedger(b, openBadger(b, b.TempDir())), ren.key, terms)
	if err != nil {
		b.Fatal(err)
	}
	rs := make([]*Receipt, n)
	at := terms.Start
	for i := range rs {
		r, err := m.Issue(1, at, at.Add(terms.Interval), terms.Interval.Milliseconds()*2, Usage{Measured: true, UtilPermille: 900}, nil, false, StateRunning)
		if err != nil {
			b.Fatal(err)
		}
		rs[i], at = r, at.Add(terms.Interval)
	}
	return p, rs
}

// BenchmarkReceiptDurable is the renter's handling of one receipt:
// Payer.Accept opens and checks it, signs the voucher and keeps both in
// one synced batch.
func BenchmarkReceiptDurable(b *testing.B) {
	p, rs := issued(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := p.Accept(rs[i].Raw, 1, rs[i].End()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiptRoundTrip is one whole metering step, each side on its
// own store: Meter.Issue (sign, synced put), Payer.Accept (open, check,
// sign, synced batch) and Meter.Accept (open, check, synced put).
func BenchmarkReceiptRoundTrip(b *testing.B) {
	x := newPair(b)
	x.terms.End = x.terms.Start.Add(time.Duration(b.N+1) * testInterval)
	x.m.t.End, x.p.t.End = x.terms.End, x.terms.End
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		x.step(b)
	}
}

// rawBadgerOptions are the options store.OpenBadger uses (store/badger.go),
// with synced writes.
func rawBadgerOptions(dir string) badger.Options {
	return badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithLogger(nil).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithNumCompactors(2).
		WithValueLogFileSize(64 << 20)
}

// BenchmarkRawBadgerBatch writes what Payer.Accept's batch writes — a
// receipt, a voucher and the best-voucher entry, of the same sizes under
// keys of the same sizes — in one synced transaction of the raw Badger
// API.
func BenchmarkRawBadgerBatch(b *testing.B) {
	p, rs := issued(b, 1)
	v, err := p.Accept(rs[0].Raw, 1, rs[0].End())
	if err != nil {
		b.Fatal(err)
	}
	receipt, voucher, best := make([]byte, len(rs[0].Raw)), make([]byte, len(v)), make([]byte, len(v)+8)
	db, err := badger.Open(rawBadgerOptions(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	key := func(prefix string, i int, seq bool) []byte {
		k := append([]byte(prefix), make([]byte, 32)...)
		binary.BigEndian.PutUint64(k[len(prefix):], uint64(i))
		if seq {
			k = binary.BigEndian.AppendUint64(k, uint64(i))
		}
		return k
	}
	b.SetBytes(int64(len(receipt) + len(voucher) + len(best)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		err := db.Update(func(txn *badger.Txn) error {
			if err := txn.Set(key("settle-receipts\x00", i, true), receipt); err != nil {
				return err
			}
			if err := txn.Set(key("settle-acks\x00", i, true), voucher); err != nil {
				return err
			}
			return txn.Set(key("settle-vouchers\x00", 0, false), best)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiptVerify is OpenReceipt (size, envelope, signature,
// decode, shape) and CheckUsage of one receipt.
func BenchmarkReceiptVerify(b *testing.B) {
	_, rs := issued(b, 1)
	raw := rs[0].Raw
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := OpenReceipt(raw)
		if err != nil {
			b.Fatal(err)
		}
		if err := CheckUsage(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawEd25519Verify is ed25519.Verify of a message the size of
// what a receipt's envelope signature covers (domain, payload type and
// payload, each with its length).
func BenchmarkRawEd25519Verify(b *testing.B) {
	_, rs := issued(b, 1)
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(rs[0].Receipt)
	if err != nil {
		b.Fatal(err)
	}
	n := len(ReceiptDomain) + len(ReceiptPayloadType) + len(payload) + 3
	msg := make([]byte, n)
	_, _ = rand.Read(msg)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	sig := ed25519.Sign(priv, msg)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("signature does not verify")
		}
	}
}
