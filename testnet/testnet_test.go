package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"

	"go.uber.org/goleak"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
)

// buildOnce builds the gpumesh binary once for all the tests in this run.
type buildOnce struct {
	once sync.Once
	path string
	err  error
}

var gpumesh buildOnce

// binary returns the path of a freshly built gpumesh binary, skipping the
// test under -short.
func binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real gpumesh processes; skipped with -short")
	}
	gpumesh.once.Do(func() {
		dir, err := os.MkdirTemp("", "testnet-bin-")
		if err != nil {
			gpumesh.err = err
			return
		}
		gpumesh.path = filepath.Join(dir, "gpumesh")
		out, err := exec.Command("go", "build", "-o", gpumesh.path, "github.com/gpumesh/gpumesh/cmd/gpumesh").CombinedOutput()
		if err != nil {
			gpumesh.err = errors.New(string(out))
		}
	})
	if gpumesh.err != nil {
		t.Fatalf("build gpumesh: %v", gpumesh.err)
	}
	return gpumesh.path
}

func TestMain(m *testing.M) {
	leakcheck.Main(m, goleak.Cleanup(func(int) {
		if gpumesh.path != "" {
			os.RemoveAll(filepath.Dir(gpumesh.path))
		}
	}))
}

// freeBase finds a base port below the ephemeral range whose ports for n
// nodes are all free.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(9000)
		if checkPorts(base, n) == nil {
			return base
		}
	}
	t.Fatal("no free base port found")
	return 0
}

