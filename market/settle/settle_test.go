package settle

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	mpb "github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// TestReceiptsRoot checks receipts_root as PROTOCOL §32.1 gives it: the
// empty string's hash for no receipts, SHA-256(0x00 || h) for one, and
// at every size up to 40 the tree built level by level, an odd last node
// promoted (RFC 6962's tree; package merkle checks the RFC's vectors).
func TestReceiptsRoot(t *testing.T) {
	if got, want := ReceiptsRoot(nil), sha256.Sum256(nil); got != want || got != emptyRoot() {
		t.Errorf("root of no receipts = %x, want %x", got, want)
	}
	h := sha256.Sum256([]byte("receipt"))
	if got, want := ReceiptsRoot([][32]byte{h}), sha256.Sum256(append([]byte{0}, h[:]...)); got != want {
		t.Errorf("root of one receipt = %x, want %x", got, want)
	}
	var hashes [][32]byte
	for n := range 40 {
		if got, want := ReceiptsRoot(hashes), bottomUpRoot(hashes); got != want {
			t.Fatalf("ReceiptsRoot of %d = %x, bottom-up %x", n, got, want)
		}
		hashes = append(hashes, sha256.Sum256([]byte{byte(n)}))
	}
}

func TestHappyPath(t *testing.T) {
	x := newPair(t)
	var hashes [][32]byte
	for range 20 {
		r, _ := x.step(t)
		hashes = append(hashes, r.Hash)
	}
	last := x.p.Last()
	want := market.AmountMicros(x.terms.PriceMicros, 20*testInterval.Milliseconds()*2)
	switch {
	case last.Seq != 20 || last.CumAmountMicros != want:
		t.Fatalf("last receipt seq %d amount %d, want 20, %d", last.Seq, last.CumAmountMicros, want)
	case x.p.Paid() != want || x.m.Owed() != 0 || x.m.OverCredit() || len(x.m.Unacked()) != 0:
		t.Fatalf("paid %d, owed %d, over credit %v, unacked %d; want %d, 0, false, 0", x.p.Paid(), x.m.Owed(), x.m.OverCredit(), len(x.m.Unacked()), want)
	case !x.m.LastPaid().Equal(x.now):
		t.Fatalf("LastPaid %s, want %s", x.m.LastPaid(), x.now)
	}
	for _, led := range []*Ledger{x.sled, x.rled} {
		if n, paid, err := led.Paid(x.terms.LeaseID); err != nil || n != 20 || paid != want {
			t.Fatalf("Paid = %d receipts, %d micros, %v; want 20, %d", n, paid, err, want)
		}
		rep, err := led.Verify(x.terms.LeaseID, x.now)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Valid || rep.Receipts != 20 || rep.AmountMicros != want || rep.PaidMicros != want || rep.GPUSeconds != 400 || len(rep.Attempts) != 1 || rep.Settled {
			t.Fatalf("%s report %+v", rep.Role, rep)
		}
		// Every receipt of the exchange measured 90% and no memory.
		if rep.UtilPct == nil || *rep.UtilPct != 90 || rep.MemUsedBytes == nil || *rep.MemUsedBytes != 0 {
			t.Fatalf("%s report's usage: %v %%, %v bytes; want 90 %%, 0", rep.Role, rep.UtilPct, rep.MemUsedBytes)
		}
	}

	stmt, err := x.p.Statement(OutcomeSucceeded, x.now)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStatement(stmt)
	if err != nil {
		t.Fatal(err)
	}
	root := bottomUpRoot(hashes)
	if !bytes.Equal(s.ReceiptsRoot, root[:]) || s.FinalSeq != 20 || s.TotalMicros != want || s.CumGpuMs != 400_000 {
		t.Fatalf("statement %v; want root %x", s.Statement, root)
	}
	if again, err := x.p.Statement(OutcomeSucceeded, x.now.Add(time.Second)); err != nil || !bytes.Equal(again, stmt) {
		t.Fatalf("Statement again: %v, same %v", err, bytes.Equal(again, stmt))
	}
	_, err = x.p.Statement(OutcomeFailed, x.now)
	wantErr(t, "Statement with another outcome", err, ErrSettled)

	stl, err := x.m.Countersign(stmt, x.now)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := x.m.Countersign(stmt, x.now.Add(time.Second)); err != nil || !bytes.Equal(again, stl) {
		t.Fatalf("Countersign again: %v", err)
	}
	if err := x.p.Settle(stl); err != nil {
		t.Fatal(err)
	}
	if err := x.p.Settle(stl); err != nil {
		t.Fatalf("Settle again: %v", err)
	}
	for _, led := range []*Ledger{x.sled, x.rled} {
		rep, err := led.Verify(x.terms.LeaseID, x.now)
		if err != nil || !rep.Valid || !rep.Settled {
			t.Fatalf("report after settling: %+v, %v", rep, err)
		}
		leases, err := led.Leases()
		if err != nil || len(leases) != 1 || leases[0] != x.terms.LeaseID {
			t.Fatalf("Leases = %v, %v", leases, err)
		}
		rs, err := led.Receipts(x.terms.LeaseID)
		if err != nil || len(rs) != 20 || rs[19].Hash != hashes[19] {
			t.Fatalf("Receipts: %d, %v", len(rs), err)
		}
	}

	// Settled: no more receipts or vouchers.
	_, err = x.m.Issue(1, x.now, x.now.Add(time.Second), 0, Usage{}, nil, false, StateRunning)
	wantErr(t, "Issue after settling", err, ErrSettled)
}

