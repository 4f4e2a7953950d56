package audit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// TestBudgetWait: a stranger waits until the time strangers took in the
// window, plus the longest challenge's time, is within the share.
func TestBudgetWait(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	b := budget{window: 100 * time.Second, share: 0.1} // 10 s a window
	if w := b.wait(at(0)); w != 0 {
		t.Fatalf("nothing taken: wait %v", w)
	}
	b.took(at(0), at(4), true)   // 4 s
	b.took(at(10), at(13), true) // 3 s: 7 s used, the longest 4 s
	b.took(at(20), at(21), false)
	for _, tc := range []struct {
		now  float64
		want time.Duration
	}{
		{13, 88 * time.Second}, // 7 + 4 > 10 by 1 s: the window's start (now −87 s) must pass 1 s into the first span
		{50, 51 * time.Second},
		{100.5, 500 * time.Millisecond}, // 3.5 s of the first span left, 6.5 + 4 > 10 by 0.5 s
		{101, 0},                        // 6 + 4 = 10
		{150, 0},
	} {
		if got := b.wait(at(tc.now)); got != tc.want {
			t.Errorf("at %vs: wait %v, want %v", tc.now, got, tc.want)
		}
	}
	if got := b.left(at(13)); got != 3*time.Second {
		t.Errorf("at 13s: left %v, want 3s (10 s of share, 7 s used)", got)
	}
	b.took(at(200), at(260), true) // longer than the whole share
	if got := b.wait(at(260)); got != 100*time.Second {
		t.Errorf("after a 60 s challenge: wait %v, want 100s (it must leave the window)", got)
	}
	if got := b.wait(at(360)); got != 0 {
		t.Errorf("once it left: wait %v, want 0", got)
	}
}

