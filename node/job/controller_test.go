package job

// The job state machine on its own: a renter's Controller and suppliers'
// Executors, each with its store, settlement ledger and (for suppliers)
// the process runtime, talking over libp2p's in-memory mocknet instead of
// real nodes. The market is a function that signs leases between the
// renter and the supplier it picks, as a supplier that confirmed them
// would; everything else is the real thing. A supplier "vanishes" when its
// links and connections to the renter are cut, and comes back when they
// are restored.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market"
	mpb "github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// testPrice is 10 micros per GPU-millisecond, so that every receipt of a
// running job is worth something.
const testPrice = 36_000_000

// mesh is one renter and its suppliers on a mocknet.
type mesh struct {
	t      *testing.T
	mn     mocknet.Mocknet
	quiet  *slog.Logger
	renter host.Host
	key    crypto.PrivKey
	ctrl   *Controller
	online atomic.Bool  // what the renter's Online check says
	asked  atomic.Int32 // how often it was asked
	sups   []*testSupplier

	mu    sync.Mutex
	rents []market.RentRequest // every lease the controller asked for
	nonce uint64
	// gone are the suppliers vanished from the renter, and opened the
	// streams the renter opened to each (reset when it vanishes).
	gone   map[peer.ID]bool
	opened map[peer.ID][]network.Stream
}

// testSupplier is a supplier node's job side: its host and Executor, and
// the leases it confirmed.
type testSupplier struct {
	host   host.Host
	key    crypto.PrivKey
	exec   *Executor
	refuse atomic.Bool // its lease lookup fails: every start is refused

	mu     sync.Mutex
	leases map[market.ID]*market.Lease
}

// Lease is the executor's lookup: a lease this supplier confirmed, unless
// it refuses them all.
func (s *testSupplier) Lease(id market.ID) (*market.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[id]
	switch {
	case s.refuse.Load():
		return nil, fmt.Errorf("lease %s: this supplier has withdrawn it", id.Short())
	case l == nil:
		return nil, fmt.Errorf("lease %s: not confirmed here", id.Short())
	}
	return l, nil
}

// Claim always lets a job start (package market tests real claims).
func (s *testSupplier) Claim(market.ID) (func(), error) { return func() {}, nil }

// Release has no GPUs to free.
func (s *testSupplier) Release(market.ID) error { return nil }

// newMesh starts a renter and n suppliers, all linked and connected; tune
// adjusts the controller's config before it starts.
func newMesh(t *testing.T, n int, tune func(*ControllerConfig)) *mesh {
	t.Helper()
	return newMeshWith(t, n, tune, nil)
}

// newMeshWith is newMesh with the suppliers' configs adjusted by supTune.
func newMeshWith(t *testing.T, n int, tune func(*ControllerConfig), supTune func(*ExecutorConfig)) *mesh {
	t.Helper()
	m := &mesh{t: t, mn: mocknet.New(), quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if os.Getenv("GPUMESH_TEST_LOG") != "" {
		m.quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	t.Cleanup(func() { m.mn.Close() })
	m.online.Store(true)
	m.renter, m.key = m.addPeer(0)
	for i := range n {
		m.sups = append(m.sups, m.startSupplier(i+1, supTune))
	}
	if err := m.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := m.mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	st := store.NewMemory()
	led, err := settle.OpenLedger(st)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ControllerConfig{
		Net: mockDialer{h: m.renter, m: m}, Key: m.key, Store: st, Ledger: led, DataDir: t.TempDir(),
		Rent: m.rent, LostAfter: time.Second, Log: m.quiet,
	}
	if tune != nil {
		tune(&cfg)
	}
	if m.ctrl, err = NewController(cfg); err != nil {
		t.Fatal(err)
	}
	m.ctrl.Start()
	t.Cleanup(func() { m.ctrl.Close() })
	return m
}

// addPeer adds a host with an Ed25519 key (the key gpumesh signs with).
func (m *mesh) addPeer(i int) (host.Host, crypto.PrivKey) {
	m.t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		m.t.Fatal(err)
	}
	h, err := m.mn.AddPeer(key, ma.StringCast(fmt.Sprintf("/ip4/10.0.0.%d/tcp/4001", i+1)))
	if err != nil {
		m.t.Fatal(err)
	}
	return h, key
}

func (m *mesh) startSupplier(i int, tune func(*ExecutorConfig)) *testSupplier {
	m.t.Helper()
	s := &testSupplier{leases: map[market.ID]*market.Lease{}}
	s.host, s.key = m.addPeer(i)
	rt, err := runtime.New("process", runtime.Options{Log: m.quiet, AllowUnsandboxed: true})
	if err != nil {
		m.t.Fatal(err)
	}
	st := store.NewMemory()
	led, err := settle.OpenLedger(st)
	if err != nil {
		m.t.Fatal(err)
	}
	cfg := ExecutorConfig{
		Host: s.host, Key: s.key, Store: st, Ledger: led, Runtimes: map[string]runtime.Runtime{"process": rt},
		DataDir: m.t.TempDir(), StopGrace: time.Second, Log: m.quiet,
		Leases: s,
	}
	if tune != nil {
		tune(&cfg)
	}
	if s.exec, err = NewExecutor(cfg); err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { s.exec.Close() })
	return s
}

