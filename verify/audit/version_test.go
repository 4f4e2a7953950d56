package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// TestV1ChallengerIsRefused: a challenger of the retired protocol version
// that dials a prover gets a refusal naming the version to use, marked
// busy, so that it neither fails the prover nor takes it for down.
func TestV1ChallengerIsRefused(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := streamTo(t, ctx, ch, ph, ChallengeProtocolV1)
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	req := &pb.ChallengeRequest{Model: "t4", GpuUuids: []string{"GPU-sim-a", "GPU-sim-b"},
		Seeds: [][]byte{make([]byte, 32), make([]byte, 32)}, N: 256, T: 128, K: 66, Simulated: true, Scale: 128}
	if err := p2p.WriteMsg(s, req); err != nil {
		t.Fatal(err)
	}
	var commit pb.Commit
	if err := p2p.ReadMsg(s, maxSmallMsg, &commit); err != nil {
		t.Fatalf("no answer to a version-1 request: %v", err)
	}
	if commit.Refused != RetiredRefusal || !commit.Busy || commit.Code != CodeRetired || len(commit.Roots) != 0 {
		t.Fatalf("answer to a version-1 request: %+v, want refused %q, busy, code %q", &commit, RetiredRefusal, CodeRetired)
	}
	// A version-1 challenger reads it as this one's checkCommit does.
	err := (&exchange{gpus: 2}).checkCommit(&commit)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "use 2.0.0") {
		t.Errorf("a version-1 challenger records %v, want busy, naming 2.0.0", err)
	}
}

// TestV2ChallengerMeetsV1Prover: a challenger of this version that meets
// a prover of the retired one only records the version outcome: not
// unreachable, not failed, nothing to attest. A peer that serves no
// challenge protocol at all is still unreachable.
func TestV2ChallengerMeetsV1Prover(t *testing.T) {
	old, none, ch := newHost(t), newHost(t), newHost(t)
	old.SetStreamHandler(ChallengeProtocolV1, func(s network.Stream) {
		var req pb.ChallengeRequest
		_ = p2p.ReadMsg(s, maxRequest, &req)
		s.Reset()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range []peer.AddrInfo{{ID: old.ID(), Addrs: old.Addrs()}, {ID: none.ID(), Addrs: none.Addrs()}} {
		if err := ch.Connect(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	c := NewChallenger(ch, 0, quiet())
	uuids := []string{"GPU-sim-a", "GPU-sim-b"}
	res, err := c.Challenge(ctx, old.ID(), "t4", uuids, true)
	if err != nil {
		t.Fatalf("a version-1 prover: err = %v, want a version outcome", err)
	}
	if res.Outcome != OutcomeVersion || res.Passed || res.Judged() || !strings.Contains(res.Reason, "1.0.0") {
		t.Fatalf("a version-1 prover: outcome %q passed=%v judged=%v reason %q, want %q naming 1.0.0", res.Outcome, res.Passed, res.Judged(), res.Reason, OutcomeVersion)
	}
	if _, err := c.Challenge(ctx, none.ID(), "t4", uuids, true); !errors.Is(err, ErrUnreachable) {
		t.Errorf("a peer without the protocol: err = %v, want ErrUnreachable", err)
	}
}

// TestRowSeedVector pins RowSeed of docs/PROTOCOL.md §19.9 (it has no
// domain prefix, and is the same under both versions).
func TestRowSeedVector(t *testing.T) {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(i)
	}
	const want = "04a6950a06d3e3308ad7d3606ef810eb124e3943404ca746a12c51c7bf776839"
	if got := RowSeed(seed, 1); hex.EncodeToString(got[:]) != want {
		t.Errorf("RowSeed(seed, 1) = %x, PROTOCOL §19.9 says %s", got, want)
	}
}

// TestTransientFailureIsNotVersion: a prover of this version (it lists
// ChallengeProtocol, and takes version-1 streams to refuse them) whose
// 2.0.0 stream failed for a passing reason is not taken for one that
// speaks only 1.0.0.
func TestTransientFailureIsNotVersion(t *testing.T) {
	ph, ch := newHost(t), newHost(t)
	Serve(ProverConfig{Host: ph, GPUs: twoT4, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := NewChallenger(ch, 0, quiet())
	// Identify has told ch the prover's protocols once a stream opened.
	streamTo(t, ctx, ch, ph, ChallengeProtocol).Reset()
	if c.speaksOnlyV1(ctx, ph.ID()) {
		t.Error("a prover that lists /gpumesh/challenge/2.0.0 was taken for one that speaks only 1.0.0")
	}
}