// TestStrangersTakeATenth: ten strangers challenging one supplier in a
// loop, ignoring its retry-after, for a window (scaled down from 10 min)
// take at most a tenth of it, as the prover accounted its busy time; they
// are told to come back later, and a trusted challenger is still
// admitted. It judges the prover's own accounting, not the challengers'
// clocks, so that load on the machine (which makes every challenge
// longer) does not decide it.
func TestStrangersTakeATenth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for the whole window")
	}
	const (
		window = 20 * time.Second
		share  = 0.1
		scale  = 256 // a challenge takes about 0.3 s
	)
	ph := newHost(t)
	trusted := newHost(t)
	var mu sync.Mutex
	var heldStrangers, heldTrusted, longest time.Duration
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Scale: scale, PeerGap: 50 * time.Millisecond, Log: quiet(),
		StrangerShare: share, StrangerWindow: window,
		Priority: func(p peer.ID) bool { return p == trusted.ID() },
		held: func(from, to time.Time, stranger bool) {
			mu.Lock()
			defer mu.Unlock()
			if stranger {
				heldStrangers += to.Sub(from)
			} else {
				heldTrusted += to.Sub(from)
			}
			longest = max(longest, to.Sub(from))
		}})
	ctx, cancel := context.WithTimeout(context.Background(), window+time.Minute)
	defer cancel()
	connect := func(h host.Host) *Challenger {
		if err := h.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
			t.Fatal(err)
		}
		return NewChallenger(h, scale, quiet())
	}
	uuids := []string{"GPU-sim-a", "GPU-sim-b"}
	end := time.Now().Add(window)
	var (
		wg                  sync.WaitGroup
		admitted, refused   int
		cut                 int // reset past the share left for them
		noRetryAfter, other int
	)
	for range 10 {
		c := connect(newHost(t))
		wg.Go(func() {
			for time.Now().Before(end) {
				_, err := c.Challenge(ctx, ph.ID(), "t4", uuids, true)
				mu.Lock()
				var busy *BusyError
				switch {
				case errors.As(err, &busy):
					refused++
					if busy.RetryAfter <= 0 {
						noRetryAfter++
					}
				case errors.Is(err, ErrUnreachable):
					cut++
				case err != nil:
					other++
				default:
					admitted++
				}
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	// Once the strangers have taken their share, a trusted challenger is
	// still admitted (after the challenge under way, if any).
	tc := connect(trusted)
	time.Sleep(window / 2)
	trustedAdmitted := false
	for !trustedAdmitted && time.Now().Before(end) {
		_, err := tc.Challenge(ctx, ph.ID(), "t4", uuids, true)
		trustedAdmitted = err == nil // run, whatever its verdict under this load
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	allowance := time.Duration(share * float64(window))
	t.Logf("in %v: %d strangers' challenges run, %d cut off past the share, %d refused busy; the prover held %v for strangers (allowance %v, longest challenge %v); %v for the trusted one",
		window, admitted, cut, refused, heldStrangers.Round(time.Millisecond), allowance, longest.Round(time.Millisecond), heldTrusted.Round(time.Millisecond))
	// Every stranger was admitted within one window of the first, so the
	// budget saw all strangers' time at each admission and cut each one
	// off at the share left: the prover held at most the allowance, plus
	// the moments between a cut-off's timer and the release (a goroutine's
	// wake-up). Those are allowed one challenge's time (longest), far more
	// than a wake-up however loaded the machine, since a challenge is
	// itself hundreds of ms of CPU and slows down under load as much. With
	// no budget the strangers would hold the prover nearly the whole
	// window (10 of them, back to back).
	if limit := allowance + longest; heldStrangers > limit {
		t.Errorf("strangers took %v of the prover's time in %v, more than %v of share and one challenge's %v", heldStrangers, window, allowance, longest)
	}
	if admitted+cut == 0 || refused == 0 || noRetryAfter > 0 || other > 0 {
		t.Errorf("%d run, %d cut off, %d refused (%d without a retry-after), %d other errors: want some run, some refused, every refusal with a retry-after", admitted, cut, refused, noRetryAfter, other)
	}
	if !trustedAdmitted {
		t.Error("the trusted challenger was not admitted once the strangers had taken their share")
	}
}

// TestNoProverRefusedAtOnce: a supplier with real GPUs and no GPU prover
// refuses at once with no-prover, which the challenger records as such:
// not down, not failed, nothing to attest.
func TestNoProverRefusedAtOnce(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	real := []GPU{{UUID: "GPU-real-a", Model: "h100-sxm"}, {UUID: "GPU-sim-b", Model: "t4", Simulated: true}, {UUID: "GPU-sim-c", Model: "t4", Simulated: true}}
	var admitted atomic.Int32
	Serve(ProverConfig{Host: ph, GPUs: real, Log: quiet(), held: func(time.Time, time.Time, bool) { admitted.Add(1) }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	c := NewChallenger(ch, 0, quiet())
	res, err := c.Challenge(ctx, ph.ID(), "h100-sxm", []string{"GPU-real-a"}, false)
	if err != nil {
		t.Fatalf("real GPUs without a prover: err = %v, want a no-prover outcome", err)
	}
	// "At once" is judged by what the prover did, not by a clock: it
	// answered before admitting the challenge, so nothing was computed
	// and no challenge held it (held is told of every one admitted).
	if res.Outcome != OutcomeNoProver || res.Passed || res.Judged() || admitted.Load() != 0 {
		t.Fatalf("real GPUs without a prover: outcome %q passed=%v judged=%v, %d challenges admitted (%s), want %q before admission",
			res.Outcome, res.Passed, res.Judged(), admitted.Load(), res.Reason, OutcomeNoProver)
	}
	// The refusal took no turn: the simulated GPUs are challenged at once.
	res, err = c.Challenge(ctx, ph.ID(), "t4", []string{"GPU-sim-b", "GPU-sim-c"}, true)
	if err != nil || !res.Passed || res.Outcome != OutcomePassed {
		t.Fatalf("simulated GPUs of the same supplier: %+v, %v", res, err)
	}
}

// blockingDevice is a DeviceProver whose Commit works until its context
// ends, and says when it started and when it was stopped.
type blockingDevice struct {
	challenge.Prover
	started, stopped chan struct{}
}

func (d *blockingDevice) Commit(ctx context.Context, _ [][32]byte, _ challenge.Params) ([][32]byte, error) {
	close(d.started)
	<-ctx.Done()
	close(d.stopped)
	return nil, ctx.Err()
}

func (d *blockingDevice) Memory(context.Context, int, [32]byte, challenge.MemParams) (challenge.MemBackend, error) {
	return nil, errors.New("not reached")
}

// TestWorkEndsWithTheStream: a challenger that goes away (resets its
// stream) while the prover works stops the work, and frees the prover
// for the next challenger.
func TestWorkEndsWithTheStream(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	dev := &blockingDevice{started: make(chan struct{}), stopped: make(chan struct{})}
	gpus := []GPU{{UUID: "GPU-real-a", Model: "h100-sxm"}}
	Serve(ProverConfig{Host: ph, GPUs: gpus, Devices: func([]GPU) (DeviceProver, error) { return dev, nil }, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prof, _ := catalog.Lookup("h100-sxm")
	params, _ := Sizes(prof, false, 0)
	s := streamTo(t, ctx, ch, ph, ChallengeProtocol)
	req := &pb.ChallengeRequest{Model: "h100-sxm", GpuUuids: []string{"GPU-real-a"}, Seeds: [][]byte{make([]byte, 32)},
		N: uint32(params.N), T: uint32(params.T), K: uint32(params.K)}
	if err := p2p.WriteMsg(s, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dev.started:
	case <-ctx.Done():
		t.Fatal("the prover did not start the work")
	}
	s.Reset()
	select {
	case <-dev.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the prover still works 10 s after its challenger reset the stream")
	}
}