// mockDialer is the renter's network over the mocknet, as the node's
// jobDialer is over its libp2p host.
type mockDialer struct {
	h host.Host
	m *mesh
}

func (d mockDialer) Connect(ctx context.Context, p peer.ID) error {
	if d.m.isGone(p) {
		return fmt.Errorf("%s is gone", p)
	}
	return d.h.Connect(ctx, peer.AddrInfo{ID: p})
}

func (d mockDialer) NewStream(ctx context.Context, p peer.ID, proto protocol.ID) (network.Stream, error) {
	if d.m.isGone(p) {
		return nil, fmt.Errorf("%s is gone", p)
	}
	st, err := d.h.NewStream(ctx, p, proto)
	if err != nil {
		return nil, err
	}
	ws := newWindowedStream(st)
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if d.m.gone[p] {
		ws.Reset()
		return nil, fmt.Errorf("%s is gone", p)
	}
	if d.m.opened == nil {
		d.m.opened = map[peer.ID][]network.Stream{}
	}
	d.m.opened[p] = append(d.m.opened[p], ws)
	return ws, nil
}

func (m *mesh) isGone(p peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gone[p]
}

// windowedStream gives the renter's end of a mocknet stream a send
// buffer, as a real stream's flow-control window does: a write returns
// once queued. A mocknet write waits for the reader instead, so both ends
// writing at once (a supplier resending unpaid receipts as a session
// attaches while the renter pays the first of them) would deadlock on the
// mocknet but not on a real network.
type windowedStream struct {
	network.Stream
	q    chan []byte // an empty write: close after the writes before it
	done chan struct{}
	once sync.Once
}

func newWindowedStream(st network.Stream) *windowedStream {
	s := &windowedStream{Stream: st, q: make(chan []byte, 1024), done: make(chan struct{})}
	go s.pump()
	return s
}

func (s *windowedStream) pump() {
	for {
		select {
		case b := <-s.q:
			if len(b) == 0 {
				s.Stream.Close()
				return
			}
			if _, err := s.Stream.Write(b); err != nil {
				s.Reset()
				return
			}
		case <-s.done:
			return
		}
	}
}

func (s *windowedStream) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	select {
	case s.q <- bytes.Clone(p):
		return len(p), nil
	case <-s.done:
		return 0, network.ErrReset
	}
}

func (s *windowedStream) Close() error {
	select {
	case s.q <- nil:
	case <-s.done:
	}
	return nil
}

func (s *windowedStream) Reset() error {
	s.once.Do(func() { close(s.done) })
	return s.Stream.Reset()
}

func (d mockDialer) Online(context.Context, peer.ID) bool {
	d.m.asked.Add(1)
	return d.m.online.Load()
}

// rent is the market: it leases one GPU of the first supplier that req
// does not exclude, for an hour, on req's terms.
func (m *mesh) rent(_ context.Context, req market.RentRequest) (*market.Lease, error) {
	m.mu.Lock()
	m.rents = append(m.rents, req)
	m.nonce++
	nonce := m.nonce
	sups := slices.Clone(m.sups)
	m.mu.Unlock()
	for _, s := range sups {
		if !slices.Contains(req.Exclude, s.host.ID()) {
			return m.lease(s, nonce, req.Terms)
		}
	}
	return nil, fmt.Errorf("no supplier left: %d excluded", len(req.Exclude))
}

