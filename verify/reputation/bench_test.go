package reputation

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/store"
)

const (
	benchSubjects     = 1_000
	benchAttesters    = 50 // the first benchAttesters subjects also attest
	benchAttestations = 10_000
)

// benchBook is a book of benchAttestations challenge attestations (nine in
// ten passed) by benchAttesters attesters about benchSubjects suppliers,
// spread over the last day; the book's own peer is the first attester.
func benchBook(b *testing.B) (*Book, []node) {
	b.Helper()
	nodes := newNodes(b, benchSubjects)
	b.StopTimer()
	defer b.StartTimer()
	rng := rand.New(rand.NewPCG(1, 2))
	book, err := Open(store.NewMemory(), nodes[0].id, Config{Now: func() time.Time { return testNow }, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	for range benchAttestations {
		i, j := rng.IntN(benchAttesters), rng.IntN(benchSubjects)
		if i == j {
			j = (j + 1) % benchSubjects
		}
		created := testNow.Add(-time.Duration(rng.Int64N(int64(MaxAttestationAge))))
		book.Add(attest(b, nodes[i], nodes[j].id, KindChallenge, rng.IntN(10) != 0, created))
	}
	return book, nodes
}

// BenchmarkScore is a renter's read of one supplier's score from the
// cached computation.
func BenchmarkScore(b *testing.B) {
	book, nodes := benchBook(b)
	book.Score(nodes[1].id) // compute once
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		book.Score(nodes[i%benchSubjects].id)
		i++
	}
}

// BenchmarkScoreRecompute is the first read after an Add: the whole
// computation (decay, local trust, power iteration, per-subject scores,
// conflicts) over 1,000 subjects and 10,000 attestations.
func BenchmarkScoreRecompute(b *testing.B) {
	book, nodes := benchBook(b)
	b.ReportAllocs()
	for b.Loop() {
		book.mu.Lock()
		book.snap = nil
		book.mu.Unlock()
		book.Score(nodes[1].id)
	}
}

// BenchmarkOpenAttestation is the decode path of one gossiped
// attestation: size, signature, decode and field checks.
func BenchmarkOpenAttestation(b *testing.B) {
	auditor, supplier := newNode(b), newNode(b)
	m := challengeMsg(supplier.id, true, testNow)
	m.GpuUuids = []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7"}
	raw := seal(b, m, auditor)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := OpenAttestation(raw, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