// TestReplayedReceipt: a receipt sent again gets the voucher already
// issued, and nothing is paid twice; a voucher sent again is accepted
// once.
func TestReplayedReceipt(t *testing.T) {
	x := newPair(t)
	r1, v1 := x.step(t)
	r2, v2 := x.step(t)
	for _, c := range []struct {
		r *Receipt
		v []byte
	}{{r1, v1}, {r2, v2}, {r2, v2}} {
		got, err := x.p.Accept(c.r.Raw, 1, x.now)
		if err != nil || !bytes.Equal(got, c.v) {
			t.Fatalf("replay of seq %d: %v, same voucher %v", c.r.Seq, err, bytes.Equal(got, c.v))
		}
		if _, err := x.m.Accept(c.v, x.now); c.r.Seq == 2 && err != nil {
			t.Fatalf("voucher of seq 2 again: %v", err)
		} else if c.r.Seq == 1 {
			wantErr(t, "older voucher", err, p2p.ErrStale)
		}
	}
	if want := r2.CumAmountMicros; x.p.Paid() != want || x.m.Owed() != 0 {
		t.Fatalf("paid %d, owed %d; want %d, 0", x.p.Paid(), x.m.Owed(), want)
	}
	rep, _ := x.rled.Verify(x.terms.LeaseID, x.now)
	if !rep.Valid || rep.Receipts != 2 {
		t.Fatalf("report %+v", rep)
	}
}

// TestReceiptOtherLease: a receipt of another lease between the same
// peers is refused and not kept.
func TestReceiptOtherLease(t *testing.T) {
	x := newPair(t)
	x.step(t)
	other := x.terms
	other.LeaseID[0] ^= 1
	led := openLedger(t, store.NewMemory())
	m, err := NewMeter(led, x.sup.key, other)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Issue(1, testStart, testStart.Add(testInterval), 1000, Usage{}, nil, false, StateRunning)
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.p.Accept(r.Raw, 1, x.now)
	wantErr(t, "receipt of another lease", err, market.ErrMismatch)
	if x.p.Last().Seq != 1 {
		t.Fatalf("last seq %d after a foreign receipt", x.p.Last().Seq)
	}
}

// TestStaleAttempt: once the job moved on to attempt 2, receipts of
// attempt 1 are refused, not kept and not evidence.
func TestStaleAttempt(t *testing.T) {
	x := newPair(t)
	x.step(t)
	r := x.issue(t)
	_, err := x.p.Accept(r.Raw, 2, x.now)
	wantErr(t, "receipt of attempt 1 at attempt 2", err, ErrStaleAttempt)
	if x.p.Last().Seq != 1 || len(x.evidence) != 0 {
		t.Fatalf("last seq %d, %d evidence after a stale receipt", x.p.Last().Seq, len(x.evidence))
	}
	// An acknowledged seq sent again by the zombie: the same receipt gets
	// its voucher back, another one is evidence, whatever the attempt.
	r1 := x.p.Last()
	if _, err := x.p.Accept(r1.Raw, 2, x.now); err != nil {
		t.Fatalf("seq 1 again at attempt 2: %v", err)
	}
	twin := sealReceipt(t, receiptMsg(r1, func(m *pb.Receipt) { m.GpuMs, m.CumGpuMs = 0, 0 }), x.sup)
	_, err = x.p.Accept(twin, 2, x.now)
	wantErr(t, "another seq 1 at attempt 2", err, ErrEvidence)
}

// TestOutOfOrder: a gap is refused until the missing receipt comes.
func TestOutOfOrder(t *testing.T) {
	x := newPair(t)
	r1, r2, r3 := x.issue(t), x.issue(t), x.issue(t)
	if _, err := x.p.Accept(r1.Raw, 1, x.now); err != nil {
		t.Fatal(err)
	}
	_, err := x.p.Accept(r3.Raw, 1, x.now)
	wantErr(t, "seq 3 after seq 1", err, ErrOutOfOrder)
	for _, r := range []*Receipt{r2, r3} {
		if _, err := x.p.Accept(r.Raw, 1, x.now); err != nil {
			t.Fatalf("seq %d: %v", r.Seq, err)
		}
	}
	if got := x.m.Unacked(); len(got) != 3 {
		t.Fatalf("%d unacked receipts at the meter, want 3", len(got))
	}
}

// TestEquivocation: a second receipt for an acknowledged seq is evidence;
// it is stored, handed to OnEvidence, and checks out in a fresh ledger.
func TestEquivocation(t *testing.T) {
	x := newPair(t)
	r1, _ := x.step(t)
	twin := sealReceipt(t, receiptMsg(r1, func(m *pb.Receipt) { m.UtilPermille = 100 }), x.sup)
	_, err := x.p.Accept(twin, 1, x.now)
	wantErr(t, "second receipt for seq 1", err, ErrEvidence)
	ev := checkEvidenceKept(t, x.rled, x.evidence, KindReceiptEquivocation, x.sup)

	fresh := openLedger(t, store.NewMemory())
	var fired int
	fresh.OnEvidence(func([]byte) { fired++ })
	for range 2 {
		if err := fresh.AddEvidence(ev, x.now); err != nil {
			t.Fatalf("AddEvidence in a fresh ledger: %v", err)
		}
	}
	if got, _ := fresh.Evidence(); len(got) != 1 || fired != 1 {
		t.Fatalf("fresh ledger keeps %d evidence, fired %d times; want 1, 1", len(got), fired)
	}
}