// lease signs a lease of one GPU between the renter and s, as s confirms
// it.
func (m *mesh) lease(s *testSupplier, nonce uint64, terms market.Terms) (*market.Lease, error) {
	now := time.Now()
	ask, err := market.SealAsk(&mpb.Ask{Nonce: nonce, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(time.Minute).UnixMilli(),
		Model: "h100-sxm", Count: 8, PriceMicros: testPrice, MinDurationS: 60, MaxDurationS: 3600, Pricing: "fixed"}, s.key)
	if err != nil {
		return nil, err
	}
	prop, err := market.SealProposal(&mpb.LeaseProposal{Supplier: []byte(s.host.ID()), Nonce: nonce, CreatedMs: now.UnixMilli(),
		ExpiresMs: now.Add(30 * time.Second).UnixMilli(), Ask: ask, Model: "h100-sxm", Count: 1, PriceMicros: testPrice, DurationS: 3600,
		JobSpecHash: terms.JobSpecHash, ReceiptIntervalMs: uint32(terms.ReceiptInterval / time.Millisecond), CreditLimitMicros: int64(terms.CreditLimit)}, m.key)
	if err != nil {
		return nil, err
	}
	id := market.IDOf(prop)
	raw, err := market.SealLease(&mpb.Lease{Proposal: prop, Renter: []byte(m.renter.ID()), LeaseId: id[:], StartMs: now.UnixMilli(),
		EndMs: now.Add(time.Hour).UnixMilli(), Model: "h100-sxm", Count: 1, PriceMicros: testPrice,
		GpuUuids: []string{fmt.Sprintf("GPU-test-%d", nonce)}, ConfirmByMs: now.Add(30 * time.Second).UnixMilli()}, s.key)
	if err != nil {
		return nil, err
	}
	l, err := market.OpenLease(raw, now)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.leases[l.ID] = l
	s.mu.Unlock()
	return l, nil
}

// rentCalls is a copy of the leases asked for so far.
func (m *mesh) rentCalls() []market.RentRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.rents)
}

// vanish cuts s off from the renter: links and connections.
func (m *mesh) vanish(s *testSupplier) {
	m.t.Helper()
	if err := m.mn.UnlinkPeers(m.renter.ID(), s.host.ID()); err != nil {
		m.t.Fatal(err)
	}
	// A mocknet stream opened as its connection closes can outlive the
	// connection (the far end adds it to its side in a goroutine of its
	// own): the renter's streams to s are reset, and it opens no more.
	m.mu.Lock()
	if m.gone == nil {
		m.gone = map[peer.ID]bool{}
	}
	m.gone[s.host.ID()] = true
	opened := m.opened[s.host.ID()]
	delete(m.opened, s.host.ID())
	m.mu.Unlock()
	for _, st := range opened {
		_ = st.Reset()
	}
	// A connection being opened as the links go may outlive one
	// disconnect: cut until none is left on either side.
	eventually(m.t, time.Minute, "no connection left to the supplier", func() bool {
		_ = m.mn.DisconnectPeers(m.renter.ID(), s.host.ID())
		return len(m.renter.Network().ConnsToPeer(s.host.ID())) == 0 && len(s.host.Network().ConnsToPeer(m.renter.ID())) == 0
	})
}

// comeBack links s to the renter again.
func (m *mesh) comeBack(s *testSupplier) {
	m.t.Helper()
	if _, err := m.mn.LinkPeers(m.renter.ID(), s.host.ID()); err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	delete(m.gone, s.host.ID())
	m.mu.Unlock()
}

// shJob is a one-GPU job running script with sh, receipts every 500 ms.
func shJob(script string, edit func(*pb.JobSpec)) Request {
	spec := &pb.JobSpec{Argv: []string{"sh", "-c", script}, Gpus: 1}
	if edit != nil {
		edit(spec)
	}
	return Request{Spec: spec, RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: testPrice}, ReceiptInterval: 500 * time.Millisecond}
}

func (m *mesh) submit(req Request) View {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := m.ctrl.Submit(ctx, req)
	if err != nil {
		m.t.Fatalf("submit: %v", err)
	}
	return v
}

// view is the job now.
func (m *mesh) view(id string) View {
	m.t.Helper()
	v, err := m.ctrl.Job(id)
	if err != nil {
		m.t.Fatal(err)
	}
	return v
}

// waitJob waits until the job is in state and every attempt its supplier
// served is settled, and returns it.
func (m *mesh) waitJob(id string, state State) View {
	m.t.Helper()
	var v View
	defer func() {
		if m.t.Failed() {
			m.t.Logf("job: %s", describe(v))
		}
	}()
	eventually(m.t, time.Minute, "job "+state.String()+" and settled", func() bool {
		v = m.view(id)
		if v.State != state {
			if v.State == StateSucceeded || v.State == StateFailed || v.State == StateStopped {
				m.t.Fatalf("job %s, want %s", v.State, state)
			}
			return false
		}
		for _, a := range v.Attempts {
			if (a.Outcome == StateSucceeded || a.Outcome == StateFailed || a.Outcome == StateStopped) && !a.Settled {
				return false
			}
		}
		return true
	})
	return v
}

