package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// mixed is a supplier with four A100s, then two H100s.
var mixed = []GPU{
	{UUID: "GPU-a100-0", Model: "a100-80gb"}, {UUID: "GPU-a100-1", Model: "a100-80gb"},
	{UUID: "GPU-a100-2", Model: "a100-80gb"}, {UUID: "GPU-a100-3", Model: "a100-80gb"},
	{UUID: "GPU-h100-0", Model: "h100-sxm"}, {UUID: "GPU-h100-1", Model: "h100-sxm"},
}

// recordingDevices is a ProverConfig.Devices that records the GPUs each
// challenge's prover was made for, and proves them with a blockingDevice.
type recordingDevices struct {
	mu  sync.Mutex
	got [][]GPU
	dev *blockingDevice
}

func newRecordingDevices() *recordingDevices {
	return &recordingDevices{dev: &blockingDevice{started: make(chan struct{}), stopped: make(chan struct{})}}
}

func (r *recordingDevices) devices(gpus []GPU) (DeviceProver, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, slices.Clone(gpus))
	return r.dev, nil
}

// rawChallenge opens a challenge stream from ch to ph and writes a
// request of model's real sizes for uuids.
func rawChallenge(t *testing.T, ctx context.Context, ch, ph host.Host, model string, uuids []string) network.Stream {
	t.Helper()
	params, _ := Sizes(mustProfile(t, model), false, 0)
	s := streamTo(t, ctx, ch, ph, ChallengeProtocol)
	req := &pb.ChallengeRequest{Model: model, GpuUuids: uuids, N: uint32(params.N), T: uint32(params.T), K: uint32(params.K)}
	for range uuids {
		req.Seeds = append(req.Seeds, make([]byte, 32))
	}
	if err := p2p.WriteMsg(s, req); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChallengeRunsOnItsModelsDevices: on a supplier with A100s and
// H100s, a challenge of the H100s is proven by a prover made for exactly
// the H100s, in the order the request names them (seed g on the device
// of the g-th GPU named), never on the A100s.
func TestChallengeRunsOnItsModelsDevices(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	rec := newRecordingDevices()
	Serve(ProverConfig{Host: ph, GPUs: mixed, Devices: rec.devices, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := rawChallenge(t, ctx, ch, ph, "h100-sxm", []string{"GPU-h100-1", "GPU-h100-0"})
	defer s.Reset()
	select {
	case <-rec.dev.started:
	case <-ctx.Done():
		t.Fatal("the prover did not start the work")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := [][]GPU{{mixed[5], mixed[4]}}
	if !slices.EqualFunc(rec.got, want, slices.Equal) {
		t.Fatalf("the challenge of the H100s was given a prover of %v, want %v", rec.got, want)
	}
}

// TestLeasedGPUsRefusedAsBusy: a challenge of real GPUs a lease holds is
// refused at once as busy, with the retry-after ProverConfig.Leased
// gives, before any work (no prover is made for it): the challenger
// records neither a pass nor a failure. The supplier's other model, not
// leased, is still taken.
func TestLeasedGPUsRefusedAsBusy(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	rec := newRecordingDevices()
	var asked [][]string
	Serve(ProverConfig{Host: ph, GPUs: mixed, Devices: rec.devices, Log: quiet(),
		Leased: func(uuids []string) time.Duration {
			asked = append(asked, slices.Clone(uuids))
			if slices.Contains(uuids, "GPU-h100-1") {
				return 5 * time.Minute
			}
			return 0
		}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	c := NewChallenger(ch, 0, quiet())
	_, err := c.Challenge(ctx, ph.ID(), "h100-sxm", []string{"GPU-h100-0", "GPU-h100-1"}, false)
	var busy *BusyError
	if !errors.As(err, &busy) || busy.RetryAfter < 5*time.Minute || busy.RetryAfter > 5*time.Minute+time.Second || !strings.Contains(busy.Reason, "leased") {
		t.Fatalf("a challenge of leased GPUs: err = %v, want busy, leased, retry after 5m", err)
	}
	rec.mu.Lock()
	made := len(rec.got)
	rec.mu.Unlock()
	if made != 0 {
		t.Errorf("a prover was made for leased GPUs: %v", rec.got)
	}
	// The A100s are not leased: that challenge is taken (and works).
	s := rawChallenge(t, ctx, ch, ph, "a100-80gb", []string{"GPU-a100-0", "GPU-a100-1", "GPU-a100-2", "GPU-a100-3"})
	defer s.Reset()
	select {
	case <-rec.dev.started:
	case <-ctx.Done():
		t.Fatal("the challenge of GPUs not leased did not start")
	}
	if len(asked) != 2 || !slices.Equal(asked[0], []string{"GPU-h100-0", "GPU-h100-1"}) {
		t.Errorf("Leased was asked about %v", asked)
	}
}

// fillingDevice is a DeviceProver whose Commit, Sweep and Open answer
// at once (nothing checks them here) and whose Memory fails with err.
type fillingDevice struct {
	err    error
	filled chan struct{}
}

func (d *fillingDevice) Commit(_ context.Context, seeds [][32]byte, _ challenge.Params) ([][32]byte, error) {
	return make([][32]byte, len(seeds)), nil
}
func (d *fillingDevice) Sweep(context.Context, int, []uint64) ([]uint64, error) { return nil, nil }
func (d *fillingDevice) Open(context.Context, int, []int) ([]challenge.Opening, error) {
	return nil, nil
}
func (d *fillingDevice) Memory(context.Context, int, [32]byte, challenge.MemParams) (challenge.MemBackend, error) {
	return nil, d.err
}

// memReadyFor runs a challenge of the H100s of mixed, whose device
// prover fails to fill memory with err, up to the prover's MemReady.
func memReadyFor(t *testing.T, err error) *pb.MemReady {
	t.Helper()
	return memReadyOf(t, &fillingDevice{err: err})
}

// memReadyOf runs a challenge of the H100s of mixed, proven by dev, up to
// the prover's MemReady.
func memReadyOf(t *testing.T, dev DeviceProver) *pb.MemReady {
	t.Helper()
	ph, ch := newHost(t), newHost(t)
	Serve(ProverConfig{Host: ph, GPUs: mixed, Devices: func([]GPU) (DeviceProver, error) { return dev, nil }, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := rawChallenge(t, ctx, ch, ph, "h100-sxm", []string{"GPU-h100-0", "GPU-h100-1"})
	defer s.Reset()
	_ = s.SetDeadline(time.Now().Add(30 * time.Second))
	ready := &pb.MemReady{}
	for _, step := range []struct{ send, recv proto.Message }{
		{nil, &pb.Commit{}},
		{&pb.SweepRequest{RSeed: make([]byte, 32)}, &pb.SweepResponse{}},
		{&pb.OpenRequest{RowsSeed: make([]byte, 32)}, &pb.OpenResponse{}},
		{&pb.MemPrepare{Seed: make([]byte, 32)}, ready},
	} {
		if step.send != nil {
			if err := p2p.WriteMsg(s, step.send); err != nil {
				t.Fatal(err)
			}
		}
		if err := p2p.ReadMsg(s, 1<<20, step.recv); err != nil {
			t.Fatalf("reading %T: %v", step.recv, err)
		}
		if c, ok := step.recv.(*pb.Commit); ok && c.Refused != "" {
			t.Fatalf("commit refused: %s", c.Refused)
		}
	}
	return ready
}

// TestOutOfDeviceMemoryIsBusy: a device without room for the memory
// proof (a renter's job holds its memory) refuses it as busy, with a
// code and a retry-after, which judges nothing; any other failure to
// fill is a refusal that fails the challenge.
func TestOutOfDeviceMemoryIsBusy(t *testing.T) {
	ready := memReadyFor(t, fmt.Errorf("cuda: memory proof: buffer 3 of 8: %w", ErrDeviceMemory))
	if ready.Refused == "" || !ready.Busy || ready.Code != CodeNoMemory || ready.RetryAfterMs == 0 {
		t.Errorf("out of device memory: %+v, want refused, busy, code %q, a retry-after", ready, CodeNoMemory)
	}
	ready = memReadyFor(t, errors.New("cuda: memory proof: fill: launch failed"))
	if ready.Refused == "" || ready.Busy || ready.Code != "" {
		t.Errorf("a broken device: %+v, want a refusal that is not busy", ready)
	}
}

// TestChallengerTakesNoMemoryAsBusy: the challenger reads a busy
// MemReady as ErrBusy, with the prover's retry-after: not a failure.
func TestChallengerTakesNoMemoryAsBusy(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	ph.SetStreamHandler(ChallengeProtocol, func(s network.Stream) {
		var prep pb.MemPrepare
		_ = p2p.ReadMsg(s, maxSmallMsg, &prep)
		_ = p2p.WriteMsg(s, &pb.MemReady{Refused: "no room", Busy: true, Code: CodeNoMemory, RetryAfterMs: 60000})
		s.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := streamTo(t, ctx, ch, ph, ChallengeProtocol)
	defer s.Close()
	x := &exchange{c: NewChallenger(ch, 0, quiet()), s: s, subject: ph.ID(), res: &Result{}, gpus: 1}
	_, _, err := x.memPrepare(ctx, [32]byte{}, false)
	var busy *BusyError
	if !errors.As(err, &busy) || busy.RetryAfter != time.Minute {
		t.Fatalf("a busy MemReady: %v, want ErrBusy retrying after 1m", err)
	}
}

// barrierDevice is a fillingDevice whose Memory returns only once every
// one of gpus GPUs' fills has started (or fails after 20 s).
type barrierDevice struct {
	fillingDevice
	gpus    int
	mu      sync.Mutex
	entered int
	all     chan struct{}
}

func (d *barrierDevice) Memory(_ context.Context, _ int, _ [32]byte, p challenge.MemParams) (challenge.MemBackend, error) {
	d.mu.Lock()
	if d.entered++; d.entered == d.gpus {
		close(d.all)
	}
	d.mu.Unlock()
	select {
	case <-d.all:
		return heldBackend(p.Bytes()), nil
	case <-time.After(20 * time.Second):
		return nil, errors.New("filled one GPU after another")
	}
}

// heldBackend is a MemBackend that holds its bytes and folds nothing.
type heldBackend int64

func (b heldBackend) FoldRound(context.Context, []int, int, []uint64, []uint64) error { return nil }
func (b heldBackend) HeldBytes() int64                                                { return int64(b) }
func (b heldBackend) Close() error                                                    { return nil }

// TestRealGPUsFilledAtOnce: the memory proof's buffers of real GPUs are
// filled at once, each on its own device, not one GPU after another.
func TestRealGPUsFilledAtOnce(t *testing.T) {
	ready := memReadyOf(t, &barrierDevice{gpus: 2, all: make(chan struct{})})
	if ready.Refused != "" {
		t.Fatalf("MemReady refused: %s", ready.Refused)
	}
}

// TestPrepareTimeout: the prepare step's deadline grows with the bytes to
// fill, all GPUs' together: 8 H200s' buffers are not filled within one
// step's 2 minutes at memFillRate, and the whole exchange leaves room for
// them and its other steps.
func TestPrepareTimeout(t *testing.T) {
	_, mem := Sizes(mustProfile(t, "h200"), false, 0)
	fill := time.Duration(float64(8*mem.Bytes()) / memFillRate * float64(time.Second))
	if got := prepareTimeout(8, mem); got != stepTimeout+fill || got <= 2*stepTimeout {
		t.Errorf("prepareTimeout(8 H200s) = %v, want a step (%v) and %v to fill %d GiB", got, stepTimeout, fill, 8*mem.Bytes()>>30)
	}
	if got := exchangeTimeout(8, mem); got != 4*stepTimeout+fill {
		t.Errorf("exchangeTimeout(8 H200s) = %v, want %v", got, 4*stepTimeout+fill)
	}
}