// checkEvidenceKept checks that led keeps exactly one evidence, of kind,
// accusing who, the one seen by OnEvidence, and returns it.
func checkEvidenceKept(t *testing.T, led *Ledger, seen [][]byte, kind string, who node) []byte {
	t.Helper()
	kept, err := led.Evidence()
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || len(seen) != 1 || !bytes.Equal(kept[0].Raw, seen[0]) {
		t.Fatalf("%d evidence kept, %d seen by OnEvidence; want the same one", len(kept), len(seen))
	}
	if e := kept[0]; e.Kind != kind || e.Accused != who.id {
		t.Fatalf("evidence of kind %q against %s, want %q against %s", e.Kind, e.Accused, kind, who.id)
	}
	return seen[0]
}

func TestChainFork(t *testing.T) {
	x := newPair(t)
	x.step(t)
	r2 := x.issue(t)
	fork := sealReceipt(t, receiptMsg(r2, func(m *pb.Receipt) { m.PrevHash = make([]byte, 32) }), x.sup)
	_, err := x.p.Accept(fork, 1, x.now)
	wantErr(t, "forked seq 2", err, ErrEvidence)
	checkEvidenceKept(t, x.rled, x.evidence, KindChainFork, x.sup)
	if _, err := x.p.Accept(r2.Raw, 1, x.now); err != nil {
		t.Fatalf("the real seq 2 after the fork: %v", err)
	}
}

func TestInflatedUsage(t *testing.T) {
	x := newPair(t)
	r := x.issue(t)
	fat := sealReceipt(t, receiptMsg(r, func(m *pb.Receipt) {
		m.GpuMs, m.CumGpuMs = m.GpuMs+1, m.CumGpuMs+1
		m.CumAmountMicros = market.AmountMicros(m.PriceMicros, m.CumGpuMs)
	}), x.sup)
	if _, err := OpenReceipt(fat); err != nil {
		t.Fatalf("OpenReceipt of an inflated receipt: %v; it must open, to be evidence", err)
	}
	_, err := x.p.Accept(fat, 1, x.now)
	wantErr(t, "inflated receipt", err, ErrEvidence)
	checkEvidenceKept(t, x.rled, x.evidence, KindInflatedUsage, x.sup)
	if x.p.Last() != nil {
		t.Fatal("inflated receipt kept")
	}
}

func TestAmountMismatch(t *testing.T) {
	x := newPair(t)
	r := x.issue(t)
	dear := sealReceipt(t, receiptMsg(r, func(m *pb.Receipt) { m.CumAmountMicros++ }), x.sup)
	_, err := x.p.Accept(dear, 1, x.now)
	wantErr(t, "overcharging receipt", err, ErrEvidence)
	checkEvidenceKept(t, x.rled, x.evidence, KindAmountMismatch, x.sup)
}

func TestFutureReceipt(t *testing.T) {
	x := newPair(t)
	r := x.issue(t)
	_, err := x.p.Accept(r.Raw, 1, r.End().Add(-MaxClockSkew-time.Millisecond))
	wantErr(t, "receipt ending in the future", err, ErrFuture)
	if x.p.Last() != nil {
		t.Fatal("future receipt kept")
	}
	if _, err := x.p.Accept(r.Raw, 1, r.End().Add(-MaxClockSkew)); err != nil {
		t.Fatalf("receipt within the skew: %v", err)
	}
}

// TestReceiptChecks covers the refusals that are neither evidence nor
// ordering: wrong signer, price, overlap, the lease's end.
func TestReceiptChecks(t *testing.T) {
	x := newPair(t)
	r1, _ := x.step(t)
	r2 := x.issue(t)
	third := newNode(t)
	for _, c := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"signed by a third party", sealReceipt(t, receiptMsg(r2, func(*pb.Receipt) {}), third), p2p.ErrSignerMismatch},
		{"another price", sealReceipt(t, receiptMsg(r2, func(m *pb.Receipt) {
			m.PriceMicros *= 2
			m.CumAmountMicros = market.AmountMicros(m.PriceMicros, m.CumGpuMs)
		}), x.sup), market.ErrMismatch},
		{"cumulative usage not adding up", sealReceipt(t, receiptMsg(r2, func(m *pb.Receipt) {
			m.CumGpuMs += 1000
			m.CumAmountMicros = market.AmountMicros(m.PriceMicros, m.CumGpuMs)
		}), x.sup), market.ErrMismatch},
		{"overlapping the last interval", sealReceipt(t, receiptMsg(r2, func(m *pb.Receipt) {
			m.StartMs = r1.StartMs
		}), x.sup), market.ErrMismatch},
		{"after the lease", sealReceipt(t, receiptMsg(r2, func(m *pb.Receipt) {
			m.EndMs = x.terms.End.Add(2 * testInterval).UnixMilli()
		}), x.sup), market.ErrMismatch},
	} {
		_, err := x.p.Accept(c.raw, 1, x.terms.End.Add(time.Hour))
		wantErr(t, c.name, err, c.want)
	}
	if len(x.evidence) != 0 || x.p.Last().Seq != 1 {
		t.Fatalf("%d evidence, last seq %d after refusals", len(x.evidence), x.p.Last().Seq)
	}
}

func TestVoucherReplayAndOrder(t *testing.T) {
	x := newPair(t)
	_, v1 := x.step(t)
	_, v2 := x.step(t)
	got, err := x.m.Accept(v2, x.now)
	if err != nil || !bytes.Equal(got.Raw, v2) {
		t.Fatalf("best voucher again: %v", err)
	}
	_, err = x.m.Accept(v1, x.now)
	wantErr(t, "older voucher", err, p2p.ErrStale)
	if len(x.supEv) != 0 {
		t.Fatalf("%d evidence from replays", len(x.supEv))
	}
}