// logs is the job's whole output.
func (m *mesh) logs(id string) string {
	m.t.Helper()
	var b bytes.Buffer
	if _, err := m.ctrl.Logs(context.Background(), id, 0, false, &b); err != nil {
		m.t.Fatal(err)
	}
	return b.String()
}

// runOf is the supplier's view of its attempt on lease (nil: none).
func (s *testSupplier) runOf(lease string) *RunView {
	for _, r := range s.exec.Runs() {
		if r.LeaseID == lease {
			return &r
		}
	}
	return nil
}

func describe(v View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state %s (%s), exit %d, failovers %d, restarts %d; attempts:", v.State, v.Message, v.ExitCode, v.Failovers, v.Restarts)
	for _, a := range v.Attempts {
		fmt.Fprintf(&b, " [%d %s on %.12s settled=%v receipts=%d]", a.Attempt, a.Outcome, a.Supplier, a.Settled, a.Receipts)
	}
	return b.String()
}

// TestControllerRunsJobToSuccess: a job runs on its supplier, its output
// reaches the renter, its receipts are paid and both sides settle.
func TestControllerRunsJobToSuccess(t *testing.T) {
	m := newMesh(t, 1, nil)
	sup := m.sups[0]
	v := m.submit(shJob(`echo "hello from attempt $JOB_ATTEMPT"; sleep 1`, nil))
	v = m.waitJob(v.JobID, StateSucceeded)
	t.Log(describe(v))
	if len(v.Attempts) != 1 {
		t.Fatalf("want one attempt: %s", describe(v))
	}
	a := v.Attempts[0]
	if a.Outcome != StateSucceeded || a.Supplier != sup.host.ID().String() || !a.Settled || v.ExitCode != 0 {
		t.Fatalf("attempt: %s", describe(v))
	}
	if a.Receipts < 2 || a.PaidMicros <= 0 {
		t.Fatalf("attempt paid %d micros for %d receipts; want the start's and the final receipt paid", a.PaidMicros, a.Receipts)
	}
	if got := m.logs(v.JobID); got != "hello from attempt 1\n" {
		t.Fatalf("logs %q", got)
	}
	r := sup.runOf(a.LeaseID)
	if r == nil || r.State != StateSucceeded || r.OwedMicros != 0 {
		t.Fatalf("the supplier's run: %+v; want succeeded, nothing owed", r)
	}
	if n := len(m.rentCalls()); n != 1 {
		t.Fatalf("%d leases asked for, want 1", n)
	}
}

// TestControllerFailsOverFromCheckpoint: the supplier vanishes while the
// job runs; the renter, still online, gives it up, leases from another
// supplier excluding the lost one, and restarts the job there from the
// checkpoint it pulled. When the lost supplier comes back, the renter
// tells it to stop its copy.
func TestControllerFailsOverFromCheckpoint(t *testing.T) {
	m := newMesh(t, 2, nil)
	a, b := m.sups[0], m.sups[1]
	// The step file appears in $CHECKPOINT_DIR whole (renamed from the
	// working dir, on the same filesystem): a checkpoint pulled as it was
	// being written would hold it empty.
	script := `if [ -f "$CHECKPOINT_DIR/step" ]; then echo "attempt $JOB_ATTEMPT resumed at step $(cat "$CHECKPOINT_DIR/step")"; exit 0; fi
echo "attempt $JOB_ATTEMPT from scratch"; echo 7 > "$HOME/step.tmp"; mv "$HOME/step.tmp" "$CHECKPOINT_DIR/step"; exec sleep 600`
	v := m.submit(shJob(script, nil))
	var first View
	eventually(t, time.Minute, "the first checkpoint pulled", func() bool { first = m.view(v.JobID); return first.Checkpoint != "" })
	if first.State != StateRunning || first.Attempts[0].Supplier != a.host.ID().String() {
		t.Fatalf("before the loss: %s", describe(first))
	}
	m.vanish(a)
	v = m.waitJob(v.JobID, StateSucceeded)
	t.Log(describe(v))
	if len(v.Attempts) != 2 || v.Failovers != 1 || v.Restarts != 0 {
		t.Fatalf("want one failover, two attempts: %s", describe(v))
	}
	lost, next := v.Attempts[0], v.Attempts[1]
	if lost.Outcome != StateLost || next.Outcome != StateSucceeded || next.Supplier != b.host.ID().String() || next.Attempt != 2 {
		t.Fatalf("attempts: %s", describe(v))
	}
	if next.Checkpoint != first.Checkpoint {
		t.Fatalf("attempt 2 resumed from %q, want the checkpoint pulled from attempt 1 (%q)", next.Checkpoint, first.Checkpoint)
	}
	if rents := m.rentCalls(); len(rents) != 2 || !slices.Contains(rents[1].Exclude, a.host.ID()) {
		t.Fatalf("leases asked for: %+v; want a second one excluding the lost supplier %s", rents, a.host.ID())
	}
	if got, want := m.logs(v.JobID), "attempt 1 from scratch\nattempt 2 resumed at step 7\n"; got != want {
		t.Fatalf("logs %q, want %q", got, want)
	}
	// The lost supplier still runs attempt 1, unpaid; back on the
	// network, it is fenced.
	if r := a.runOf(lost.LeaseID); r == nil || Ended(r.State) {
		t.Fatalf("the lost supplier's run before it came back: %+v", r)
	}
	m.comeBack(a)
	eventually(t, time.Minute, "the lost supplier's copy fenced", func() bool {
		r := a.runOf(lost.LeaseID)
		return r != nil && r.State == StateFenced
	})
	if got := m.view(v.JobID); got.State != StateSucceeded || len(got.Attempts) != 2 {
		t.Fatalf("after the fence: %s", describe(got))
	}
}

