package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/doctor"
)

// startTestNode runs a real node on loopback with its API on a free port.
func startTestNode(t *testing.T, dir, gpus string, bootstrap []string) *node.Node {
	t.Helper()
	cfg, err := node.LoadConfig(node.Input{DataFlag: dir, Flags: map[string][]string{
		"listen": {"/ip4/127.0.0.1/tcp/0"}, "api": {"127.0.0.1:0"}, "gpus": {gpus},
		"bootstrap": bootstrap, "heartbeat_interval": {"200ms"}, "bootstrap_timeout": {"5s"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := node.New(ctx, cfg, node.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestDoctorWithNode: `doctor --json` asks a running node and prints its
// report; `doctor` prints it as a table with the fixes; a node without
// peers fails its peers check, and the command exits 1.
func TestDoctorWithNode(t *testing.T) {
	root := t.TempDir()
	aDir, bDir := filepath.Join(root, "a"), filepath.Join(root, "b")
	a := startTestNode(t, aDir, "sim:rtx4090:1", nil)
	b := startTestNode(t, bDir, "none", []string{a.Addrs()[0].String()})

	code, out, stderr := gm(t, "doctor", "--data", bDir, "--api", b.APIAddr(), "--json")
	if code != 0 {
		t.Fatalf("doctor --json with a peer: exit %d, stderr %q, out %s", code, stderr, out)
	}
	var rep api.DoctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.PeerID != b.ID().String() || rep.Reach == nil {
		t.Fatalf("report of %q with reach %v, want node %s's with reach", rep.PeerID, rep.Reach, b.ID())
	}
	for name, status := range map[string]string{doctor.CheckPeers: api.StatusOK, doctor.CheckAPIBind: api.StatusOK, doctor.CheckListen: api.StatusOK, doctor.CheckDisk: api.StatusOK} {
		if c, ok := rep.Check(name); !ok || c.Status != status {
			t.Errorf("%s: %+v, want %s", name, c, status)
		}
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"peer_id", "checks", "reach", "time"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("doctor --json lacks %q", k)
		}
	}

	// Another data dir's token: the 401 is explained, not taken for a
	// missing node.
	other := t.TempDir()
	if _, err := api.EnsureToken(other); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = gm(t, "doctor", "--data", other, "--api", b.APIAddr())
	if code != 1 || !strings.Contains(stderr, "is not that node's; pass --data") {
		t.Fatalf("doctor with another token: exit %d, stderr %q", code, stderr)
	}

	code, out, _ = gm(t, "doctor", "--data", bDir, "--api", b.APIAddr())
	if code != 0 || !strings.HasPrefix(out, "STATUS") || !strings.Contains(out, "OK      peers") || !strings.Contains(out, "fix: ") {
		t.Fatalf("doctor: exit %d, output\n%s", code, out)
	}

	// The first node alone once b is gone: its peers check fails.
	b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, _ = gm(t, "doctor", "--data", aDir, "--api", a.APIAddr())
		if code == 1 && strings.Contains(out, "FAIL    peers") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("doctor of a lone node: exit %d, output\n%s", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out, "fix: check --bootstrap") {
		t.Errorf("the failed peers check has no fix:\n%s", out)
	}
}

// TestDoctorWithoutNode: with no node at the API address, doctor still
// checks GPUs, disk and the clock here, fails the node check, and exits 1,
// in text and in JSON.
func TestDoctorWithoutNode(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	code, out, stderr := gm(t, "doctor", "--data", data, "--api", "127.0.0.1:1", "--gpus", "sim:t4:2")
	if code != 1 || stderr != "" {
		t.Fatalf("doctor without a node: exit %d, stderr %q; want exit 1, silently", code, stderr)
	}
	for _, want := range []string{"FAIL    node", "no node is running at 127.0.0.1:1", "fix: start it with gpumesh node", "2 simulated GPUs", "no skew measured", "free in " + data} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = gm(t, "doctor", "--data", data, "--api", "127.0.0.1:1", "--gpus", "sim:t4:2", "--json")
	var rep api.DoctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	c, ok := rep.Check(doctor.CheckNode)
	if code != 1 || !ok || c.Status != api.StatusFail || !strings.Contains(c.Detail, "127.0.0.1:1") || rep.Reach != nil || !rep.Failed() {
		t.Fatalf("doctor --json without a node: exit %d, report %+v", code, rep)
	}
	if _, ok := rep.Check(doctor.CheckDisk); !ok {
		t.Errorf("no disk check without a node: %+v", rep.Checks)
	}

	code, out, stderr = gm(t, "doctor", "--data", data, "--api", "off")
	if code != 1 || stderr != "" || !strings.Contains(out, "the API is off") {
		t.Fatalf("doctor --api off: exit %d, stderr %q, output\n%s", code, stderr, out)
	}
}