// TestVoucherEvidence: a reused nonce with another amount and a later
// nonce paying less are evidence against the renter.
func TestVoucherEvidence(t *testing.T) {
	for _, c := range []struct {
		kind string
		fn   func(m *pb.Voucher)
	}{
		{KindVoucherNonceReuse, func(m *pb.Voucher) { m.CumAmountMicros-- }},
		{KindVoucherDecrease, func(m *pb.Voucher) { m.Nonce++; m.CumAmountMicros-- }},
	} {
		t.Run(c.kind, func(t *testing.T) {
			x := newPair(t)
			x.step(t)
			_, v2 := x.step(t)
			bad := sealVoucher(t, voucherMsg(t, v2, c.fn), x.ren)
			_, err := x.m.Accept(bad, x.now)
			wantErr(t, c.kind, err, ErrEvidence)
			ev := checkEvidenceKept(t, x.sled, x.supEv, c.kind, x.ren)
			if err := openLedger(t, store.NewMemory()).AddEvidence(ev, x.now); err != nil {
				t.Fatalf("AddEvidence in a fresh ledger: %v", err)
			}
		})
	}
}

func TestVoucherChecks(t *testing.T) {
	x := newPair(t)
	_, v1 := x.step(t)
	r2 := x.issue(t)
	v2, err := x.p.Accept(r2.Raw, 1, x.now)
	if err != nil {
		t.Fatal(err)
	}
	third := newNode(t)
	for _, c := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"unknown receipt", sealVoucher(t, voucherMsg(t, v2, func(m *pb.Voucher) { m.ReceiptHash = make([]byte, 32) }), x.ren), market.ErrMismatch},
		{"above the receipt", sealVoucher(t, voucherMsg(t, v2, func(m *pb.Voucher) { m.CumAmountMicros++ }), x.ren), market.ErrMismatch},
		{"signed by a third party", sealVoucher(t, voucherMsg(t, v2, func(*pb.Voucher) {}), third), p2p.ErrSignerMismatch},
		{"for another lease", sealVoucher(t, voucherMsg(t, v2, func(m *pb.Voucher) { m.LeaseId = make([]byte, 32) }), x.ren), market.ErrMismatch},
		{"tampered", append(bytes.Clone(v2[:len(v2)-1]), v2[len(v2)-1]^1), p2p.ErrBadEnvelope},
	} {
		_, err := x.m.Accept(c.raw, x.now)
		wantErr(t, c.name, err, c.want)
	}
	if len(x.supEv) != 0 || x.m.Owed() != r2.CumAmountMicros-mustVoucher(t, v1).CumAmountMicros {
		t.Fatalf("%d evidence, owed %d after refusals", len(x.supEv), x.m.Owed())
	}
	if _, err := x.m.Accept(v2, x.now); err != nil || x.m.Owed() != 0 {
		t.Fatalf("the real voucher: %v, owed %d", err, x.m.Owed())
	}
}

