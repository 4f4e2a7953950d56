package settle

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle/pb"
)

// checkCase is one case of a Verify check: run gives the check a problem
// function; want is a part of the one problem it must report, "" for none.
type checkCase struct {
	name string
	run  func(problem func(string, ...any))
	want string
}

func runChecks(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		var got []string
		tc.run(func(format string, args ...any) { got = append(got, fmtProblem(format, args...)) })
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: problems %q, want none", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: problems %q, want one mentioning %q", tc.name, got, tc.want)
		}
	}
}

func fmtProblem(format string, args ...any) string {
	var a audit
	a.problem(format, args...)
	return a.rep.Problems[0]
}

// verifyFixture is a lease's terms and its first two receipts, as a
// sound supplier issues them: 10 s intervals of both GPUs in full use.
func verifyFixture(t *testing.T) (Terms, *Receipt, *Receipt) {
	terms := testTerms(newNode(t), newNode(t))
	receipt := func(seq uint64, prev *Receipt) *Receipt {
		start := terms.Start.Add(time.Duration(seq-1) * testInterval)
		gpuMs := testInterval.Milliseconds() * int64(terms.GPUs)
		m := &pb.Receipt{Seq: seq, Attempt: 1, JobId: terms.JobID, Gpus: uint32(terms.GPUs), PriceMicros: terms.PriceMicros,
			StartMs: start.UnixMilli(), EndMs: start.Add(testInterval).UnixMilli(), GpuMs: gpuMs, CumGpuMs: int64(seq) * gpuMs}
		m.CumAmountMicros = market.AmountMicros(m.PriceMicros, m.CumGpuMs)
		r := &Receipt{Receipt: m, Supplier: terms.Supplier, Renter: terms.Renter, LeaseID: terms.LeaseID}
		r.Hash[0] = byte(seq)
		if prev != nil {
			m.PrevHash = prev.Hash[:]
		}
		return r
	}
	r1 := receipt(1, nil)
	return terms, r1, receipt(2, r1)
}

// with returns a copy of r changed by f.
func with(r *Receipt, f func(r *Receipt)) *Receipt {
	c := *r
	c.Receipt = proto.Clone(r.Receipt).(*pb.Receipt)
	f(&c)
	return &c
}

func TestCheckReceiptTerms(t *testing.T) {
	terms, r1, _ := verifyFixture(t)
	other := newNode(t).id
	check := func(r *Receipt) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkReceiptTerms(terms, r, 1, p) }
	}
	runChecks(t, []checkCase{
		{"sound", check(r1), ""},
		{"kept at another seq", check(with(r1, func(r *Receipt) { r.Seq = 2 })), "kept as seq 1 is seq 2"},
		{"another signer", check(with(r1, func(r *Receipt) { r.Supplier = other })), "not the lease's supplier"},
		{"another lease", check(with(r1, func(r *Receipt) { r.LeaseID = market.ID{9} })), "receipt seq 1 is for lease"},
		{"another renter", check(with(r1, func(r *Receipt) { r.Renter = other })), "receipt seq 1 is for lease"},
		{"another job", check(with(r1, func(r *Receipt) { r.JobId = make([]byte, JobIDBytes) })), "receipt seq 1 is for lease"},
		{"more GPUs", check(with(r1, func(r *Receipt) { r.Gpus++ })), "3 gpus at 2500000 micros, the lease is 2 at 2500000"},
		{"another price", check(with(r1, func(r *Receipt) { r.PriceMicros-- })), "the lease is 2 at 2500000"},
	})
}

func TestCheckReceiptEnd(t *testing.T) {
	terms, r1, _ := verifyFixture(t)
	check := func(r *Receipt, now time.Time) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkReceiptEnd(terms, r, 1, now, p) }
	}
	late := terms.End.Add(terms.Interval + time.Millisecond)
	runChecks(t, []checkCase{
		{"ended before now", check(r1, r1.End()), ""},
		{"ends within the clock skew", check(r1, r1.End().Add(-MaxClockSkew)), ""},
		{"ends in the future", check(r1, r1.End().Add(-MaxClockSkew-time.Millisecond)), "in the future"},
		{"ends one interval after the lease", check(with(r1, func(r *Receipt) { r.EndMs = late.UnixMilli() - 1 }), late), ""},
		{"ends after the lease", check(with(r1, func(r *Receipt) { r.EndMs = late.UnixMilli() }), late), "after the lease"},
	})
}