// TestControllerRestartPolicy: the job's own failure (a non-zero exit)
// is retried only as its restart policy says, on the same supplier (a
// job's failure is no reason to exclude it) and counted as a restart,
// not a failover.
func TestControllerRestartPolicy(t *testing.T) {
	failsFirst := `if [ "$JOB_ATTEMPT" -ge 2 ]; then echo "attempt $JOB_ATTEMPT ok"; exit 0; fi; echo "attempt $JOB_ATTEMPT fails"; exit 3`
	for _, tc := range []struct {
		name     string
		script   string
		restart  *pb.Restart
		state    State
		attempts int
		exit     int
		logs     string
	}{
		{name: "no policy: no retry", script: failsFirst, state: StateFailed, attempts: 1, exit: 3, logs: "attempt 1 fails\n"},
		{name: "never: no retry", script: failsFirst, restart: &pb.Restart{Policy: "never", MaxRestarts: 3}, state: StateFailed, attempts: 1, exit: 3, logs: "attempt 1 fails\n"},
		{name: "on-failure: retried", script: failsFirst, restart: &pb.Restart{Policy: "on-failure", MaxRestarts: 2, ExitCodes: []int32{3}},
			state: StateSucceeded, attempts: 2, logs: "attempt 1 fails\nattempt 2 ok\n"},
		{name: "on-failure: not this exit code", script: failsFirst, restart: &pb.Restart{Policy: "on-failure", MaxRestarts: 2, ExitCodes: []int32{4}},
			state: StateFailed, attempts: 1, exit: 3, logs: "attempt 1 fails\n"},
		{name: "on-failure: restarts used up", script: `echo "attempt $JOB_ATTEMPT fails"; exit 3`, restart: &pb.Restart{Policy: "on-failure", MaxRestarts: 1},
			state: StateFailed, attempts: 2, exit: 3, logs: "attempt 1 fails\nattempt 2 fails\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t, 1, nil)
			sup := m.sups[0]
			v := m.submit(shJob(tc.script, func(s *pb.JobSpec) { s.Restart = tc.restart }))
			v = m.waitJob(v.JobID, tc.state)
			t.Log(describe(v))
			if len(v.Attempts) != tc.attempts || v.Restarts != tc.attempts-1 || v.Failovers != 0 || v.ExitCode != tc.exit {
				t.Fatalf("got %s; want %d attempts, %d restarts, no failover, exit code %d", describe(v), tc.attempts, tc.attempts-1, tc.exit)
			}
			for i, a := range v.Attempts {
				if a.Supplier != sup.host.ID().String() {
					t.Fatalf("attempt %d ran on %s, not on the supplier its job failed on", a.Attempt, a.Supplier)
				}
				if want := StateFailed; i < len(v.Attempts)-1 && a.Outcome != want {
					t.Fatalf("attempt %d: %s, want %s", a.Attempt, a.Outcome, want)
				}
			}
			rents := m.rentCalls()
			if len(rents) != tc.attempts {
				t.Fatalf("%d leases asked for, want %d", len(rents), tc.attempts)
			}
			for _, r := range rents {
				if slices.Contains(r.Exclude, sup.host.ID()) {
					t.Fatalf("a restart excluded the supplier: %v", r.Exclude)
				}
			}
			if got := m.logs(v.JobID); got != tc.logs {
				t.Fatalf("logs %q, want %q", got, tc.logs)
			}
		})
	}
}

