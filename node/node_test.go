package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/light"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
	"github.com/gpumesh/gpumesh/store"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is a node config on loopback with a fresh data dir.
func testConfig(t *testing.T, dir, gpus, region string, bootstrap []string) Config {
	t.Helper()
	c, err := LoadConfig(Input{
		DataFlag: dir,
		Flags: map[string][]string{
			"listen": {"/ip4/127.0.0.1/tcp/0"}, "api": {"127.0.0.1:0"}, "gpus": {gpus},
			"region": {region}, "bootstrap": bootstrap, "heartbeat_interval": {"200ms"},
			"bootstrap_timeout": {"5s"},
			// Jobs share the test's network: a job network would make
			// links and NAT in this machine's own namespace. The tests of
			// job networks run the nodes in a namespace of their own.
			"job_network": {"false"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startNode(t *testing.T, c Config, opts ...Option) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := New(ctx, c, append([]Option{WithLogger(quiet())}, opts...)...)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func waitAdvertised(t *testing.T, n *Node) {
	t.Helper()
	select {
	case <-n.Advertised():
	case <-time.After(20 * time.Second):
		t.Fatalf("node %s never advertised", n.ID())
	}
}

func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func bootstrapOf(n *Node) []string { return []string{n.Addrs()[0].String()} }

// TestNetworkOfNodes runs five real nodes in-process over loopback: each
// advertises its GPUs, a light client finds them by model and filter, the
// nodes learn each other's profiles through heartbeats, and a restarted
// node keeps its peer ID and re-advertises a newer profile.
func TestNetworkOfNodes(t *testing.T) {
	root := t.TempDir()
	specs := []struct{ gpus, region string }{
		{"sim:h100-sxm:4", "eu-west"},
		{"sim:rtx4090:2", "us-east"},
		{"sim:h100-sxm:2,a100-80gb:1", "us-east"},
		{"none", "eu-west"},
		{"sim:l40s:8", "ap-south"},
	}
	var nodes []*Node
	for i, s := range specs {
		var bs []string
		if i > 0 {
			bs = bootstrapOf(nodes[0])
		}
		dir := filepath.Join(root, "n"+strconv.Itoa(i))
		nodes = append(nodes, startNode(t, testConfig(t, dir, s.gpus, s.region, bs)))
	}
	for i, n := range nodes {
		if specs[i].gpus != "none" {
			waitAdvertised(t, n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := light.New(ctx, light.WithBootstrap(mustBootstrap(t, nodes[1])...), light.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()

	type key struct{ peer, model string }
	var (
		all []market.Offer
		got map[key]int
	)
	// Node 1's directory holds a profile once the supplier's heartbeat
	// has announced it and node 1 has read it from the DHT.
	eventually(t, 20*time.Second, "node 1's directory to list every supplier", func() bool {
		if all, err = lc.Search(ctx, mustFilter(t, "")); err != nil {
			t.Fatal(err)
		}
		got = map[key]int{}
		for _, o := range all {
			got[key{o.PeerID, o.Model}] = o.Count
		}
		return len(got) >= 5
	})
	for _, o := range all {
		if !o.Simulated || o.Region == "" || o.VRAMGiB == 0 || len(o.Addrs) == 0 {
			t.Errorf("incomplete offer %+v", o)
		}
	}
	want := map[key]int{
		{nodes[0].ID().String(), "h100-sxm"}:  4,
		{nodes[1].ID().String(), "rtx4090"}:   2,
		{nodes[2].ID().String(), "h100-sxm"}:  2,
		{nodes[2].ID().String(), "a100-80gb"}: 1,
		{nodes[4].ID().String(), "l40s"}:      8,
	}
	if len(got) != len(want) {
		t.Fatalf("search found %v, want %v", got, want)
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("%v: count %d, want %d", k, got[k], c)
		}
	}

	h100, err := lc.Search(ctx, mustFilter(t, "model=h100-sxm count>=3 region=eu-west"))
	if err != nil {
		t.Fatal(err)
	}
	if len(h100) != 1 || h100[0].PeerID != nodes[0].ID().String() {
		t.Fatalf("model=h100-sxm count>=3 region=eu-west: %+v", h100)
	}
	none, err := lc.Search(ctx, mustFilter(t, "model=h200"))
	if err != nil || len(none) != 0 {
		t.Fatalf("model=h200: %v, %v; want nothing", none, err)
	}

	// Through heartbeats, node 3 (no GPUs) learns and keeps the others' profiles.
	eventually(t, 20*time.Second, "node 3 keeps 4 profiles", func() bool {
		ps, _ := nodes[3].KnownProfiles()
		return len(ps) == 4
	})

	// Restart node 4 on its data dir: same peer ID, a newer profile.
	oldID, oldSeq := nodes[4].ID(), nodes[4].currentProfileSeq()
	cfg4 := nodes[4].cfg
	if err := nodes[4].Close(); err != nil {
		t.Fatal(err)
	}
	setKey(t, &cfg4, "bootstrap", bootstrapOf(nodes[0])...)
	restarted := startNode(t, cfg4)
	if restarted.ID() != oldID {
		t.Fatalf("peer ID changed on restart: %s -> %s", oldID, restarted.ID())
	}
	waitAdvertised(t, restarted)
	eventually(t, 20*time.Second, "re-advertised profile visible", func() bool {
		p, err := lc.Network().FetchProfile(ctx, oldID, 0)
		return err == nil && p.Seq > oldSeq
	})
}

func TestBootstrapUnreachableFailsClearly(t *testing.T) {
	// A port nobody listens on: bind, note it, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c := testConfig(t, t.TempDir(), "sim:t4:1", "eu-west",
		[]string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(port) + "/p2p/12D3KooWHmt23bKc9UXdqMffuWYaw355movJao7eAc4E33iQe8EK"})
	c.BootstrapTimeout = 2 * time.Second
	start := time.Now()
	_, err = New(context.Background(), c, WithLogger(quiet()), WithStore(store.NewMemory()))
	if err == nil {
		t.Fatal("node started with an unreachable bootstrap peer")
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("failing took %s; it must be bounded by the bootstrap timeout", time.Since(start))
	}
	t.Logf("error: %v", err)
}

func mustBootstrap(t *testing.T, n *Node) []peer.AddrInfo {
	t.Helper()
	ai, err := ParseBootstrap(bootstrapOf(n))
	if err != nil {
		t.Fatal(err)
	}
	return ai
}

func TestHeartbeatEvery(t *testing.T) {
	for _, c := range []struct {
		interval time.Duration
		nodes    int
		want     time.Duration
	}{
		{10 * time.Second, 1, 10 * time.Second},
		{10 * time.Second, 20, 10 * time.Second}, // small networks keep the configured interval
		{200 * time.Millisecond, 20, 200 * time.Millisecond},
		{10 * time.Second, 21, 10500 * time.Millisecond}, // 21 nodes / 2 a second
		{10 * time.Second, 50, 25 * time.Second},
		{10 * time.Second, 100, 50 * time.Second},
		{10 * time.Second, 1000, time.Minute},    // at most a minute
		{30 * time.Second, 40, 30 * time.Second}, // never shorter than configured
		{5 * time.Minute, 1000, 5 * time.Minute},
	} {
		if got := heartbeatEvery(c.interval, c.nodes); got != c.want {
			t.Errorf("heartbeatEvery(%s, %d) = %s, want %s", c.interval, c.nodes, got, c.want)
		}
	}
}

func TestPeerTableHeard(t *testing.T) {
	tab := newPeerTable()
	now := time.Now()
	for i, age := range []time.Duration{0, time.Minute, peerForget + time.Second} {
		tab.update(&p2p.Heartbeat{Heartbeat: &pb.Heartbeat{}, ID: peer.ID(fmt.Sprintf("peer-%d", i))}, now.Add(-age))
	}
	if got := tab.heard(now); got != 2 {
		t.Errorf("heard %d peers, want 2 (the third is silent past peerForget)", got)
	}
}
