package testnet

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/p2p"
)

// probeEnv carries a punch probe's task (probeTask as JSON) to the test
// binary that BenchmarkNAT runs inside a namespace.
const probeEnv = "GPUMESH_PUNCH_PROBE"

// probeTask is what a punch probe does: join through Bootstrap, then
// reach Target at its relay addresses and time hole punching.
type probeTask struct {
	Bootstrap []string `json:"bootstrap"`
	Target    string   `json:"target"`
	Addrs     []string `json:"addrs"` // the target's relayed addresses
}

// probeResult is what a punch probe measured.
type probeResult struct {
	RelayedMs float64 `json:"relayed_ms"` // connecting through the relay
	DirectMs  float64 `json:"direct_ms"`  // from the relayed connection to a direct one
	RTTMs     float64 `json:"rtt_ms"`     // a ping over the direct connection
}

// punchProbe runs this test binary in namespace ns as a fresh libp2p host
// (the same p2p.Network a node runs) that reaches target through a relay
// and times hole punching: a node can be asked for no such thing, and a
// host in a namespace must be a process of its own.
func punchProbe(ctx context.Context, ns string, task probeTask) (probeResult, error) {
	b, _ := json.Marshal(task)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestPunchProbe$", "-test.v")
	cmd.Env = append(os.Environ(), probeEnv+"="+string(b))
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "punch-probe: "); ok {
			var r probeResult
			return r, json.Unmarshal([]byte(rest), &r)
		}
	}
	return probeResult{}, fmt.Errorf("punch probe in %s: %v: %s", ns, err, out)
}

// TestPunchProbe is the punch probe's body, run by punchProbe; it skips
// unless probeEnv is set.
func TestPunchProbe(t *testing.T) {
	raw := os.Getenv(probeEnv)
	if raw == "" {
		t.Skip("the punch probe of BenchmarkNAT; runs only inside a namespace it sets up")
	}
	var task probeTask
	if err := json.Unmarshal([]byte(raw), &task); err != nil {
		t.Fatal(err)
	}
	boot, err := node.ParseBootstrap(task.Bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	target, err := peer.Decode(task.Target)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(p2p.Config{Key: key, Network: Network, ListenAddrs: []string{"/ip4/0.0.0.0/udp/0/quic-v1", "/ip4/0.0.0.0/tcp/0"},
		Bootstrap: boot, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Bootstrap(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Hole punching offers the addresses peers observed: wait for one.
	for len(n.Reach().Observed) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no peer reported a public address of the probe")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var addrs []ma.Multiaddr
	for _, s := range task.Addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	n.Host.Peerstore().AddAddrs(target, addrs, peerstore.TempAddrTTL)
	t0 := time.Now()
	if err := n.Host.Connect(network.WithAllowLimitedConn(ctx, "probe"), peer.AddrInfo{ID: target}); err != nil {
		t.Fatalf("connect through the relay: %v", err)
	}
	relayed := time.Since(t0)
	t1 := time.Now()
	if err := n.Direct(ctx, target); err != nil {
		t.Fatal(err)
	}
	direct := time.Since(t1)
	pr := <-ping.Ping(ctx, n.Host, target)
	if pr.Error != nil {
		t.Fatalf("ping over the direct connection: %v", pr.Error)
	}
	b, _ := json.Marshal(probeResult{RelayedMs: ms(relayed), DirectMs: ms(direct), RTTMs: ms(pr.RTT)})
	fmt.Printf("punch-probe: %s\n", b)
}