func mustVoucher(t testing.TB, raw []byte) *Voucher {
	t.Helper()
	v, err := OpenVoucher(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestForgedEvidence: evidence whose records prove nothing is refused by
// OpenEvidence and not kept by AddEvidence.
func TestForgedEvidence(t *testing.T) {
	x := newPair(t)
	r1, v1 := x.step(t)
	r2, v2 := x.step(t)
	other := newNode(t)
	// Another supplier's receipt for the same lease and seq.
	r1other := sealReceipt(t, receiptMsg(r1, func(*pb.Receipt) {}), other)
	for _, c := range []struct {
		name string
		e    *pb.Evidence
		want error
	}{
		{"equivocation of one receipt", &pb.Evidence{Kind: KindReceiptEquivocation, A: r1.Raw, B: r1.Raw}, ErrBadEvidence},
		{"equivocation of two seqs", &pb.Evidence{Kind: KindReceiptEquivocation, A: r1.Raw, B: r2.Raw}, ErrBadEvidence},
		{"equivocation by two suppliers", &pb.Evidence{Kind: KindReceiptEquivocation, A: r1.Raw, B: r1other}, ErrBadEvidence},
		{"fork that chains", &pb.Evidence{Kind: KindChainFork, A: r1.Raw, B: r2.Raw}, ErrBadEvidence},
		{"honest usage", &pb.Evidence{Kind: KindInflatedUsage, A: r1.Raw}, ErrBadEvidence},
		{"honest amount", &pb.Evidence{Kind: KindAmountMismatch, A: r2.Raw}, ErrBadEvidence},
		{"nonces that differ", &pb.Evidence{Kind: KindVoucherNonceReuse, A: v1, B: v2}, ErrBadEvidence},
		{"vouchers that increase", &pb.Evidence{Kind: KindVoucherDecrease, A: v1, B: v2}, ErrBadEvidence},
		{"a voucher as a receipt", &pb.Evidence{Kind: KindInflatedUsage, A: v1}, p2p.ErrBadEnvelope},
		{"unknown kind", &pb.Evidence{Kind: "rudeness", A: r1.Raw}, p2p.ErrMalformed},
		{"second record where none belongs", &pb.Evidence{Kind: KindAmountMismatch, A: r1.Raw, B: r2.Raw}, p2p.ErrMalformed},
	} {
		c.e.CreatedMs = x.now.UnixMilli()
		raw, err := SealEvidence(c.e, x.ren.key)
		if err != nil {
			t.Fatal(err)
		}
		_, err = OpenEvidence(raw)
		wantErr(t, c.name, err, c.want)
		if !wrapsOneNamed(err) {
			t.Errorf("%s: %v wraps more than one named error", c.name, err)
		}
		wantErr(t, c.name+" (AddEvidence)", x.sled.AddEvidence(raw, x.now), c.want)
	}
	if kept, _ := x.sled.Evidence(); len(kept) != 0 || len(x.supEv) != 0 {
		t.Fatalf("%d forged evidence kept, %d fired", len(kept), len(x.supEv))
	}
}

// TestCountersignConflict: a statement that contradicts the supplier's
// records is refused; the true one is then countersigned.
func TestCountersignConflict(t *testing.T) {
	x := newPair(t)
	for range 5 {
		x.step(t)
	}
	stmt, err := x.p.Statement(OutcomeSucceeded, x.now)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := OpenStatement(stmt)
	forge := func(fn func(m *pb.Statement)) []byte {
		m := s.Statement
		c := &pb.Statement{
			Supplier: m.Supplier, LeaseId: m.LeaseId, JobId: m.JobId, FinalSeq: m.FinalSeq, Receipts: m.Receipts,
			ReceiptsRoot: m.ReceiptsRoot, CumGpuMs: m.CumGpuMs, TotalMicros: m.TotalMicros,
			FinalVoucherHash: m.FinalVoucherHash, Outcome: m.Outcome, CreatedMs: m.CreatedMs,
		}
		fn(c)
		raw, err := SealStatement(c, x.ren.key)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	third := newNode(t)
	byThird, _ := SealStatement(&pb.Statement{
		Supplier: s.Statement.Supplier, LeaseId: s.LeaseId, JobId: s.JobId, FinalSeq: s.FinalSeq, Receipts: s.Receipts,
		ReceiptsRoot: s.ReceiptsRoot, CumGpuMs: s.CumGpuMs, TotalMicros: s.TotalMicros, FinalVoucherHash: s.FinalVoucherHash,
		Outcome: s.Outcome, CreatedMs: s.CreatedMs,
	}, third.key)
	for _, c := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"lower total", forge(func(m *pb.Statement) { m.TotalMicros-- }), market.ErrMismatch},
		{"other usage", forge(func(m *pb.Statement) { m.CumGpuMs++ }), market.ErrMismatch},
		{"wrong root", forge(func(m *pb.Statement) { m.ReceiptsRoot = make([]byte, 32) }), market.ErrMismatch},
		{"earlier final seq", forge(func(m *pb.Statement) { m.FinalSeq, m.Receipts = 4, 4 }), market.ErrMismatch},
		{"other voucher", forge(func(m *pb.Statement) { m.FinalVoucherHash = make([]byte, 32) }), market.ErrMismatch},
		{"other job", forge(func(m *pb.Statement) { m.JobId = make([]byte, 16) }), market.ErrMismatch},
		{"signed by a third party", byThird, p2p.ErrSignerMismatch},
	} {
		_, err := x.m.Countersign(c.raw, x.now)
		wantErr(t, c.name, err, c.want)
	}
	if v, _ := x.ss.Get(ksSettlements, x.terms.LeaseID[:]); v != nil {
		t.Fatal("a settlement was kept for a refused statement")
	}
	stl, err := x.m.Countersign(stmt, x.now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.m.Countersign(forge(func(m *pb.Statement) { m.Outcome = OutcomeFailed }), x.now)
	wantErr(t, "a second statement", err, ErrSettled)
	// A settlement of another statement is refused by the renter.
	other, err := SealSettlement(&pb.Settlement{Statement: forge(func(m *pb.Statement) { m.CreatedMs++ }), CreatedMs: 1}, x.sup.key)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "settlement of another statement", x.p.Settle(other), market.ErrMismatch)
	if err := x.p.Settle(stl); err != nil {
		t.Fatal(err)
	}
}

// TestRestart closes and reopens both ledgers mid-stream, with a receipt
// issued but not yet delivered: both sides continue, and nothing is
// signed twice.
func TestRestart(t *testing.T) {
	x := newPair(t)
	for range 5 {
		x.step(t)
	}
	r6 := x.issue(t) // issued and kept, never delivered
	x.reopen(t)
	if last := x.m.Last(); last.Seq != 6 || last.Hash != r6.Hash {
		t.Fatalf("meter resumed at seq %d", last.Seq)
	}
	if last := x.p.Last(); last.Seq != 5 {
		t.Fatalf("payer resumed at seq %d", last.Seq)
	}
	unacked := x.m.Unacked()
	if len(unacked) != 1 || unacked[0].Hash != r6.Hash {
		t.Fatalf("unacked after restart: %d", len(unacked))
	}
	if !x.m.LastPaid().Equal(x.now.Add(-testInterval)) {
		t.Fatalf("LastPaid after restart %s", x.m.LastPaid())
	}
	x.pay(t, unacked[0])
	for range 4 {
		x.step(t)
	}
	rs, err := x.sled.Receipts(x.terms.LeaseID)
	if err != nil || len(rs) != 10 {
		t.Fatalf("%d receipts, %v", len(rs), err)
	}
	seen := map[[32]byte]bool{}
	for i, r := range rs {
		if r.Seq != uint64(i+1) || seen[r.Hash] {
			t.Fatalf("receipt %d is seq %d, seen before %v", i, r.Seq, seen[r.Hash])
		}
		seen[r.Hash] = true
		if i > 0 && !bytes.Equal(r.PrevHash, rs[i-1].Hash[:]) {
			t.Fatalf("seq %d does not chain to seq %d", r.Seq, i)
		}
	}
	for _, led := range []*Ledger{x.sled, x.rled} {
		rep, err := led.Verify(x.terms.LeaseID, x.now)
		if err != nil || !rep.Valid || rep.Receipts != 10 || rep.PaidMicros != rs[9].CumAmountMicros {
			t.Fatalf("report after restart: %+v, %v", rep, err)
		}
	}
}

// TestCredit: a renter that withholds vouchers gets at most the credit
// limit of receipts that add usage.
func TestCredit(t *testing.T) {
	x := newPair(t)
	x.step(t)
	for !x.m.OverCredit() {
		x.issue(t)
	}
	owed := x.m.Owed()
	if owed <= x.terms.CreditLimit || owed > x.terms.CreditLimit+market.AmountMicros(x.terms.PriceMicros, testInterval.Milliseconds()*2) {
		t.Fatalf("owed %d with a credit limit of %d", owed, x.terms.CreditLimit)
	}
	_, err := x.m.Issue(1, x.now, x.now.Add(testInterval), 1, Usage{}, nil, false, StateRunning)
	wantErr(t, "usage over credit", err, ErrOverCredit)
	if _, err := x.m.Issue(1, x.now, x.now.Add(testInterval), 0, Usage{}, nil, false, StateRunning); err != nil {
		t.Fatalf("a paused interval over credit: %v", err)
	}
	x.now = x.now.Add(testInterval)
	if _, err := x.m.Issue(1, x.now, x.now.Add(time.Second), 2000, Usage{}, nil, true, "halted"); err != nil {
		t.Fatalf("the final receipt over credit: %v", err)
	}
	// Paying for everything catches up.
	for _, r := range x.m.Unacked() {
		x.now = r.End()
		x.pay(t, r)
	}
	if x.m.OverCredit() || x.m.Owed() != 0 {
		t.Fatalf("owed %d after paying up", x.m.Owed())
	}
}

// TestIssueChecks covers what the meter refuses to sign, and attempts.
func TestIssueChecks(t *testing.T) {
	x := newPair(t)
	x.step(t)
	s := x.now
	for _, c := range []struct {
		name    string
		attempt uint32
		start   time.Time
		gpuMs   int64
		final   bool
		state   string
		want    error
	}{
		{"usage over wall clock", 1, s, 2*testInterval.Milliseconds() + 1, false, StateRunning, ErrInflatedUsage},
		{"overlap", 1, s.Add(-time.Millisecond), 0, false, StateRunning, market.ErrMismatch},
		{"attempt 0", 0, s, 0, false, StateRunning, p2p.ErrMalformed},
		{"final while running", 1, s, 0, true, StateRunning, p2p.ErrMalformed},
		{"bad state", 1, s, 0, false, "Running!", p2p.ErrMalformed},
	} {
		_, err := x.m.Issue(c.attempt, c.start, s.Add(testInterval), c.gpuMs, Usage{}, nil, c.final, c.state)
		wantErr(t, c.name, err, c.want)
	}
	_, err := x.m.Issue(1, s, x.terms.End.Add(2*testInterval), 0, Usage{}, nil, false, StateRunning)
	wantErr(t, "after the lease", err, market.ErrMismatch)

	// Attempt 1 ends; attempt 2 continues the lease's seqs.
	x.now = s.Add(testInterval)
	r, err := x.m.Issue(1, s, x.now, 1000, Usage{}, nil, true, "failed")
	if err != nil {
		t.Fatal(err)
	}
	x.pay(t, r)
	_, err = x.m.Issue(1, x.now, x.now.Add(time.Second), 0, Usage{}, nil, false, StateRunning)
	wantErr(t, "attempt 1 after its final receipt", err, ErrStaleAttempt)
	x.attempt = 2
	r3, _ := x.step(t)
	if r3.Seq != 3 || r3.Attempt != 2 {
		t.Fatalf("attempt 2's receipt is seq %d attempt %d", r3.Seq, r3.Attempt)
	}
	_, err = x.m.Issue(1, x.now, x.now.Add(time.Second), 0, Usage{}, nil, false, StateRunning)
	wantErr(t, "attempt 1 after attempt 2", err, ErrStaleAttempt)
	rep, err := x.rled.Verify(x.terms.LeaseID, x.now)
	if err != nil || !rep.Valid || len(rep.Attempts) != 2 {
		t.Fatalf("report: %+v, %v", rep, err)
	}
}

// TestVerifyFindsTampering: Verify names what is wrong, and where.
func TestVerifyFindsTampering(t *testing.T) {
	x := newPair(t)
	var rs []*Receipt
	for range 4 {
		r, _ := x.step(t)
		rs = append(rs, r)
	}
	lease := x.terms.LeaseID
	// The renter's store: seq 3 replaced by a receipt with more usage.
	fat := sealReceipt(t, receiptMsg(rs[2], func(m *pb.Receipt) { m.CumAmountMicros += 7 }), x.sup)
	if err := x.rs.Put(ksReceipts, seqKey(lease, 3), fat); err != nil {
		t.Fatal(err)
	}
	rep, err := x.rled.Verify(lease, x.now)
	if err != nil {
		t.Fatal(err)
	}
	wantProblems(t, rep, "receipt seq 3:", "receipt seq 4: prev_hash", "voucher of seq 3")

	// The supplier's store: seq 2 gone.
	if err := x.ss.Delete(ksReceipts, seqKey(lease, 2)); err != nil {
		t.Fatal(err)
	}
	rep, err = x.sled.Verify(lease, x.now)
	if err != nil {
		t.Fatal(err)
	}
	wantProblems(t, rep, "receipt seq 2 missing")

	if _, err := x.sled.Verify(market.ID{1}, x.now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Verify of an unknown lease: %v", err)
	}
}

func wantProblems(t *testing.T, rep Report, want ...string) {
	t.Helper()
	if rep.Valid {
		t.Fatalf("report valid, want problems %q", want)
	}
	all := strings.Join(rep.Problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("problems do not mention %q:\n%s", w, all)
		}
	}
}

