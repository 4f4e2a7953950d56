package settle

import (
	"bytes"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/settle/pb"
)

// fuzzRecords are valid records of one lease, for seed corpora: two
// receipts, their vouchers, a statement, its settlement and evidence of
// each kind.
type fuzzRecords struct {
	sup, ren   node
	receipts   [][]byte
	vouchers   [][]byte
	statement  []byte
	settlement []byte
	evidence   [][]byte
}

func newFuzzRecords(f *testing.F) *fuzzRecords {
	f.Helper()
	x := newPair(f)
	r1, v1 := x.step(f)
	r2, v2 := x.step(f)
	stmt, err := x.p.Statement(OutcomeSucceeded, x.now)
	if err != nil {
		f.Fatal(err)
	}
	stl, err := x.m.Countersign(stmt, x.now)
	if err != nil {
		f.Fatal(err)
	}
	fr := &fuzzRecords{sup: x.sup, ren: x.ren, receipts: [][]byte{r1.Raw, r2.Raw}, vouchers: [][]byte{v1, v2}, statement: stmt, settlement: stl}
	twin := sealReceipt(f, receiptMsg(r1, func(m *pb.Receipt) { m.UtilPermille++ }), x.sup)
	fork := sealReceipt(f, receiptMsg(r2, func(m *pb.Receipt) { m.PrevHash = make([]byte, 32) }), x.sup)
	fat := sealReceipt(f, receiptMsg(r1, func(m *pb.Receipt) { m.GpuMs, m.CumGpuMs = m.GpuMs+1, m.CumGpuMs+1 }), x.sup)
	dear := sealReceipt(f, receiptMsg(r1, func(m *pb.Receipt) { m.CumAmountMicros++ }), x.sup)
	reuse := sealVoucher(f, voucherMsg(f, v2, func(m *pb.Voucher) { m.CumAmountMicros-- }), x.ren)
	less := sealVoucher(f, voucherMsg(f, v2, func(m *pb.Voucher) { m.Nonce++; m.CumAmountMicros-- }), x.ren)
	for _, e := range []*pb.Evidence{
		{Kind: KindReceiptEquivocation, A: r1.Raw, B: twin},
		{Kind: KindChainFork, A: r1.Raw, B: fork},
		{Kind: KindInflatedUsage, A: fat},
		{Kind: KindAmountMismatch, A: dear},
		{Kind: KindVoucherNonceReuse, A: v2, B: reuse},
		{Kind: KindVoucherDecrease, A: v2, B: less},
	} {
		e.CreatedMs = x.now.UnixMilli()
		raw, err := SealEvidence(e, x.ren.key)
		if err != nil {
			f.Fatal(err)
		}
		if _, err := OpenEvidence(raw); err != nil {
			f.Fatalf("seed evidence %s: %v", e.Kind, err)
		}
		fr.evidence = append(fr.evidence, raw)
	}
	return fr
}

// fuzzOpen is the body of every fuzz target. It takes (data, resign).
// With resign false, data is an envelope, opened as it is, which explores
// the envelope and signature checks. With resign true, data is a payload:
// it is decoded into a new M, sealed with key (the Seal function fills in
// version and signer) and opened, so the fuzzer reaches every field
// check. Seeds are valid records in both forms.
//
// Invariants: never panic; a refusal returns nothing and wraps exactly
// one named error; an accepted record is within its size limit, its Raw
// is the envelope, and it opens again to the same message.
func fuzzOpen[M proto.Message, R any](f *testing.F, seeds [][]byte, key crypto.PrivKey, maxSize int,
	newMsg func() M, seal func(M, crypto.PrivKey) ([]byte, error), open func([]byte) (R, error), parts func(R) (M, []byte)) {
	for _, raw := range seeds {
		rec, err := open(raw)
		if err != nil {
			f.Fatal(err)
		}
		m, _ := parts(rec)
		payload, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, false)
		f.Add(payload, true)
	}
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		if resign {
			m := newMsg()
			if proto.Unmarshal(data, m) != nil {
				return
			}
			var err error
			if data, err = seal(m, key); err != nil {
				return
			}
		}
		rec, err := open(data)
		if err != nil {
			if !wrapsOneNamed(err) {
				t.Fatalf("error %q does not wrap exactly one named error", err)
			}
			return
		}
		m, raw := parts(rec)
		switch {
		case len(data) > maxSize:
			t.Fatalf("accepted %d bytes", len(data))
		case !bytes.Equal(raw, data):
			t.Fatalf("Raw is not the envelope")
		}
		again, err := open(raw)
		if err != nil {
			t.Fatalf("re-open: %v", err)
		}
		if m2, _ := parts(again); !proto.Equal(m, m2) {
			t.Fatalf("re-open decoded another message")
		}
	})
}

