package audit

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// TestDetectionRates measures, over real libp2p streams on this machine,
// how often each cheat is caught and how often an honest simulated
// supplier fails, while ten other simulated nodes keep the CPU busy. It
// runs only with GPUMESH_TRIALS=N (N trials per case), e.g.
//
//	GPUMESH_TRIALS=200 go test -run TestDetectionRates -v -timeout 60m ./verify/audit/
func TestDetectionRates(t *testing.T) {
	trials, _ := strconv.Atoi(os.Getenv("GPUMESH_TRIALS"))
	if trials <= 0 {
		t.Skip("set GPUMESH_TRIALS=N to measure detection and false-alarm rates")
	}
	// Ten other nodes, each a process of its own (this test binary in
	// load mode), compute simulated challenges in a loop, as busy nodes
	// of a testnet on the same machine would.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var load []*exec.Cmd
	for range 10 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoadNode$")
		cmd.Env = append(os.Environ(), "GPUMESH_LOAD_NODE=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		load = append(load, cmd)
	}
	defer func() {
		for _, cmd := range load {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	time.Sleep(time.Second) // let the load start

	gpus := []GPU{{UUID: "GPU-sim-a", Model: "t4", Simulated: true}}
	cheats := []string{"", "slow=2", "skip=0.1", "wrong=0.1", "mem=0.8", "replay"}
	if only := os.Getenv("GPUMESH_CHEATS"); only != "" {
		cheats = strings.Split(only, ";")
	}
	for _, cheat := range cheats {
		c, err := challenge.ParseCheat(cheat)
		if err != nil {
			t.Fatal(err)
		}
		ph, ch := newHost(t), newHost(t)
		Serve(ProverConfig{Host: ph, GPUs: gpus, Cheat: c, PeerGap: time.Nanosecond, Log: quiet()})
		if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
			t.Fatal(err)
		}
		chal := NewChallenger(ch, 0, quiet())
		failed := 0
		start := time.Now()
		for range trials {
			var (
				res Result
				err error
			)
			for {
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				res, err = chal.Challenge(cctx, ph.ID(), "t4", []string{"GPU-sim-a"}, true)
				cancel()
				if !errors.Is(err, ErrBusy) {
					break
				}
				// The last impostor is still sleeping off its answer.
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("%s: %v", cheat, err)
			}
			if !res.Passed {
				failed++
				if failed <= 2 {
					t.Logf("%s: failed: %s", cheat, res.Reason)
				}
			}
		}
		name := cheat
		if name == "" {
			name = "honest"
		}
		t.Logf("%-10s %d of %d failed (%.1f%%), %s a challenge", name, failed, trials, 100*float64(failed)/float64(trials), (time.Since(start) / time.Duration(trials)).Round(time.Millisecond))
	}
}

// TestLoadNode is one loading node of TestDetectionRates: it computes
// simulated challenges of a T4 with one worker, with a short pause after
// each, until it is killed. It runs only in that role.
func TestLoadNode(t *testing.T) {
	if os.Getenv("GPUMESH_LOAD_NODE") != "1" {
		t.Skip("a load process of TestDetectionRates")
	}
	prof, _ := catalog.Lookup("t4")
	params, _ := Sizes(prof, true, challenge.DefaultSimScale)
	p := challenge.NewCPUProver(challenge.CPUOptions{Workers: 1})
	for {
		var seed [32]byte
		_, _ = rand.Read(seed[:])
		_, _ = p.Commit(context.Background(), [][32]byte{seed}, params)
		time.Sleep(50 * time.Millisecond) // a node is busy, not spinning
	}
}