// TestControllerRetryBudget: failures of the infrastructure (here every
// supplier refuses the start) move the job to another supplier, each
// excluded after its failure, until the retry budget is spent; then the
// job fails and no further lease is asked for. No job process starts, so
// the test runs in a synctest bubble: the controller's backoffs pass on
// its fake clock.
func TestControllerRetryBudget(t *testing.T) {
	for _, budget := range []int{1, 2} {
		t.Run(fmt.Sprintf("budget %d", budget), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMesh(t, 4, func(c *ControllerConfig) { c.RetryBudget = budget })
				for _, s := range m.sups {
					s.refuse.Store(true)
				}
				v := m.submit(shJob(`echo never runs`, nil))
				v = m.waitJob(v.JobID, StateFailed)
				t.Log(describe(v))
				if len(v.Attempts) != budget+1 || v.Failovers != budget+1 || v.Restarts != 0 {
					t.Fatalf("got %s; want %d attempts and failovers", describe(v), budget+1)
				}
				if want := fmt.Sprintf("gave up after %d failovers", budget); !strings.Contains(v.Message, want) {
					t.Fatalf("message %q, want it to say %q", v.Message, want)
				}
				for i, a := range v.Attempts {
					if a.Outcome != StateInterrupted || a.Supplier != m.sups[i].host.ID().String() {
						t.Fatalf("attempt %d: %s on %s; want interrupted on supplier %d", a.Attempt, a.Outcome, a.Supplier, i)
					}
				}
				rents := m.rentCalls()
				if len(rents) != budget+1 {
					t.Fatalf("%d leases asked for, want %d", len(rents), budget+1)
				}
				for i, r := range rents {
					for _, s := range m.sups[:i] {
						if !slices.Contains(r.Exclude, s.host.ID()) {
							t.Fatalf("lease %d did not exclude %s, which failed before", i+1, s.host.ID())
						}
					}
				}
				if m.logs(v.JobID) != "" {
					t.Fatal("a refused job wrote output")
				}
			})
		})
	}
}

// TestControllerGivesUpRenting: after a failover the controller keeps
// asking the market for a lease, every few seconds, for RentFor; when no
// supplier is left all that time, the job fails and renting stops. In a
// synctest bubble, the five minutes pass on the fake clock.
func TestControllerGivesUpRenting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMesh(t, 1, nil)
		m.sups[0].refuse.Store(true)
		start := time.Now()
		v := m.submit(shJob(`echo never runs`, nil))
		for v = m.view(v.JobID); v.State != StateFailed && time.Since(start) < 2*RentFor; v = m.view(v.JobID) {
			time.Sleep(time.Second) // on the bubble's clock
		}
		took := time.Since(start)
		t.Log(describe(v), took)
		if want := fmt.Sprintf("no supplier to continue on for %s", RentFor); !strings.Contains(v.Message, want) {
			t.Fatalf("message %q, want it to say %q", v.Message, want)
		}
		if len(v.Attempts) != 1 || v.Failovers != 1 || took < RentFor || took > RentFor+time.Minute {
			t.Fatalf("gave up after %s: %s; want one attempt, one failover, after %s", took, describe(v), RentFor)
		}
		rents := m.rentCalls()
		if len(rents) < 10 {
			t.Fatalf("asked for a lease %d times in %s; want it retried every few seconds", len(rents), took)
		}
		synctest.Wait()
		time.Sleep(time.Minute)
		if n := len(m.rentCalls()); n != len(rents) {
			t.Fatalf("renting went on after the job failed: %d leases asked for, then %d", len(rents), n)
		}
	})
}

// TestControllerStop: the renter stops a running job; the supplier stops
// it, both sides settle, and the job is not retried.
func TestControllerStop(t *testing.T) {
	m := newMesh(t, 2, nil)
	sup := m.sups[0]
	v := m.submit(shJob(`echo started; exec sleep 600`, func(s *pb.JobSpec) {
		s.Restart = &pb.Restart{Policy: "on-failure", MaxRestarts: 3}
	}))
	eventually(t, time.Minute, "the job's output", func() bool { return m.logs(v.JobID) == "started\n" })
	if _, err := m.ctrl.Stop(v.JobID, "enough for today"); err != nil {
		t.Fatal(err)
	}
	v = m.waitJob(v.JobID, StateStopped)
	t.Log(describe(v))
	if v.Message != "enough for today" || len(v.Attempts) != 1 || v.Attempts[0].Outcome != StateStopped || v.Failovers != 0 || v.Restarts != 0 {
		t.Fatalf("after the stop: %s", describe(v))
	}
	if r := sup.runOf(v.LeaseID); r == nil || r.State != StateStopped {
		t.Fatalf("the supplier's run: %+v; want stopped", r)
	}
	if n := len(m.rentCalls()); n != 1 {
		t.Fatalf("%d leases asked for, want 1", n)
	}
	// Stopping a finished job changes nothing.
	if again, err := m.ctrl.Stop(v.JobID, "again"); err != nil || again.State != StateStopped || again.Message != "enough for today" {
		t.Fatalf("stop again: %s, %v", describe(again), err)
	}
}