func TestTermsOf(t *testing.T) {
	sup, ren := newNode(t), newNode(t)
	l := &market.Lease{
		Lease: &mpb.Lease{StartMs: testStart.UnixMilli(), EndMs: testStart.Add(time.Hour).UnixMilli(), Count: 4, PriceMicros: 3_600_000},
		ID:    market.ID{7}, Supplier: sup.id, Renter: ren.id,
		Proposal: &market.Proposal{LeaseProposal: &mpb.LeaseProposal{ReceiptIntervalMs: 2000, JobSpecHash: make([]byte, 32)}},
	}
	job := make([]byte, 16)
	got := TermsOf(l, job)
	want := Terms{LeaseID: market.ID{7}, JobID: job, Renter: ren.id, Supplier: sup.id, GPUs: 4, PriceMicros: 3_600_000,
		Start: testStart, End: testStart.Add(time.Hour), Interval: 2 * time.Second, CreditLimit: 16_000} // two intervals: 2 × 2 s × 4 GPUs at 3.60/h
	if metaOf(market.RoleRenter, got) != metaOf(market.RoleRenter, want) {
		t.Fatalf("TermsOf = %+v, want %+v", got, want)
	}
	// A lease that binds no job spec takes its jobs on one meter: every
	// job's terms name the lease's job ID.
	l.Proposal.JobSpecHash = nil
	a, b := TermsOf(l, job), TermsOf(l, []byte("another job id!!"))
	if !bytes.Equal(a.JobID, LeaseJobID(l.ID)) || metaOf(market.RoleRenter, a) != metaOf(market.RoleRenter, b) {
		t.Fatalf("terms of two jobs on a lease with no spec bound differ or do not name its job ID: %x, %x", a.JobID, b.JobID)
	}
	if bytes.Equal(LeaseJobID(market.ID{7}), LeaseJobID(market.ID{8})) || len(LeaseJobID(l.ID)) != JobIDBytes {
		t.Fatal("LeaseJobID is not one per lease, of JobIDBytes")
	}
}

