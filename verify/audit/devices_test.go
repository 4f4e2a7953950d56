package audit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
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
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	params, _ := Sizes(mustProfile(t, model), false, 0)
	s, err := ch.NewStream(ctx, ph.ID(), ChallengeProtocol)
	if err != nil {
		t.Fatal(err)
	}
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
