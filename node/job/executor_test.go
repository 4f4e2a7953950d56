package job

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// The supplier side on its own: a renter that speaks the session
// protocol by hand (Handshake, then frames) to a real Executor over the
// mocknet.

// rawSession opens a session stream from h to the supplier and sends
// hello (with spec as a start's body); it returns the stream and the
// supplier's Welcome.
func (m *mesh) rawSession(h host.Host, s *testSupplier, hello *pb.Hello, spec []byte) (network.Stream, *pb.Welcome) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := h.NewStream(ctx, s.host.ID(), SessionProtocol)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { st.Reset() })
	w, err := Handshake(st, hello, spec, nil)
	if err != nil {
		m.t.Fatalf("handshake: %v", err)
	}
	return st, w
}

// frames reads st's ServerFrames into a channel, closed when st ends. A
// session nobody reads would block the supplier's writes (the mocknet
// has neither buffers nor write deadlines), so the channel holds plenty.
func frames(st network.Stream) <-chan *pb.ServerFrame {
	ch := make(chan *pb.ServerFrame, 4096)
	go func() {
		defer close(ch)
		for {
			f := &pb.ServerFrame{}
			if err := p2p.ReadMsg(st, MaxFrameSize, f); err != nil {
				return
			}
			ch <- f
		}
	}()
	return ch
}

// next is the next frame, or nil when the stream ended or a minute passed.
func next(t *testing.T, ch <-chan *pb.ServerFrame) *pb.ServerFrame {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(time.Minute):
		t.Fatal("no frame for a minute")
		return nil
	}
}

// sleeper is a job spec that runs until stopped, and a lease of s bound to it.
func (m *mesh) sleeper(s *testSupplier, nonce uint64) (*Spec, *market.Lease) {
	m.t.Helper()
	spec, err := EncodeSpec(&pb.JobSpec{JobId: NewJobID(), Argv: []string{"sh", "-c", "echo up; exec sleep 600"}, Gpus: 1})
	if err != nil {
		m.t.Fatal(err)
	}
	l, err := m.lease(s, nonce, market.Terms{JobSpecHash: spec.Hash[:], ReceiptInterval: 500 * time.Millisecond})
	if err != nil {
		m.t.Fatal(err)
	}
	return spec, l
}