// TestControllerWaitsWhileOffline: a renter that cannot reach the rest
// of the network either does not blame its silent supplier: no failover
// while its Online check fails. Once it is online again, the supplier
// still silent, it fails over.
func TestControllerWaitsWhileOffline(t *testing.T) {
	m := newMesh(t, 2, nil)
	a, b := m.sups[0], m.sups[1]
	m.online.Store(false)
	v := m.submit(shJob(`if [ "$JOB_ATTEMPT" -ge 2 ]; then echo "attempt $JOB_ATTEMPT"; exit 0; fi; echo started; exec sleep 600`, nil))
	eventually(t, time.Minute, "the job's output", func() bool { return m.logs(v.JobID) == "started\n" })
	m.vanish(a)
	eventually(t, time.Minute, "the Online check asked twice", func() bool { return m.asked.Load() >= 2 })
	if got := m.view(v.JobID); len(got.Attempts) != 1 || got.Failovers != 0 || len(m.rentCalls()) != 1 {
		t.Fatalf("an offline renter failed over: %s", describe(got))
	}
	m.online.Store(true)
	v = m.waitJob(v.JobID, StateSucceeded)
	t.Log(describe(v))
	if len(v.Attempts) != 2 || v.Failovers != 1 || v.Attempts[0].Outcome != StateLost || v.Attempts[1].Supplier != b.host.ID().String() {
		t.Fatalf("once online: %s; want one failover to the second supplier", describe(v))
	}
	if got := m.logs(v.JobID); got != "started\nattempt 2\n" {
		t.Fatalf("logs %q", got)
	}
}