func TestCheckReceiptLink(t *testing.T) {
	_, r1, r2 := verifyFixture(t)
	check := func(r, prev *Receipt) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkReceiptLink(r, 2, prev, p) }
	}
	ended := with(r1, func(r *Receipt) { r.Final = true })
	runChecks(t, []checkCase{
		{"chained", check(r2, r1), ""},
		{"another prev_hash", check(with(r2, func(r *Receipt) { r.PrevHash = make([]byte, 32) }), r1), "is not the hash of seq 1"},
		{"attempt goes back", check(r2, with(r1, func(r *Receipt) { r.Attempt = 2 })), "attempt 1 after attempt 2"},
		{"attempt after its final receipt", check(r2, ended), "attempt 1 ended with seq 1"},
		{"next attempt after a final receipt", check(with(r2, func(r *Receipt) { r.Attempt = 2 }), ended), ""},
	})
}

func TestCheckReceiptCumulative(t *testing.T) {
	terms, r1, r2 := verifyFixture(t)
	check := func(r *Receipt, seq uint64, prev *Receipt) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkReceiptCumulative(terms, r, seq, prev, p) }
	}
	runChecks(t, []checkCase{
		{"first", check(r1, 1, nil), ""},
		{"first counts more", check(with(r1, func(r *Receipt) { r.CumGpuMs++ }), 1, nil), "cum_gpu_ms 20001, want 0 + 20000"},
		{"second", check(r2, 2, r1), ""},
		{"second counts less", check(with(r2, func(r *Receipt) { r.CumGpuMs = r.GpuMs }), 2, r1), "cum_gpu_ms 20000, want 20000 + 20000"},
	})
}

func TestCheckReceiptStart(t *testing.T) {
	terms, r1, r2 := verifyFixture(t)
	check := func(r *Receipt, seq uint64, prev *Receipt) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkReceiptStart(terms, r, seq, prev, p) }
	}
	startAt := func(r *Receipt, ms int64) *Receipt { return with(r, func(r *Receipt) { r.StartMs = ms }) }
	runChecks(t, []checkCase{
		{"first at the lease's start", check(r1, 1, nil), ""},
		{"first before the lease's start", check(startAt(r1, r1.StartMs-1), 1, nil), "before the lease's start"},
		{"second where the first ended", check(r2, 2, r1), ""},
		{"second overlapping by MaxOverlap", check(startAt(r2, r1.EndMs-MaxOverlap.Milliseconds()), 2, r1), ""},
		{"second overlapping by more", check(startAt(r2, r1.EndMs-MaxOverlap.Milliseconds()-1), 2, r1), "over 2s before"},
	})
}

