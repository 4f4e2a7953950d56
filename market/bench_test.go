package market

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// BenchmarkRawEd25519Verify is the baseline for record validation: one
// Ed25519 signature check of a message the size of an ask.
func BenchmarkRawEd25519Verify(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	msg := make([]byte, 250)
	sig := ed25519.Sign(priv, msg)
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("verify failed")
		}
	}
}

// BenchmarkOrderValidate is the gossip validation path of an ask:
// size, payload-type peek, rate limit, envelope signature, decode, field
// checks, multiaddrs and the replay table, each ask with a fresh nonce.
func BenchmarkOrderValidate(b *testing.B) {
	f := newFixture(b)
	asks := make([][]byte, 1024)
	for i := range asks {
		asks[i] = f.ask(b)
	}
	now := func() time.Time { return f.now }
	var v *OrderValidator
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%len(asks) == 0 {
			v = NewOrderValidator(now, rate.Inf, 1)
		}
		if _, err := v.Check(f.supplier, asks[i%len(asks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkOpenLease verifies a countersigned lease: three signatures
// (lease, proposal, quote) and every consistency check between them.
func BenchmarkOpenLease(b *testing.B) {
	f := newFixture(b)
	lease := f.chain(b).lease
	b.SetBytes(int64(len(lease)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := OpenLease(lease, f.now); err != nil {
			b.Fatal(err)
		}
	}
}
