package audit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/clock/clocktest"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// streamTo connects from to to and opens a stream of proto on it.
func streamTo(t testing.TB, ctx context.Context, from, to host.Host, proto protocol.ID) network.Stream {
	t.Helper()
	if err := from.Connect(ctx, peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := from.NewStream(ctx, to.ID(), proto)
	if err != nil {
		t.Fatalf("open %s: %v", proto, err)
	}
	return s
}

var twoT4 = []GPU{{UUID: "GPU-sim-a", Model: "t4", Simulated: true}, {UUID: "GPU-sim-b", Model: "t4", Simulated: true}}

// pair starts a prover with cheat and a challenger connected to it, over
// real libp2p hosts on loopback. The prover reads the time from the clock
// it returns, so a test moves past MinPeerGap instead of sleeping.
func pair(t *testing.T, cheat string) (*Challenger, peer.ID, *clocktest.Clock) {
	t.Helper()
	c, err := challenge.ParseCheat(cheat)
	if err != nil {
		t.Fatal(err)
	}
	ph, ch := newHost(t), newHost(t)
	clk := clocktest.New()
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Cheat: c, Now: clk.Now, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return NewChallenger(ch, 0, quiet()), ph.ID(), clk
}

func challengeOnce(t *testing.T, c *Challenger, p peer.ID) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Challenge(ctx, p, "t4", []string{"GPU-sim-a", "GPU-sim-b"}, true)
	if err != nil {
		t.Fatalf("challenge could not run: %v", err)
	}
	return res
}

func TestHonestProverPasses(t *testing.T) {
	c, p, _ := pair(t, "")
	res := challengeOnce(t, c, p)
	if !res.Passed || res.GPUs != 2 || res.RowsChecked != 2*challenge.RealK || res.Measured <= 0 || res.Expected <= 0 {
		t.Fatalf("honest prover: %+v", res)
	}
	if res.VerifierCostRatio <= 0 || res.VerifierCostRatio >= 1 {
		t.Fatalf("verifier cost ratio %v", res.VerifierCostRatio)
	}
}

func TestCheatsFail(t *testing.T) {
	for _, cheat := range []string{"wrong=0.1", "skip=0.1", "mem=0.8", "slow=3"} {
		t.Run(cheat, func(t *testing.T) {
			c, p, _ := pair(t, cheat)
			res := challengeOnce(t, c, p)
			if res.Passed || res.GPUs != 0 || res.Reason == "" {
				t.Fatalf("impostor %s passed: %+v", cheat, res)
			}
			t.Logf("%s: %s", cheat, res.Reason)
		})
	}
}

func TestReplayFails(t *testing.T) {
	c, p, clk := pair(t, "replay")
	if res := challengeOnce(t, c, p); !res.Passed {
		t.Fatalf("first answer of a replayer is honest work and should pass: %s", res.Reason)
	}
	clk.Advance(MinPeerGap)
	if res := challengeOnce(t, c, p); res.Passed {
		t.Fatal("replayed answer passed")
	}
}

func TestProverRefusesBadRequests(t *testing.T) {
	c, p, clk := pair(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A GPU count the prover does not have.
	res, err := c.Challenge(ctx, p, "t4", []string{"GPU-sim-a"}, true)
	if err != nil || res.Passed {
		t.Fatalf("challenge of 1 of 2 GPUs: %+v, %v", res, err)
	}
	// A model it does not have.
	clk.Advance(MinPeerGap)
	res, err = c.Challenge(ctx, p, "h100-sxm", []string{"GPU-sim-a", "GPU-sim-b"}, true)
	if err != nil || res.Passed {
		t.Fatalf("challenge of the wrong model: %+v, %v", res, err)
	}
	// Too soon after the last challenge: the prover declines for now,
	// which is neither a pass nor a failure.
	_, err = c.Challenge(ctx, p, "t4", []string{"GPU-sim-a", "GPU-sim-b"}, true)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("challenge within the gap: err = %v, want ErrBusy", err)
	}
}