func TestCheckVouchers(t *testing.T) {
	terms, r1, r2 := verifyFixture(t)
	other := newNode(t).id
	voucher := func(nonce uint64, r *Receipt) *Voucher {
		return &Voucher{Voucher: &pb.Voucher{Nonce: nonce, CumAmountMicros: r.CumAmountMicros}, Renter: terms.Renter,
			Supplier: terms.Supplier, LeaseID: terms.LeaseID, Acked: r.Hash}
	}
	v1, v2 := voucher(1, r1), voucher(2, r2)
	withV := func(v *Voucher, f func(v *Voucher)) *Voucher {
		c := *v
		c.Voucher = proto.Clone(v.Voucher).(*pb.Voucher)
		f(&c)
		return &c
	}
	of := func(v *Voucher) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkVoucherOf(terms, v, "voucher", p) }
	}
	best := func(v *Voucher, acked *Receipt) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkBestVoucher(v, acked, p) }
	}
	pays := func(v *Voucher, seq uint64, acked *Receipt) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkVoucherPays(v, seq, 2, acked, "voucher", p) }
	}
	after := func(v, prev *Voucher) func(func(string, ...any)) {
		return func(p func(string, ...any)) { checkVoucherAfter(v, prev, "voucher", p) }
	}
	overpaid := withV(v2, func(v *Voucher) { v.CumAmountMicros++ })
	runChecks(t, []checkCase{
		{"of: the renter's", of(v1), ""},
		{"of: another signer", of(withV(v1, func(v *Voucher) { v.Renter = other })), "not the lease's renter"},
		{"of: another supplier", of(withV(v1, func(v *Voucher) { v.Supplier = other })), "is for lease"},
		{"of: another lease", of(withV(v1, func(v *Voucher) { v.LeaseID = market.ID{9} })), "is for lease"},

		{"best: pays its receipt", best(v2, r2), ""},
		{"best: pays less", best(withV(v2, func(v *Voucher) { v.CumAmountMicros-- }), r2), ""},
		{"best: acknowledges no kept receipt", best(v2, nil), "no kept receipt"},
		{"best: pays more", best(overpaid, r2), "above receipt seq 2's"},

		{"pays: its seq in full", pays(v2, 2, r2), ""},
		{"pays: another seq", pays(v1, 2, r1), "not receipt seq 2"},
		{"pays: no kept receipt", pays(v2, 2, nil), "not receipt seq 2"},
		{"pays: seq 0", pays(v1, 0, with(r1, func(r *Receipt) { r.Seq = 0 })), "not receipt seq 0"},
		{"pays: a seq past the kept", pays(v1, 3, with(r1, func(r *Receipt) { r.Seq = 3 })), "not receipt seq 3"},
		{"pays: more than charged", pays(overpaid, 2, r2), "the receipt charges"},
		{"pays: less than charged", pays(withV(v2, func(v *Voucher) { v.CumAmountMicros-- }), 2, r2), "the receipt charges"},

		{"after: first", after(v1, nil), ""},
		{"after: nonce and amount up", after(v2, v1), ""},
		{"after: nonce repeated", after(withV(v2, func(v *Voucher) { v.Nonce = 1 }), v1), "nonce 1 pays"},
		{"after: amount down", after(withV(v1, func(v *Voucher) { v.Nonce = 3 }), v2), "nonce 3 pays"},
	})
}

func TestCheckStatementTerms(t *testing.T) {
	terms, _, _ := verifyFixture(t)
	other := newNode(t).id
	stmt := func(f func(s *Statement)) *Statement {
		s := &Statement{Statement: &pb.Statement{JobId: terms.JobID, FinalSeq: 2}, Renter: terms.Renter, Supplier: terms.Supplier, LeaseID: terms.LeaseID}
		f(s)
		return s
	}
	var passed []bool
	check := func(s *Statement) func(func(string, ...any)) {
		return func(p func(string, ...any)) { passed = append(passed, checkStatementTerms(terms, s, 2, p)) }
	}
	runChecks(t, []checkCase{
		{"sound", check(stmt(func(*Statement) {})), ""},
		{"another signer", check(stmt(func(s *Statement) { s.Renter = other })), "not the lease's renter"},
		{"another supplier", check(stmt(func(s *Statement) { s.Supplier = other })), "statement is for lease"},
		{"another lease", check(stmt(func(s *Statement) { s.LeaseID = market.ID{9} })), "statement is for lease"},
		{"another job", check(stmt(func(s *Statement) { s.JobId = make([]byte, JobIDBytes) })), "statement is for lease"},
		{"more receipts than kept", check(stmt(func(s *Statement) { s.FinalSeq = 3 })), "final_seq 3, only 2 receipts kept"},
	})
	for i, ok := range passed {
		if ok != (i == 0) {
			t.Errorf("case %d: checkStatementTerms passed %v", i, ok)
		}
	}
}
