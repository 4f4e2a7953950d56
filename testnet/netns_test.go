package testnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/testnet/netlab"
)

var testnetBin struct {
	once sync.Once
	path string
	err  error
}

// testnetBinary builds the testnet command (its hidden `wan` command runs
// the lab's WAN) next to the gpumesh binary, so TestMain removes both.
func testnetBinary(t testing.TB) string {
	t.Helper()
	dir := filepath.Dir(binary(t))
	testnetBin.once.Do(func() {
		testnetBin.path = filepath.Join(dir, "testnet")
		out, err := exec.Command("go", "build", "-o", testnetBin.path, "github.com/gpumesh/gpumesh/testnet/cmd/testnet").CombinedOutput()
		if err != nil {
			testnetBin.err = errors.New(string(out))
		}
	})
	if testnetBin.err != nil {
		t.Fatalf("build testnet: %v", testnetBin.err)
	}
	return testnetBin.path
}

func TestWithBootstrap(t *testing.T) {
	args := []string{"node", "--bootstrap", "/ip4/11.1.0.1/tcp/4001/p2p/A"}
	bs := []string{"/ip4/11.1.0.1/tcp/4001/p2p/A", "/ip4/11.1.0.2/tcp/4001/p2p/B", "/ip4/11.1.0.3/tcp/4001/p2p/C"}
	got := withBootstrap(args, bs, "C")
	want := []string{"node", "--bootstrap", "/ip4/11.1.0.1/tcp/4001/p2p/A", "--bootstrap", "/ip4/11.1.0.2/tcp/4001/p2p/B"}
	if !slices.Equal(got, want) {
		t.Errorf("withBootstrap = %q, want %q", got, want)
	}
	if len(args) != 3 {
		t.Errorf("args modified: %q", args)
	}
}

func labNamespaces(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var nss []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			nss = append(nss, f[0])
		}
	}
	return nss
}

// TestNetnsUpDown brings up 6 nodes in namespaces (2 public, 2 behind cone
// NATs, 2 behind symmetric NATs) and checks that each node's API answers
// through the lab's dialer, inside its own namespace, that nodes behind
// NAT see peers, and that Down removes the lab and the WAN process.
func TestNetnsUpDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real gpumesh processes in namespaces; skipped with -short")
	}
	if err := netlab.Check(); err != nil {
		testenv.Skip(t, testenv.Netlab, "%v", err)
	}
	bin, wanBin := binary(t), testnetBinary(t)
	dir := t.TempDir()
	prefix := fmt.Sprintf("tn%d", os.Getpid()%1000000)
	t.Cleanup(func() {
		if err := Down(dir); err != nil && !errors.Is(err, ErrNotRunning) {
			t.Errorf("Down: %v", err)
		}
		if err := CleanupNetns(prefix); err != nil {
			t.Errorf("CleanupNetns: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	start := time.Now()
	st, err := Up(ctx, Options{Binary: bin, Dir: dir, Nodes: 6, Netns: true, Prefix: prefix, WANBinary: wanBin, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Up --netns: %v", err)
	}
	t.Logf("6 nodes up in namespaces in %s", time.Since(start).Round(time.Millisecond))

	kinds := map[string]int{}
	for i, n := range st.Nodes {
		kinds[n.NAT]++
		if n.NS != prefix+"-n"+fmt.Sprint(i) {
			t.Errorf("node %d: namespace %q", i, n.NS)
		}
		if n.NAT == "public" {
			if !strings.HasPrefix(n.Addr, "/ip4/"+n.Public+"/tcp/4001/p2p/") || !strings.HasPrefix(n.Public, "11.") {
				t.Errorf("public node %d: addr %q public %q", i, n.Addr, n.Public)
			}
		}
	}
	if kinds["public"] != 2 || kinds["cone"] != 2 || kinds["symmetric"] != 2 {
		t.Errorf("kinds %v, want 2 of each", kinds)
	}
	if len(st.Bootstrap) != 4 {
		t.Errorf("bootstrap %q, want the 2 public nodes' tcp and quic-v1 addresses", st.Bootstrap)
	}
	if st.Netns == nil || !isWAN(st.Netns.WANPID, dir) {
		t.Fatalf("no WAN process running: %+v", st.Netns)
	}

	// Every API is 127.0.0.1:5001 in its own namespace: the lab's dialer
	// for host n<i> reaches node i and no other.
	statuses, err := Status(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range statuses {
		if !s.Healthy || s.Error != "" {
			t.Errorf("node %d (%s, %s): not healthy: %s", i, s.NS, s.NAT, s.Error)
		}
		if s.PeerID != st.Nodes[i].PeerID || s.NS != st.Nodes[i].NS || s.NAT != st.Nodes[i].NAT {
			t.Errorf("node %d: status %+v does not match state %+v", i, s, st.Nodes[i])
		}
		if s.NAT == "cone" && s.Peers < 1 {
			t.Errorf("node %d behind a cone NAT sees no peers", i)
		}
	}
	lab, err := st.Netns.attach()
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	h, err := getHealth(hctx, NetnsAPI, labDialer(lab, "n3"))
	hcancel()
	if err != nil || h.PeerID != st.Nodes[3].PeerID {
		t.Errorf("health through n3's namespace: %v, peer %s, want node 3 %s", err, h.PeerID, st.Nodes[3].PeerID)
	}

	// A second Up on the same lab is refused, and leaves it running.
	if _, err := Up(ctx, Options{Binary: bin, Dir: dir, Nodes: 6, Netns: true, Prefix: prefix, WANBinary: wanBin}); err == nil {
		t.Errorf("a second Up --netns in the same dir succeeded")
	}

	wanPID := st.Netns.WANPID
	if err := Down(dir); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if left := labNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left after Down: %v", left)
	}
	if !gone(wanPID) {
		t.Errorf("WAN process %d survived Down", wanPID)
	}
	for _, n := range st.Nodes {
		if !gone(n.PID) {
			t.Errorf("node %d (pid %d) survived Down", n.Index, n.PID)
		}
	}
}

func TestQUICAddr(t *testing.T) {
	got := quicAddr("/ip4/11.1.0.4/tcp/4001/p2p/12D3KooWCTjZBkP846BLwepswC1TVUXDAGKi7i3ouebeDA9WaKhw")
	if want := "/ip4/11.1.0.4/udp/4001/quic-v1/p2p/12D3KooWCTjZBkP846BLwepswC1TVUXDAGKi7i3ouebeDA9WaKhw"; got != want {
		t.Fatalf("quicAddr = %q, want %q", got, want)
	}
}