// TestControllerReattachesAfterOutage: while the renter is cut off (and
// cannot reach the network either), its supplier keeps the job and,
// unpaid, pauses it. Back on the network the renter attaches to the same
// attempt again: it pays the receipts it missed, the job resumes, its
// output after the outage arrives and the attempt settles. No failover.
func TestControllerReattachesAfterOutage(t *testing.T) {
	m := newMesh(t, 2, nil)
	sup := m.sups[0]
	m.online.Store(false)
	v := m.submit(shJob(`echo started; while [ ! -f go ]; do sleep 0.1; done; echo done`, nil))
	eventually(t, time.Minute, "the job's output", func() bool { return m.logs(v.JobID) == "started\n" })
	m.vanish(sup)
	eventually(t, time.Minute, "the supplier pausing the unpaid job", func() bool {
		r := sup.runOf(v.LeaseID)
		return r != nil && r.State == StateHalted
	})
	m.comeBack(sup)
	eventually(t, time.Minute, "the job resumed", func() bool { return sup.runOf(v.LeaseID).State == StateRunning })
	// The job finishes only now: its last output must come through the
	// session attached again.
	if err := os.WriteFile(filepath.Join(sup.exec.cfg.DataDir, "jobs", v.LeaseID, "1", "work", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v = m.waitJob(v.JobID, StateSucceeded)
	t.Log(describe(v))
	if len(v.Attempts) != 1 || v.Failovers != 0 || len(m.rentCalls()) != 1 {
		t.Fatalf("after the outage: %s; want the one attempt, no failover", describe(v))
	}
	if got := m.logs(v.JobID); got != "started\ndone\n" {
		t.Fatalf("logs %q", got)
	}
	if r := sup.runOf(v.LeaseID); r.OwedMicros != 0 {
		t.Fatalf("the supplier is owed %d micros after settling", r.OwedMicros)
	}
}

// TestControllerRefusesStaleAttemptReceipts: (lease, attempt) fences
// attempts. After a failover the job is at attempt 2; a supplier that
// sends a receipt of attempt 1 (a copy it kept running) is not paid for
// it, while the receipt of attempt 2 that follows it on the same session
// is.
func TestControllerRefusesStaleAttemptReceipts(t *testing.T) {
	m := newMesh(t, 1, nil)
	a := m.sups[0]
	s := m.scriptedSupplier()
	type sent struct {
		attempt uint32
		stale   uint32
		receipt *settle.Receipt // the current attempt's
		err     error
	}
	sessions := make(chan sent, 4)
	vouchers := make(chan *settle.Voucher, 16)
	// The scripted supplier admits any start, then sends a receipt of the
	// attempt before the one it was asked to start, and one of that
	// attempt, both signed with its key for the lease, and reads the
	// renter's vouchers.
	s.host.SetStreamHandler(SessionProtocol, func(st network.Stream) {
		defer st.Reset()
		out := sent{}
		defer func() { sessions <- out }()
		var h pb.Hello
		if out.err = p2p.ReadMsg(st, MaxHelloSize, &h); out.err != nil {
			return
		}
		out.attempt, out.stale = h.Attempt, h.Attempt-1
		l, err := market.OpenLease(h.Lease, time.Now())
		if out.err = err; err != nil {
			return
		}
		if out.err = p2p.WriteMsg(st, &pb.Welcome{SendBody: true}); out.err != nil {
			return
		}
		body := make([]byte, int(h.SpecSize)+int(h.CheckpointSize))
		if _, out.err = io.ReadFull(st, body); out.err != nil {
			return
		}
		spec, err := DecodeSpec(body[:h.SpecSize])
		if out.err = err; err != nil {
			return
		}
		if out.err = p2p.WriteMsg(st, &pb.Welcome{State: StateRunning.String(), Attempt: h.Attempt}); out.err != nil {
			return
		}
		now := time.Now()
		issue := func(attempt uint32) (*settle.Receipt, error) {
			led, err := settle.OpenLedger(store.NewMemory())
			if err != nil {
				return nil, err
			}
			meter, err := settle.NewMeter(led, s.key, settle.TermsOf(l, spec.JobId))
			if err != nil {
				return nil, err
			}
			return meter.Issue(attempt, l.Start(), now, now.Sub(l.Start()).Milliseconds(), settle.Usage{}, nil, false, StateRunning.String())
		}
		stale, err := issue(out.stale)
		if out.err = err; err != nil {
			return
		}
		if out.receipt, out.err = issue(h.Attempt); out.err != nil {
			return
		}
		for _, r := range []*settle.Receipt{stale, out.receipt} {
			if out.err = p2p.WriteMsg(st, &pb.ServerFrame{Body: &pb.ServerFrame_Receipt{Receipt: r.Raw}}); out.err != nil {
				return
			}
		}
		sessions <- out
		out = sent{}
		for {
			var f pb.ClientFrame
			if err := p2p.ReadMsg(st, MaxFrameSize, &f); err != nil {
				return
			}
			if raw := f.GetVoucher(); raw != nil {
				v, err := settle.OpenVoucher(raw)
				if err != nil {
					out.err = err
					return
				}
				vouchers <- v
			}
		}
	})
	v := m.submit(shJob(`exec sleep 600`, nil))
	eventually(t, time.Minute, "the job running on the first supplier", func() bool {
		return m.view(v.JobID).State == StateRunning
	})
	m.vanish(a)
	var got sent
	select {
	case got = <-sessions:
	case <-time.After(time.Minute):
		t.Fatalf("no start on the second supplier: %s", describe(m.view(v.JobID)))
	}
	if got.err != nil || got.attempt != 2 {
		t.Fatalf("the second supplier's session: attempt %d, %v; want attempt 2", got.attempt, got.err)
	}
	var paid *settle.Voucher
	select {
	case paid = <-vouchers:
	case <-time.After(time.Minute):
		t.Fatal("the renter paid no receipt")
	}
	// Vouchers answer receipts in order: had the stale receipt been paid,
	// its voucher would have come first.
	if paid.ReceiptHash == nil || [32]byte(paid.ReceiptHash) != got.receipt.Hash || paid.CumAmountMicros != got.receipt.CumAmountMicros {
		t.Fatalf("the first voucher pays receipt %x (%d micros); want attempt 2's receipt %x (%d micros)",
			paid.ReceiptHash, paid.CumAmountMicros, got.receipt.Hash, got.receipt.CumAmountMicros)
	}
	v = m.view(v.JobID)
	t.Log(describe(v))
	if len(v.Attempts) != 2 || v.Attempts[1].Supplier != s.host.ID().String() || v.Attempts[1].Receipts != 1 || v.Attempts[1].PaidMicros != money.Micros(got.receipt.CumAmountMicros) {
		t.Fatalf("after the receipts: %s; want attempt 2 on the scripted supplier with one receipt paid", describe(v))
	}
}

// scriptedSupplier adds a supplier without an Executor: its session
// handler is the test's.
func (m *mesh) scriptedSupplier() *testSupplier {
	m.t.Helper()
	s := &testSupplier{leases: map[market.ID]*market.Lease{}}
	s.host, s.key = m.addPeer(len(m.sups) + 1)
	if _, err := m.mn.LinkPeers(m.renter.ID(), s.host.ID()); err != nil {
		m.t.Fatal(err)
	}
	m.mu.Lock()
	m.sups = append(m.sups, s)
	m.mu.Unlock()
	return s
}
