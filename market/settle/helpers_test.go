package settle

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// testStart is when test leases start: a fixed clock, so records sealed
// by tests and fuzz seeds are the same whenever they run.
var testStart = time.UnixMilli(1_800_000_000_000)

// testInterval is the receipt interval of test leases.
const testInterval = 10 * time.Second

// node is a test identity.
type node struct {
	key crypto.PrivKey
	id  peer.ID
}

func newNode(t testing.TB) node { return nodeFrom(t, rand.Reader) }

// nodeFrom makes a node from the randomness of r (deterministic for a
// seeded r).
func nodeFrom(t testing.TB, r io.Reader) node {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(r)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return node{k, id}
}

// testTerms are the terms of a day-long lease of 2 GPUs at 2.5 units per
// GPU-hour from supplier to renter, with a random lease and job ID, and a
// credit limit of three intervals of full use.
func testTerms(supplier, renter node) Terms {
	t := Terms{
		Renter:      renter.id,
		Supplier:    supplier.id,
		GPUs:        2,
		PriceMicros: 2_500_000,
		Start:       testStart,
		End:         testStart.Add(24 * time.Hour),
		Interval:    testInterval,
		JobID:       make([]byte, JobIDBytes),
	}
	t.CreditLimit = market.AmountMicros(t.PriceMicros, 3*testInterval.Milliseconds()*int64(t.GPUs))
	_, _ = rand.Read(t.LeaseID[:])
	_, _ = rand.Read(t.JobID)
	return t
}