// TestOneMachinePerLease: a ledger hands out one Meter per lease, and
// not a Payer of the same lease.
func TestOneMachinePerLease(t *testing.T) {
	x := newPair(t)
	m, err := NewMeter(x.sled, x.sup.key, x.terms)
	if err != nil || m != x.m {
		t.Fatalf("second NewMeter: %v, same %v", err, m == x.m)
	}
	if _, err := NewPayer(x.sled, x.ren.key, x.terms); err == nil {
		t.Fatal("NewPayer of a lease metered in the same ledger")
	}
	changed := x.terms
	changed.PriceMicros++
	if _, err := NewMeter(x.sled, x.sup.key, changed); !errors.Is(err, market.ErrMismatch) {
		t.Fatalf("NewMeter with other terms: %v", err)
	}
	if _, err := NewMeter(openLedger(t, store.NewMemory()), x.ren.key, x.terms); !errors.Is(err, p2p.ErrSignerMismatch) {
		t.Fatalf("NewMeter with the renter's key: %v", err)
	}
}

// TestEmptyLeaseSettles: a lease with no receipts settles with an empty
// statement.
func TestEmptyLeaseSettles(t *testing.T) {
	x := newPair(t)
	stmt, err := x.p.Statement(OutcomeFailedOver, x.now)
	if err != nil {
		t.Fatal(err)
	}
	stl, err := x.m.Countersign(stmt, x.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.p.Settle(stl); err != nil {
		t.Fatal(err)
	}
	rep, err := x.rled.Verify(x.terms.LeaseID, x.now)
	if err != nil || !rep.Valid || !rep.Settled || rep.Receipts != 0 {
		t.Fatalf("report: %+v, %v", rep, err)
	}
}

// TestConcurrentUse drives a meter and a payer from several goroutines:
// one meters and pays, others read and resend. Run with -race.
func TestConcurrentUse(t *testing.T) {
	x := newPair(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				_, _, _, _ = x.m.Owed(), x.m.OverCredit(), x.m.LastPaid(), x.p.Paid()
				for _, r := range x.m.Unacked() {
					if v, err := x.p.Accept(r.Raw, 1, r.End()); err == nil {
						_, _ = x.m.Accept(v, r.End())
					}
				}
				if r := x.p.Last(); r != nil {
					if _, err := x.p.Accept(r.Raw, 1, r.End()); err != nil {
						t.Errorf("resend of seq %d: %v", r.Seq, err)
					}
				}
			}
		}()
	}
	for range 30 {
		r := x.issue(t)
		if v, err := x.p.Accept(r.Raw, 1, r.End()); err == nil {
			_, _ = x.m.Accept(v, r.End())
		}
	}
	close(done)
	wg.Wait()
	for _, r := range x.m.Unacked() {
		x.pay(t, r)
	}
	if x.m.Owed() != 0 || x.p.Last().Seq != 30 || len(x.evidence)+len(x.supEv) != 0 {
		t.Fatalf("owed %d, last seq %d, %d evidence", x.m.Owed(), x.p.Last().Seq, len(x.evidence)+len(x.supEv))
	}
	for _, led := range []*Ledger{x.sled, x.rled} {
		if rep, err := led.Verify(x.terms.LeaseID, x.now); err != nil || !rep.Valid {
			t.Fatalf("report: %+v, %v", rep, err)
		}
	}
}