// FuzzOpenReceipt fuzzes OpenReceipt (and CheckUsage on what opens) from
// valid receipts:
//
//	go test ./settle -run '^$' -fuzz '^FuzzOpenReceipt$' -fuzztime 10s
func FuzzOpenReceipt(f *testing.F) {
	fr := newFuzzRecords(f)
	fuzzOpen(f, fr.receipts, fr.sup.key, MaxReceiptSize, func() *pb.Receipt { return &pb.Receipt{} }, SealReceipt,
		func(b []byte) (*Receipt, error) {
			r, err := OpenReceipt(b)
			if err == nil {
				_ = CheckUsage(r) // must not panic on anything that opens
			}
			return r, err
		},
		func(r *Receipt) (*pb.Receipt, []byte) { return r.Receipt, r.Raw })
}

// FuzzOpenVoucher fuzzes OpenVoucher from valid vouchers:
//
//	go test ./settle -run '^$' -fuzz '^FuzzOpenVoucher$' -fuzztime 10s
func FuzzOpenVoucher(f *testing.F) {
	fr := newFuzzRecords(f)
	fuzzOpen(f, fr.vouchers, fr.ren.key, MaxVoucherSize, func() *pb.Voucher { return &pb.Voucher{} }, SealVoucher, OpenVoucher,
		func(v *Voucher) (*pb.Voucher, []byte) { return v.Voucher, v.Raw })
}

// FuzzOpenStatement fuzzes OpenStatement from a valid statement:
//
//	go test ./settle -run '^$' -fuzz '^FuzzOpenStatement$' -fuzztime 10s
func FuzzOpenStatement(f *testing.F) {
	fr := newFuzzRecords(f)
	fuzzOpen(f, [][]byte{fr.statement}, fr.ren.key, MaxStatementSize, func() *pb.Statement { return &pb.Statement{} }, SealStatement, OpenStatement,
		func(s *Statement) (*pb.Statement, []byte) { return s.Statement, s.Raw })
}

// FuzzOpenSettlement fuzzes OpenSettlement from a valid settlement:
//
//	go test ./settle -run '^$' -fuzz '^FuzzOpenSettlement$' -fuzztime 10s
func FuzzOpenSettlement(f *testing.F) {
	fr := newFuzzRecords(f)
	fuzzOpen(f, [][]byte{fr.settlement}, fr.sup.key, MaxSettlementSize, func() *pb.Settlement { return &pb.Settlement{} }, SealSettlement, OpenSettlement,
		func(s *Settlement) (*pb.Settlement, []byte) { return s.Settlement, s.Raw })
}

// FuzzOpenEvidence fuzzes OpenEvidence from valid evidence of every kind:
//
//	go test ./settle -run '^$' -fuzz '^FuzzOpenEvidence$' -fuzztime 10s
func FuzzOpenEvidence(f *testing.F) {
	fr := newFuzzRecords(f)
	fuzzOpen(f, fr.evidence, fr.ren.key, MaxEvidenceSize, func() *pb.Evidence { return &pb.Evidence{} }, SealEvidence, OpenEvidence,
		func(e *Evidence) (*pb.Evidence, []byte) { return e.Evidence, e.Raw })
}