// receiptIn is the receipt f carries, nil for another frame.
func receiptIn(t *testing.T, f *pb.ServerFrame) *settle.Receipt {
	t.Helper()
	raw := f.GetReceipt()
	if raw == nil {
		return nil
	}
	r, err := settle.OpenReceipt(raw)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func startHello(l *market.Lease, spec *Spec, attempt uint32) *pb.Hello {
	return &pb.Hello{Lease: l.Raw, Attempt: attempt, SpecSize: uint32(len(spec.Raw))}
}

// TestExecutorFencesAttempts: a supplier runs one attempt per lease. A
// start of an older attempt is refused as stale, a start of a newer one
// needs a lease of its own, a repeated start attaches, an attach must
// name the attempt that runs and come from the lease's renter, and a
// fence stops the attempt, which ends with a final receipt in state
// fenced.
func TestExecutorFencesAttempts(t *testing.T) {
	m := newMesh(t, 1, nil)
	s := m.sups[0]
	spec, l := m.sleeper(s, 1)
	first, w := m.rawSession(m.renter, s, startHello(l, spec, 2), spec.Raw)
	if w.Refused != "" || w.Attempt != 2 || State(w.State) != StateRunning {
		t.Fatalf("start of attempt 2: %+v", w)
	}
	frames(first)
	for _, tc := range []struct {
		name  string
		hello *pb.Hello
		body  []byte
		want  string // in the refusal; "" for a Welcome to attempt 2
	}{
		{"older attempt", startHello(l, spec, 1), spec.Raw, "attempt 1 is stale"},
		{"newer attempt", startHello(l, spec, 3), spec.Raw, "every attempt needs a lease of its own"},
		{"repeated start", startHello(l, spec, 2), spec.Raw, ""},
		{"attach to another attempt", &pb.Hello{LeaseId: l.ID[:], Attempt: 1}, nil, "attempt 2 runs on this lease, not 1"},
		{"attach to the attempt", &pb.Hello{LeaseId: l.ID[:], Attempt: 2}, nil, ""},
	} {
		st, w := m.rawSession(m.renter, s, tc.hello, tc.body)
		st.Reset() // a welcomed session is the attempt's until the next one
		switch {
		case tc.want == "" && (w.Refused != "" || w.Attempt != 2):
			t.Errorf("%s: %+v, want a Welcome to attempt 2", tc.name, w)
		case tc.want != "" && !strings.Contains(w.Refused, tc.want):
			t.Errorf("%s: refused %q, want %q", tc.name, w.Refused, tc.want)
		}
	}
	other, _ := m.addPeer(9)
	if _, err := m.mn.LinkPeers(other.ID(), s.host.ID()); err != nil {
		t.Fatal(err)
	}
	if _, w := m.rawSession(other, s, &pb.Hello{LeaseId: l.ID[:], Attempt: 2}, nil); !strings.Contains(w.Refused, "another renter") {
		t.Errorf("attach by another peer: %+v, want it refused", w)
	}
	if r := s.runOf(l.ID.String()); r == nil || r.State != StateRunning || r.Attempt != 2 {
		t.Fatalf("after the refusals: %+v, want attempt 2 running", r)
	}
	st, w := m.rawSession(m.renter, s, &pb.Hello{LeaseId: l.ID[:], Attempt: 2, Fence: "the job moved on"}, nil)
	if w.Refused != "" {
		t.Fatalf("fence refused: %s", w.Refused)
	}
	ch := frames(st)
	for {
		f := next(t, ch)
		if f == nil {
			t.Fatal("the session ended before the final receipt")
		}
		r := receiptIn(t, f)
		if r == nil {
			continue
		}
		if r.Attempt != 2 {
			t.Fatalf("receipt of attempt %d", r.Attempt)
		}
		if r.Final {
			if State(r.State) != StateFenced {
				t.Fatalf("final receipt in state %s, want %s", r.State, StateFenced)
			}
			break
		}
	}
	// The final receipt goes out just before the run is marked ended.
	eventually(t, time.Minute, "the run fenced", func() bool { r := s.runOf(l.ID.String()); return r != nil && r.State == StateFenced })
}

// TestExecutorHaltsUnpaidJob: a renter that never pays gets receipts
// until it owes more than the credit limit; then the job is paused (a
// halted status), nothing more is billed while it stays paused, and after
// the halt grace it is stopped with a final receipt. (The mesh's
// suppliers have a stop grace of 1 s.)
func TestExecutorHaltsUnpaidJob(t *testing.T) {
	m := newMeshWith(t, 1, nil, func(c *ExecutorConfig) { c.HaltGrace = time.Second })
	s := m.sups[0]
	spec, l := m.sleeper(s, 1)
	st, w := m.rawSession(m.renter, s, startHello(l, spec, 1), spec.Raw)
	if w.Refused != "" {
		t.Fatalf("start refused: %s", w.Refused)
	}
	credit := int64(l.Terms().CreditLimit)
	ch := frames(st)
	var last *settle.Receipt
	halted := false
	for {
		f := next(t, ch)
		if f == nil {
			t.Fatal("the session ended before the final receipt")
		}
		if status := f.GetStatus(); status != nil && State(status.State) == StateHalted {
			if last == nil || last.CumAmountMicros <= credit {
				t.Fatalf("halted while owing %v, within the credit limit %d", last, credit)
			}
			halted = true
			continue
		}
		r := receiptIn(t, f)
		if r == nil {
			continue
		}
		switch {
		case last != nil && r.Seq <= last.Seq:
			continue // sent again on attach: not yet paid
		case last != nil && r.Seq != last.Seq+1:
			t.Fatalf("receipt seq %d after %d", r.Seq, last.Seq)
		}
		// Paused time is not billed. The final receipt bills the stop
		// itself (finish ends the pause): at most the stop grace.
		if billed := r.CumAmountMicros - prevAmount(last); halted && (!r.Final && billed != 0 || billed > market.AmountMicros(testPrice, time.Second.Milliseconds())) {
			t.Fatalf("billed %d micros while paused (seq %d, final %v)", billed, r.Seq, r.Final)
		}
		last = r
		if r.Final {
			break
		}
	}
	if !halted || State(last.State) != StateStopped {
		t.Fatalf("halted %v, final receipt in state %s; want halted, then stopped", halted, last.State)
	}
	// The final receipt goes out just before the run is marked ended.
	var r *RunView
	eventually(t, time.Minute, "the run stopped", func() bool { r = s.runOf(l.ID.String()); return r != nil && r.State == StateStopped })
	if r.OwedMicros != money.Micros(last.CumAmountMicros) {
		t.Fatalf("the supplier's run: %+v; want owed the final receipt's %d micros", r, last.CumAmountMicros)
	}
}

func prevAmount(r *settle.Receipt) int64 {
	if r == nil {
		return 0
	}
	return r.CumAmountMicros
}

// usageReader is a GPU usage reader for the executor's tests: NVML's
// readings are tested in verify/inventory; here, what a receipt makes of
// them.
type usageReader struct {
	readings []inventory.Reading
	err      error
	asked    chan []string
}

func (u *usageReader) Usage(_ context.Context, uuids []string) ([]inventory.Reading, error) {
	select {
	case u.asked <- uuids:
	default:
	}
	if u.err != nil {
		return nil, u.err
	}
	return u.readings[:len(uuids)], nil
}

// TestReceiptsCarryGPUUsage: the receipts of a job on measured GPUs carry
// their utilisation and memory in use, averaged; on GPUs nothing measures
// (simulated ones) they say "not measured".
func TestReceiptsCarryGPUUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reader *usageReader
		want   settle.Usage
	}{
		{"measured", &usageReader{readings: []inventory.Reading{{UtilPct: 37, MemUsedBytes: 3 << 30}}}, settle.Usage{Measured: true, UtilPermille: 370, MemUsedBytes: 3 << 30}},
		{"simulated", &usageReader{err: inventory.ErrNotMeasured}, settle.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.reader.asked = make(chan []string, 1)
			m := newMeshWith(t, 1, nil, func(c *ExecutorConfig) { c.Usage, c.UsageEvery = tc.reader, 100*time.Millisecond })
			s := m.sups[0]
			spec, l := m.sleeper(s, 1)
			st, w := m.rawSession(m.renter, s, startHello(l, spec, 1), spec.Raw)
			if w.Refused != "" {
				t.Fatalf("start refused: %s", w.Refused)
			}
			ch := frames(st)
			for seen := 0; seen < 2; {
				r := receiptIn(t, next(t, ch))
				if r == nil {
					continue
				}
				seen++
				got := settle.Usage{Measured: r.UsageMeasured, UtilPermille: r.UtilPermille, MemUsedBytes: r.MemUsedBytes}
				if got != tc.want {
					t.Fatalf("receipt seq %d: usage %+v, want %+v", r.Seq, got, tc.want)
				}
			}
			if uuids := <-tc.reader.asked; len(uuids) != 1 || uuids[0] != l.GpuUuids[0] {
				t.Errorf("sampled %v, want the lease's GPUs %v", uuids, l.GpuUuids)
			}
		})
	}
}