// quietLog logs Badger's warnings and errors to the test output.
func quietLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openBadger opens a Badger store in dir; the test closes it at its end
// (closing twice is fine).
func openBadger(t testing.TB, dir string) *store.Badger {
	t.Helper()
	s, err := store.OpenBadger(dir, store.WithLogger(quietLog(t)))
	if err != nil {
		t.Fatalf("OpenBadger(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openLedger(t testing.TB, s store.Store) *Ledger {
	t.Helper()
	l, err := OpenLedger(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// pair is a supplier's Meter and a renter's Payer of one lease, each on a
// Badger store of its own, and a clock at the end of the last interval.
type pair struct {
	terms      Terms
	sup, ren   node
	dir        string
	ss, rs     *store.Badger
	sled, rled *Ledger
	m          *Meter
	p          *Payer
	attempt    uint32
	now        time.Time

	mu       sync.Mutex
	evidence [][]byte // what the renter's OnEvidence saw
	supEv    [][]byte // what the supplier's OnEvidence saw
}

func newPair(t testing.TB) *pair {
	t.Helper()
	sup, ren := newNode(t), newNode(t)
	x := &pair{terms: testTerms(sup, ren), sup: sup, ren: ren, dir: t.TempDir(), attempt: 1, now: testStart}
	x.open(t)
	return x
}

// open opens (or reopens) both stores, ledgers and machines.
func (x *pair) open(t testing.TB) {
	t.Helper()
	x.ss, x.rs = openBadger(t, filepath.Join(x.dir, "supplier")), openBadger(t, filepath.Join(x.dir, "renter"))
	x.sled, x.rled = openLedger(t, x.ss), openLedger(t, x.rs)
	x.rled.OnEvidence(func(raw []byte) {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.evidence = append(x.evidence, raw)
	})
	x.sled.OnEvidence(func(raw []byte) {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.supEv = append(x.supEv, raw)
	})
	var err error
	if x.m, err = NewMeter(x.sled, x.sup.key, x.terms); err != nil {
		t.Fatal(err)
	}
	if x.p, err = NewPayer(x.rled, x.ren.key, x.terms); err != nil {
		t.Fatal(err)
	}
}

// reopen closes both stores and opens them again, as after a restart.
func (x *pair) reopen(t testing.TB) {
	t.Helper()
	if err := x.ss.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.rs.Close(); err != nil {
		t.Fatal(err)
	}
	x.open(t)
}

// issue meters the next interval at full use of every GPU.
func (x *pair) issue(t testing.TB) *Receipt {
	t.Helper()
	start := x.now
	x.now = x.now.Add(testInterval)
	r, err := x.m.Issue(x.attempt, start, x.now, testInterval.Milliseconds()*int64(x.terms.GPUs), Usage{Measured: true, UtilPermille: 900}, nil, false, StateRunning)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return r
}

// pay hands r to the payer and its voucher to the meter.
func (x *pair) pay(t testing.TB, r *Receipt) []byte {
	t.Helper()
	v, err := x.p.Accept(r.Raw, x.attempt, x.now)
	if err != nil {
		t.Fatalf("Payer.Accept(seq %d): %v", r.Seq, err)
	}
	if _, err := x.m.Accept(v, x.now); err != nil {
		t.Fatalf("Meter.Accept(voucher of seq %d): %v", r.Seq, err)
	}
	return v
}

// step issues and pays the next interval.
func (x *pair) step(t testing.TB) (*Receipt, []byte) {
	t.Helper()
	r := x.issue(t)
	return r, x.pay(t, r)
}

// receiptMsg is a copy of r's message with fn applied, for forging
// variants of it.
func receiptMsg(r *Receipt, fn func(m *pb.Receipt)) *pb.Receipt {
	m := proto.Clone(r.Receipt).(*pb.Receipt)
	fn(m)
	return m
}

// sealReceipt signs m with by's key.
func sealReceipt(t testing.TB, m *pb.Receipt, by node) []byte {
	t.Helper()
	raw, err := SealReceipt(m, by.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func sealVoucher(t testing.TB, m *pb.Voucher, by node) []byte {
	t.Helper()
	raw, err := SealVoucher(m, by.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// voucherMsg is the message of the voucher envelope raw, with fn applied.
func voucherMsg(t testing.TB, raw []byte, fn func(m *pb.Voucher)) *pb.Voucher {
	t.Helper()
	v, err := OpenVoucher(raw)
	if err != nil {
		t.Fatal(err)
	}
	m := proto.Clone(v.Voucher).(*pb.Voucher)
	fn(m)
	return m
}

// wantErr fails unless err wraps want.
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// namedErrors are the errors every refusal wraps exactly one of.
var namedErrors = []error{
	p2p.ErrTooLarge, p2p.ErrBadEnvelope, p2p.ErrMalformed, p2p.ErrUnsupported,
	p2p.ErrSignerMismatch, p2p.ErrExpired, p2p.ErrFutureDated, p2p.ErrStale,
	market.ErrMismatch, ErrEvidence, ErrStaleAttempt, ErrOutOfOrder, ErrOverCredit,
	ErrSettled, ErrInflatedUsage, ErrAmountMismatch, ErrBadEvidence,
}

func wrapsOneNamed(err error) bool {
	n := 0
	for _, e := range namedErrors {
		if errors.Is(err, e) {
			n++
		}
	}
	return n == 1
}

// bottomUpRoot is RFC 6962's root computed another way than
// ReceiptsRoot: level by level, an odd last node promoted unchanged.
func bottomUpRoot(hashes [][32]byte) [32]byte {
	if len(hashes) == 0 {
		return sha256.Sum256(nil)
	}
	level := make([][32]byte, len(hashes))
	for i, h := range hashes {
		level[i] = sha256.Sum256(append([]byte{0}, h[:]...))
	}
	for len(level) > 1 {
		var next [][32]byte
		for i := 0; i+1 < len(level); i += 2 {
			next = append(next, sha256.Sum256(append(append([]byte{1}, level[i][:]...), level[i+1][:]...)))
		}
		if len(level)%2 == 1 {
			next = append(next, level[len(level)-1])
		}
		level = next
	}
	return level[0]
}

// seededReader is deterministic randomness for keys a child process must
// derive again.
func seededReader(seed uint64) io.Reader {
	var s [32]byte
	s[0] = byte(seed)
	return mrand.NewChaCha8(s)
}