// TestFirstReceiptFromLeaseStart: billing starts at the lease's start (a
// job started late pays for the time the GPUs were held before it), and
// never before it: a first receipt reaching back before the lease, even
// by less than MaxOverlap, is refused, and an audit flags one.
func TestFirstReceiptFromLeaseStart(t *testing.T) {
	x := newPair(t)
	// The job starts 30 s into the lease; its first receipt covers the
	// lease from its start.
	x.now = testStart.Add(30 * time.Second)
	r, err := x.m.Issue(x.attempt, testStart, x.now, 30_000*int64(x.terms.GPUs), Usage{}, nil, false, StateRunning)
	if err != nil {
		t.Fatalf("Issue from the lease's start: %v", err)
	}
	early := sealReceipt(t, receiptMsg(r, func(m *pb.Receipt) {
		m.StartMs -= MaxOverlap.Milliseconds() / 2
		m.GpuMs = (m.EndMs - m.StartMs) * int64(m.Gpus)
		m.CumGpuMs = m.GpuMs
		m.CumAmountMicros = market.AmountMicros(m.PriceMicros, m.CumGpuMs)
	}), x.sup)
	_, err = x.p.Accept(early, x.attempt, x.now)
	wantErr(t, "a first receipt starting before the lease", err, market.ErrMismatch)
	x.pay(t, r)
	if rep, err := x.rled.Verify(x.terms.LeaseID, x.now); err != nil || !rep.Valid {
		t.Fatalf("the bill from the lease's start: %v %v", err, rep.Problems)
	}

	// An audit of a ledger that kept such a receipt flags it.
	if err := x.sled.s.Put(ksReceipts, seqKey(x.terms.LeaseID, 1), early); err != nil {
		t.Fatal(err)
	}
	rep, err := x.sled.Verify(x.terms.LeaseID, x.now)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Valid || !strings.Contains(strings.Join(rep.Problems, "; "), "before the lease's start") {
		t.Fatalf("audit of a receipt billing before the lease: valid %v, problems %v", rep.Valid, rep.Problems)
	}
}

// TestReceiptUsageFields: a receipt says whether its usage was measured;
// one that says not, yet carries a utilisation or memory figure, or one
// that claims more memory than any GPU has, is malformed.
func TestReceiptUsageFields(t *testing.T) {
	x := newPair(t)
	r1, _ := x.step(t)
	if !r1.UsageMeasured || r1.UtilPermille != 900 {
		t.Fatalf("issued receipt: measured %v, util %d; want measured 900", r1.UsageMeasured, r1.UtilPermille)
	}
	if _, err := OpenReceipt(sealReceipt(t, receiptMsg(r1, func(m *pb.Receipt) { m.MemUsedBytes = 40 << 30 }), x.sup)); err != nil {
		t.Errorf("measured receipt with 40 GiB in use: %v", err)
	}
	for name, fn := range map[string]func(m *pb.Receipt){
		"util without measuring":   func(m *pb.Receipt) { m.UsageMeasured = false },
		"memory without measuring": func(m *pb.Receipt) { m.UsageMeasured, m.UtilPermille, m.MemUsedBytes = false, 0, 1 },
		"memory out of range":      func(m *pb.Receipt) { m.MemUsedBytes = MaxMemUsedBytes + 1 },
	} {
		_, err := OpenReceipt(sealReceipt(t, receiptMsg(r1, fn), x.sup))
		wantErr(t, name, err, p2p.ErrMalformed)
	}
	unmeasured := sealReceipt(t, receiptMsg(r1, func(m *pb.Receipt) { m.UsageMeasured, m.UtilPermille = false, 0 }), x.sup)
	if _, err := OpenReceipt(unmeasured); err != nil {
		t.Errorf("receipt of unmeasured usage: %v", err)
	}
}

func TestMeasuredUsage(t *testing.T) {
	r := func(measured bool, gpuMs int64, permille uint32, mem uint64) *Receipt {
		return &Receipt{Receipt: &pb.Receipt{UsageMeasured: measured, GpuMs: gpuMs, UtilPermille: permille, MemUsedBytes: mem}}
	}
	if u, m := measuredUsage([]*Receipt{r(false, 1000, 0, 0), nil}); u != nil || m != nil {
		t.Errorf("nothing measured: %v, %v; want nil", u, m)
	}
	u, m := measuredUsage([]*Receipt{r(true, 3000, 1000, 4<<30), r(true, 1000, 200, 0), r(false, 5000, 0, 0)})
	if u == nil || *u != 80 || m == nil || *m != 3<<30 {
		t.Errorf("weighted: %v %%, %v bytes; want 80 %%, 3 GiB", u, m)
	}
	u, _ = measuredUsage([]*Receipt{r(true, 0, 100, 0), r(true, 0, 300, 0)})
	if u == nil || *u != 20 {
		t.Errorf("empty intervals: %v %%, want the even mean 20 %%", u)
	}
}