// up starts an n-node testnet in a temporary directory and stops it when
// the test ends.
func up(t *testing.T, n int) (*State, string) {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	t.Cleanup(func() {
		if err := Down(dir); err != nil && !errors.Is(err, ErrNotRunning) {
			t.Errorf("Down: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	st, err := Up(ctx, Options{Binary: bin, Dir: dir, Nodes: n, Logger: testLogger(t)}) // kernel-chosen ports
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Logf("%d nodes up in %s", n, time.Since(start).Round(time.Millisecond))
	return st, dir
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func search(t *testing.T, st *State, filter ...string) []market.Offer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	offers, err := Search(ctx, st.Binary, st.Bootstrap, filter...)
	if err != nil {
		t.Fatalf("search %q: %v", filter, err)
	}
	return offers
}

// gone waits briefly for pid to disappear (its reaping may trail Down).
func gone(pid int) bool {
	for range 50 {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func TestUpSearchDown(t *testing.T) {
	st, dir := up(t, 3)

	type offer struct {
		model          string
		count, vramGiB int
		region         string
	}
	want := []offer{
		{"h100-sxm", 8, 80, "eu-west"},
		{"rtx4090", 2, 24, "us-east"},
		{"a100-80gb", 4, 80, "eu-west"},
	}
	offers := search(t, st)
	if len(offers) != len(want) {
		t.Errorf("search found %d offers, want %d: %+v", len(offers), len(want), offers)
	}
	for i, w := range want {
		n := st.Nodes[i]
		j := slices.IndexFunc(offers, func(o market.Offer) bool { return o.PeerID == n.PeerID })
		if j < 0 {
			t.Errorf("node %d (%s): not found by search", i, n.PeerID)
			continue
		}
		o := offers[j]
		got := offer{o.Model, o.Count, o.VRAMGiB, o.Region}
		if got != w || !o.Simulated {
			t.Errorf("node %d: offer %+v simulated=%t, want %+v simulated=true", i, got, o.Simulated, w)
		}
	}

	offers = search(t, st, "model=rtx4090")
	if len(offers) != 1 || offers[0].PeerID != st.Nodes[1].PeerID || offers[0].Model != "rtx4090" {
		t.Errorf("search model=rtx4090 = %+v, want only node 1 (%s)", offers, st.Nodes[1].PeerID)
	}

	cmd := exec.Command(st.Binary, append(append([]string{"search"}, st.BootstrapArgs()...), "vram>>80")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("search vram>>80: err = %v, want exit status 2", err)
	}
	if !strings.Contains(stderr.String(), "vram>>80") {
		t.Errorf("search vram>>80: stderr %q does not name the term", stderr.String())
	}

	// Rent as a light-client process with its own data dir: a dual-signed
	// lease from node 0 (the only H100 supplier), kept by both sides.
	renterDir := filepath.Join(t.TempDir(), "renter")
	// Nobody has challenged node 0 yet: it is unproven, so allowed
	// explicitly.
	rent := exec.Command(st.Binary, append([]string{"rent", "model=h100-sxm", "--count", "3", "--hours", "2", "--max-price", "3", "--allow-unproven", "--allow-simulated", "--json", "--data", renterDir}, st.BootstrapArgs()...)...)
	rent.Stderr = &stderr
	out, err := rent.Output()
	if err != nil {
		t.Fatalf("rent: %v\n%s", err, stderr.String())
	}
	var lease api.LeaseView
	if err := json.Unmarshal(out, &lease); err != nil {
		t.Fatalf("rent --json: %v\n%s", err, out)
	}
	if lease.Supplier != st.Nodes[0].PeerID || lease.Count != 3 || lease.Model != "h100-sxm" || lease.PriceMicros != 2_100_000 || !lease.Verified || len(lease.GPUs) != 3 || lease.End.Sub(lease.Start) != 2*time.Hour {
		t.Fatalf("rent --json = %+v", lease)
	}
	kept, err := exec.Command(st.Binary, "leases", "--json", "--data", renterDir, "--api", "127.0.0.1:1").Output()
	if err != nil || !strings.Contains(string(kept), lease.LeaseID) {
		t.Fatalf("renter's leases: %v\n%s", err, kept)
	}
	// The testnet's GPUs are simulated: without --allow-simulated a rent
	// leases none of them, and says so.
	simOut, err := exec.Command(st.Binary, append([]string{"rent", "model=h100-sxm", "--count", "1", "--max-price", "3", "--allow-unproven", "--json"}, st.BootstrapArgs()...)...).Output()
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(simOut), "only simulated ones, left out by default") {
		t.Fatalf("rent of simulated GPUs without --allow-simulated: err %v, output %s", err, simOut)
	}
	// Asking for more than anyone has fails with exit 1 and says why.
	fail := exec.Command(st.Binary, append([]string{"rent", "model=h100-sxm", "--count", "9", "--max-price", "3", "--allow-simulated", "--json"}, st.BootstrapArgs()...)...)
	out, err = fail.Output()
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), `"reasons"`) || !strings.Contains(string(out), "fully booked") {
		t.Fatalf("rent of 9: err %v, output %s", err, out)
	}

	status, err := Status(dir)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, s := range status {
		if !s.Alive || !s.Healthy || s.Peers < 1 || !s.Advertised {
			t.Errorf("node %d status = %+v, want alive, healthy, peers>=1, advertised", s.Index, s)
		}
	}

	if err := Down(dir); err != nil {
		t.Fatalf("Down: %v", err)
	}
	for _, n := range st.Nodes {
		if !gone(n.PID) {
			t.Errorf("node %d: pid %d still exists after Down", n.Index, n.PID)
		}
		if _, err := os.Stat(n.Log); err != nil {
			t.Errorf("node %d: log removed by Down: %v", n.Index, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state.json after Down: %v, want it removed", err)
	}
	if err := Down(dir); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Down = %v, want ErrNotRunning", err)
	}
}

func TestUpFailsWhenPortTaken(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	base := freeBase(t, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Up(t.Context(), Options{Binary: bin, Dir: dir, Nodes: 2, BasePort: base})
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(base)) || !strings.Contains(err.Error(), "node 0") {
		t.Fatalf("Up with port %d taken: err = %v, want ErrPortInUse naming node 0 and the port", base, err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state.json after a failed Up: %v, want none", err)
	}
}

// TestUpStopsNodesOnFailure runs node 1 through a wrapper that fails, and
// checks that Up names it, points at its log, and stops node 0.
func TestUpStopsNodesOnFailure(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "gpumesh-flaky")
	pids := filepath.Join(dir, "pids")
	script := "#!/bin/sh\ncase \"$*\" in *node-1*) echo 'boom: no GPUs today' >&2; exit 3;; esac\n" +
		"echo $$ >> " + pids + "\nexec " + bin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Up(t.Context(), Options{Binary: wrapper, Dir: dir, Nodes: 3, Logger: testLogger(t)})
	if err == nil {
		Down(dir)
		t.Fatal("Up succeeded with a failing node 1")
	}
	t.Logf("Up: %v", err)
	for _, want := range []string{"node 1", "exit status 3", filepath.Join(dir, "node-1.log"), "boom: no GPUs today"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Up error does not mention %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state.json after a failed Up: %v, want none", err)
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("node 0 never started: %v", err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if !gone(pid) {
			t.Errorf("pid %d still running after a failed Up", pid)
		}
	}
}

func TestRestartKeepsIdentity(t *testing.T) {
	st, dir := up(t, 3)
	old := st.Nodes[2]
	if err := syscall.Kill(old.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !gone(old.PID) {
		t.Fatalf("node 2: pid %d did not exit after SIGTERM", old.PID)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	restarted := time.Now()
	n, err := Restart(ctx, dir, 2)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("node 2 back in %s", time.Since(restarted).Round(time.Millisecond))
	if n.PeerID != old.PeerID {
		t.Errorf("restarted peer ID = %s, want %s", n.PeerID, old.PeerID)
	}
	if n.PID == old.PID {
		t.Errorf("restarted PID = %d, the old one", n.PID)
	}

	offers := search(t, st, "model=a100-80gb")
	j := slices.IndexFunc(offers, func(o market.Offer) bool { return o.PeerID == old.PeerID })
	if j < 0 {
		t.Fatalf("search after restart: node 2 (%s) not found in %+v", old.PeerID, offers)
	}
	if seen := offers[j].SeenAt; seen.Before(restarted.Add(-time.Second)) {
		t.Errorf("node 2's profile was issued %s, before the restart at %s: not re-advertised", seen, restarted)
	}

	saved, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Nodes[2].PID != n.PID {
		t.Errorf("state.json records pid %d for node 2, want %d", saved.Nodes[2].PID, n.PID)
	}
}

// The tests below need no processes.

func TestProfileFor(t *testing.T) {
	tests := []struct {
		i    int
		want Profile
	}{
		{0, Profile{"sim:h100-sxm:8", "eu-west", "fixed", map[string]money.Micros{"h100-sxm": 2_100_000}, ""}},
		{1, Profile{"sim:rtx4090:2", "us-east", "auction", map[string]money.Micros{"rtx4090": 450_000}, ""}},
		{4, Profile{"sim:h100-sxm:2,rtx4090:1", "us-east", "auction", map[string]money.Micros{"h100-sxm": 2_400_000, "rtx4090": 500_000}, "slow=3"}},
		{5, Profile{"sim:h100-sxm:8", "eu-west", "fixed", map[string]money.Micros{"h100-sxm": 2_150_000}, ""}},
	}
	for _, tt := range tests {
		if got := ProfileFor(tt.i); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ProfileFor(%d) = %+v, want %+v", tt.i, got, tt.want)
		}
	}
}

func TestPlan(t *testing.T) {
	o := Options{Dir: "/run", BasePort: 40100, HeartbeatInterval: 2 * time.Second, AuditInterval: 2 * time.Minute}
	n := plan(o, 3, []string{"/ip4/127.0.0.1/tcp/40100/p2p/A"}, nil)
	want := []string{
		"node", "--data", "/run/node-3", "--network", "testnet",
		"--listen", "/ip4/127.0.0.1/tcp/40103", "--listen", "/ip4/127.0.0.1/udp/40103/quic-v1",
		"--api", "127.0.0.1:41103", "--gpus", "sim:l40s:2", "--region", "ap-south",
		"--heartbeat-interval", "2s", "--log-level", "info",
		"--pricing", "fixed", "--audit-interval", "2m0s", "--job-network=false", "--price", "l40s=0.90",
		"--bootstrap", "/ip4/127.0.0.1/tcp/40100/p2p/A",
	}
	if !slices.Equal(n.Args, want) {
		t.Errorf("plan(3).Args =\n  %q\nwant\n  %q", n.Args, want)
	}
	if n.Log != "/run/node-3.log" || n.API != "127.0.0.1:41103" {
		t.Errorf("plan(3) = log %q api %q", n.Log, n.API)
	}
}

// TestPlanKernelPortsAndPin: without a base port a node asks for port 0
// everywhere; once it runs, its arguments are pinned to the ports it got,
// for a restart to ask for them again.
func TestPlanKernelPortsAndPin(t *testing.T) {
	n := plan(Options{Dir: "/run", HeartbeatInterval: time.Second, AuditInterval: time.Minute}, 1, nil, nil)
	if n.API != "127.0.0.1:0" || !slices.Contains(n.Args, "/ip4/127.0.0.1/tcp/0") || !slices.Contains(n.Args, "/ip4/127.0.0.1/udp/0/quic-v1") {
		t.Fatalf("kernel ports: api %q, args %q", n.API, n.Args)
	}
	n.API = "127.0.0.1:45001"
	pinPorts(&n, []string{
		"/ip4/127.0.0.1/udp/45003/quic-v1/webtransport/p2p/A",
		"/ip4/127.0.0.1/udp/45002/quic-v1/p2p/A",
		"/ip4/127.0.0.1/tcp/45004/ws/p2p/A",
		"/ip4/127.0.0.1/tcp/45005/p2p/A",
	})
	for _, want := range []string{"127.0.0.1:45001", "/ip4/127.0.0.1/tcp/45005", "/ip4/127.0.0.1/udp/45002/quic-v1"} {
		if !slices.Contains(n.Args, want) {
			t.Errorf("pinned args %q lack %q", n.Args, want)
		}
	}
}

func TestIsNodeCmdline(t *testing.T) {
	tests := []struct {
		argv []string
		want bool
	}{
		{[]string{"/bin/gpumesh", "node", "--data", "/run/node-0", "--api", "x"}, true},
		{[]string{"/bin/gpumesh", "node", "--data=/run/node-0"}, true},
		{[]string{"/bin/gpumesh", "node", "--data", "/run/node-1"}, false},
		{[]string{"/bin/gpumesh", "search", "--data", "/run/node-0"}, false},
		{[]string{"sleep", "100"}, false},
		{[]string{""}, false},
	}
	for _, tt := range tests {
		if got := isNodeCmdline(tt.argv, "/run/node-0"); got != tt.want {
			t.Errorf("isNodeCmdline(%q) = %t, want %t", tt.argv, got, tt.want)
		}
	}
}

func TestIsOursRejectsOtherProcesses(t *testing.T) {
	if isOurs(os.Getpid(), "/run/node-0") {
		t.Error("isOurs(the test process) = true")
	}
	if isOurs(0, "") || isOurs(-1, "") {
		t.Error("isOurs(non-positive pid) = true")
	}
}

// TestTestnetNeverUsesDefaultBootstrap: every testnet and NAT-lab node's
// configuration, as `gpumesh node` loads it from its arguments and the
// environment the testnet gives it, is on the testnet's own network, and
// the first node (no --bootstrap) gets no built-in bootstrap list; the
// commands the testnet runs are on its network too.
func TestTestnetNeverUsesDefaultBootstrap(t *testing.T) {
	o := Options{Dir: "/run", BasePort: 40100, HeartbeatInterval: 2 * time.Second, AuditInterval: 2 * time.Minute}
	childVars := map[string]string{}
	for _, kv := range childEnv() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "GPUMESH_") {
			childVars[k] = v
		}
	}
	for i, boot := range [][]string{nil, {"/ip4/127.0.0.1/tcp/40100/p2p/12D3KooWMD2urRgmT4JHgTz7XHd2ieUftbDqHFXqXqg1ReTvAktV"}} {
		args := plan(o, i, boot, nil).Args
		flags := map[string][]string{}
		for j := 1; j < len(args); j++ {
			name, val, eq := strings.Cut(strings.TrimPrefix(args[j], "--"), "=")
			if !eq {
				j++
				val = args[j]
			}
			key := strings.ReplaceAll(name, "-", "_")
			flags[key] = append(flags[key], val)
		}
		data := flags["data"][0]
		delete(flags, "data")
		for _, env := range []map[string]string{childVars, nil} {
			c, err := node.LoadConfig(node.Input{DataFlag: data, Flags: flags,
				Env:      func(k string) (string, bool) { v, ok := env[k]; return v, ok },
				ReadFile: func(string) ([]byte, error) { return nil, os.ErrNotExist }})
			if err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
			if c.Network != Network || c.DefaultBootstrap || len(c.BootstrapDNS) != 0 {
				t.Errorf("node %d: network %q, built-in bootstrap list %v (%v)", i, c.Network, c.DefaultBootstrap, c.BootstrapDNS)
			}
		}
	}
	if childVars["GPUMESH_NETWORK"] != Network {
		t.Errorf("the testnet's commands run with GPUMESH_NETWORK=%q", childVars["GPUMESH_NETWORK"])
	}
	st := &State{}
	if cmd := st.Command(context.Background(), "true"); !slices.Contains(cmd.Env, "GPUMESH_NETWORK="+Network) {
		t.Errorf("State.Command runs without GPUMESH_NETWORK=%s", Network)
	}
}