// TestProverDropsSilentChallenger: a peer that opens a challenge stream
// and says nothing is dropped after the prover's RequestTimeout
// (p2p.StreamTimeout in production, short here), not held for a whole
// step (2 min) before anything is admitted.
func TestProverDropsSilentChallenger(t *testing.T) {
	const requestTimeout = 200 * time.Millisecond
	ph, ch := newHost(t), newHost(t)
	Serve(ProverConfig{Host: ph, GPUs: twoT4, RequestTimeout: requestTimeout, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := streamTo(t, ctx, ch, ph, ChallengeProtocol)
	defer s.Reset()
	// One byte of a length prefix, so the prover is waiting for the rest.
	if _, err := s.Write([]byte{0x80}); err != nil {
		t.Fatal(err)
	}
	// Far beyond the request timeout, far short of a step.
	const wait = 25 * requestTimeout // half of p2p.StreamTimeout
	_ = s.SetReadDeadline(time.Now().Add(wait))
	_, err := s.Read(make([]byte, 1))
	var timeout interface{ Timeout() bool }
	if errors.As(err, &timeout) && timeout.Timeout() {
		t.Fatalf("the prover still holds a silent challenger's stream after %s", wait)
	}
}

// latePair is pair with an honest prover whose memory commitments are
// held back by late(attempt), as a lost packet on a WAN would hold them.
func latePair(t *testing.T, late func(attempt int) time.Duration) (*Challenger, peer.ID) {
	t.Helper()
	ph, ch := newHost(t), newHost(t)
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Log: quiet(), memLate: late})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return NewChallenger(ch, 0, quiet()), ph.ID()
}

// TestMemoryProofAskedAgainWhenLate: an honest answer that arrives after
// the deadline once (a lost packet, a burst of load) is asked again with
// a fresh σ_0, and the challenge passes on the answer in time.
func TestMemoryProofAskedAgainWhenLate(t *testing.T) {
	c, p := latePair(t, func(attempt int) time.Duration {
		if attempt == 0 {
			return 3 * time.Second
		}
		return 0
	})
	res := challengeOnce(t, c, p)
	if !res.Passed {
		t.Fatalf("an honest prover late once failed: %s", res.Reason)
	}
	if res.MemAttempts != 2 {
		t.Errorf("memory_attempts = %d, want 2 (late, then in time)", res.MemAttempts)
	}
	if res.MemoryMs >= 3000 {
		t.Errorf("memory_ms = %d: the late answer's time, not the one judged", res.MemoryMs)
	}
}

// TestMemoryProofLateEveryTimeFails: a prover late on every one of
// MemAttempts answers fails on the deadline, and is not asked more.
func TestMemoryProofLateEveryTimeFails(t *testing.T) {
	c, p := latePair(t, func(int) time.Duration { return 3 * time.Second })
	res := challengeOnce(t, c, p)
	if res.Passed {
		t.Fatal("a prover late every time passed")
	}
	if !strings.Contains(res.Reason, challenge.ErrMemDeadline.Error()) {
		t.Errorf("reason %q does not name the missed deadline", res.Reason)
	}
	if res.MemAttempts != MemAttempts {
		t.Errorf("memory_attempts = %d, want %d", res.MemAttempts, MemAttempts)
	}
}

// TestLateCommitRunsAgain: a challenge whose commit came late, by no more
// than the challenger's rerun factor, while nothing else was wrong, is
// run once more after the prover's gap, and the second run's verdict
// stands. The factor is widened here so that a commit held back by 3 s
// counts as late by little on any machine.
func TestLateCommitRunsAgain(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Log: quiet(), commitLate: func(run int) time.Duration {
		if run == 0 {
			return 3 * time.Second
		}
		return 0
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
		t.Fatal(err)
	}
	c := NewChallenger(ch, 0, quiet())
	c.rerun = 1000
	res := challengeOnce(t, c, ph.ID())
	if !res.Passed || res.Runs != 2 {
		t.Fatalf("late once, then in time: passed=%v runs=%d (%s), want a pass on the second run", res.Passed, res.Runs, res.Reason)
	}
}

// TestLateByLittle: only a commit that came late, by at most the factor
// times the time allowed, is run again.
func TestLateByLittle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		res   Result
		rerun bool
	}{
		{"late by 1%", Result{commitLate: true, commitAllowed: time.Second, CommitMs: 1010}, true},
		{"late by half", Result{commitLate: true, commitAllowed: time.Second, CommitMs: 1500}, true},
		{"twice the time allowed", Result{commitLate: true, commitAllowed: time.Second, CommitMs: 2000}, false},
		{"failed for another reason", Result{commitAllowed: time.Second, CommitMs: 900}, false},
		{"no bound", Result{commitLate: true, CommitMs: 900}, false},
	} {
		if got := tc.res.lateByLittle(RerunSlowFactor); got != tc.rerun {
			t.Errorf("%s: lateByLittle = %v, want %v", tc.name, got, tc.rerun)
		}
	}
}
