package audit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/pb"
)

// TestCheckCommit: a refusal is ErrBusy when the prover is busy, a failed
// challenge otherwise; a commit must carry one root per GPU.
func TestCheckCommit(t *testing.T) {
	x := &exchange{gpus: 2}
	root := make([]byte, 32)
	for _, tc := range []struct {
		name    string
		commit  *pb.Commit
		wantErr error  // nil: no error unless want is set
		want    string // part of the message
	}{
		{"two roots", &pb.Commit{Roots: [][]byte{root, root}}, nil, ""},
		{"busy", &pb.Commit{Refused: "busy with another challenge", Busy: true}, ErrBusy, "busy with another challenge"},
		{"refused", &pb.Commit{Refused: "no t4 GPUs here"}, nil, "prover refused: no t4 GPUs here"},
		{"one root short", &pb.Commit{Roots: [][]byte{root}}, challenge.ErrMalformed, "1 roots for 2 GPUs"},
		{"a root too many", &pb.Commit{Roots: [][]byte{root, root, root}}, challenge.ErrMalformed, "3 roots for 2 GPUs"},
	} {
		err := x.checkCommit(tc.commit)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		case tc.want != "" && tc.wantErr == nil && (errors.Is(err, ErrBusy) || errors.Is(err, ErrUnreachable)):
			t.Errorf("%s: %v is a failed challenge, not %v", tc.name, err, ErrBusy)
		}
	}
}

// TestMemCheck: the digests must match the commitments sent when the
// clock stopped, one each per GPU, and each GPU's walk must check out
// within the deadline, against the seeds the challenger drew.
func TestMemCheck(t *testing.T) {
	mp := challenge.SimMemParams(mustProfile(t, "t4"), challenge.DefaultSimScale)
	var memSeed, sigma0, checkSeed [32]byte
	memSeed[0], sigma0[0], checkSeed[0] = 1, 2, 3
	resp, done, err := answerMem(t.Context(), memProvers(t, memSeed, mp, 2), sigma0, false)
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{gpus: 2, mp: mp, res: &Result{UUIDs: []string{"GPU-a", "GPU-b"}}}
	check := func(resp *pb.MemResponse, done *pb.MemDone, sigma0 [32]byte) error {
		return x.memCheck(resp, done, memSeed, sigma0, checkSeed, time.Millisecond, time.Hour)
	}
	if err := check(resp, done, sigma0); err != nil {
		t.Fatalf("honest answers: %v", err)
	}
	short := &pb.MemDone{Commitments: done.Commitments[:1]}
	if err := check(resp, short, sigma0); !errors.Is(err, challenge.ErrMalformed) {
		t.Errorf("one commitment for two GPUs: %v, want ErrMalformed", err)
	}
	swapped := &pb.MemDone{Commitments: [][]byte{done.Commitments[1], done.Commitments[0]}}
	if err := check(resp, swapped, sigma0); !errors.Is(err, challenge.ErrMemDigest) || !strings.Contains(err.Error(), "GPU GPU-a") {
		t.Errorf("commitments swapped: %v, want ErrMemDigest for GPU-a", err)
	}
	other := sigma0
	other[0]++
	if err := check(resp, done, other); err == nil || !strings.Contains(err.Error(), "GPU GPU-a") {
		t.Errorf("a walk from another sigma0: %v, want GPU-a to fail", err)
	}
	if err := x.memCheck(resp, done, memSeed, sigma0, checkSeed, time.Second, time.Millisecond); err == nil {
		t.Error("answers past the deadline passed")
	}
}

func mustProfile(t *testing.T, model string) catalog.Profile {
	t.Helper()
	p, ok := catalog.Lookup(model)
	if !ok {
		t.Fatalf("no profile %q", model)
	}
	return p
}

// memProvers fills gpus GPUs' memory as an honest prover does for seed.
func memProvers(t *testing.T, seed [32]byte, mp challenge.MemParams, gpus int) []*challenge.MemProver {
	t.Helper()
	out := make([]*challenge.MemProver, gpus)
	for g := range out {
		var err error
		if out[g], err = challenge.NewMemProver(t.Context(), MemSeed(seed, g), mp, 1); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
