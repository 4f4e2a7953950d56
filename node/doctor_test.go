package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/doctor"
)

// TestOfflineDoctor: without a node, the report of a node's config fails
// on the node check, names the configured API address, and still checks
// the config's GPUs and the disk of its data dir (the checks themselves
// are node/doctor's TestEvaluateOffline).
func TestOfflineDoctor(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, "sim:rtx4090:2", "eu-west", nil)
	cfg.API = "127.0.0.1:1"
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rep := OfflineDoctor(context.Background(), cfg, "seed", now)
	if !rep.Failed() || rep.Reach != nil || !rep.Time.Equal(now) {
		t.Fatalf("report %+v: want failed, without reach, at %s", rep, now)
	}
	want := []struct{ name, status, detail string }{
		{doctor.CheckNode, api.StatusFail, "no node is running at 127.0.0.1:1"},
		{doctor.CheckNetwork, api.StatusOK, "mainnet; bootstrap: none"},
		{doctor.CheckGPUs, api.StatusOK, "2 simulated GPUs"},
		{doctor.CheckClockSkew, "", "no skew measured"}, // this machine's NTP decides the status
		{doctor.CheckDisk, api.StatusOK, dir},
		{doctor.CheckAPIBind, api.StatusOK, "loopback"},
		{doctor.CheckProver, api.StatusOK, "simulated GPUs only"},
	}
	if len(rep.Checks) != len(want) {
		t.Fatalf("checks %+v, want %d", rep.Checks, len(want))
	}
	for i, w := range want {
		c := rep.Checks[i]
		if c.Name != w.name || (w.status != "" && c.Status != w.status) || !strings.Contains(c.Detail, w.detail) {
			t.Errorf("check %d is %s/%s %q, want %s/%s with %q", i, c.Name, c.Status, c.Detail, w.name, w.status, w.detail)
		}
	}

	cfg.API = "off"
	rep = OfflineDoctor(context.Background(), cfg, "seed", now)
	if c := rep.Checks[0]; c.Status != api.StatusFail || !strings.Contains(c.Detail, "the API is off") {
		t.Errorf("with the API off, node check %+v", c)
	}
}

// TestDoctorOverAPI runs two real nodes on loopback and asks the second's
// API for its doctor report: it has a peer, listens, binds the API to
// loopback, has disk, and measures clock skew from the first's
// heartbeats.
func TestDoctorOverAPI(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := startNode(t, testConfig(t, filepath.Join(root, "a"), "sim:rtx4090:1", "eu-west", nil))
	bDir := filepath.Join(root, "b")
	b := startNode(t, testConfig(t, bDir, "none", "eu-west", bootstrapOf(a)))

	c, err := api.ClientForDataDir(b.APIAddr(), bDir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var rep api.DoctorReport
	eventually(t, 20*time.Second, "skew samples from a's heartbeats", func() bool {
		rep, err = c.Doctor(context.Background())
		if err != nil {
			t.Fatalf("Doctor: %v", err)
		}
		skew, _ := rep.Check(doctor.CheckClockSkew)
		return skew.Status == api.StatusOK
	})
	if rep.PeerID != b.ID().String() || rep.Reach == nil || rep.Time.IsZero() {
		t.Fatalf("report of %s, reach %v, time %s", rep.PeerID, rep.Reach, rep.Time)
	}
	want := map[string]struct{ status, detail string }{
		doctor.CheckPeers:     {api.StatusOK, "1 connected peer"},
		doctor.CheckAPIBind:   {api.StatusOK, b.APIAddr() + " (loopback)"},
		doctor.CheckListen:    {api.StatusOK, "/ip4/127.0.0.1/tcp/"},
		doctor.CheckDisk:      {api.StatusOK, "free in " + bDir},
		doctor.CheckClockSkew: {api.StatusOK, "from 1 peer"},
		doctor.CheckGPUs:      {api.StatusOK, "--gpus none"},
		doctor.CheckServices:  {api.StatusOK, "runs no jobs"},
		// Loopback is no public address: AutoNAT has no verdict, and no
		// peer reports a public address.
		doctor.CheckReachability: {api.StatusWarn, "unknown"},
		doctor.CheckObserved:     {api.StatusWarn, "no peer"},
	}
	for name, w := range want {
		got, ok := rep.Check(name)
		if !ok {
			t.Errorf("no %s check in %+v", name, rep.Checks)
			continue
		}
		if got.Status != w.status || !strings.Contains(got.Detail, w.detail) {
			t.Errorf("%s: %s %q, want %s with %q", name, got.Status, got.Detail, w.status, w.detail)
		}
	}
	if rep.Failed() {
		t.Errorf("the report failed: %+v", rep.Checks)
	}
	if l, _ := rep.Check(doctor.CheckListen); strings.Contains(l.Detail, "p2p-circuit") {
		t.Errorf("listen check %q lists the relay transport", l.Detail)
	}

	// Alone, the first node's peers check fails once b is gone.
	b.Close()
	eventually(t, 10*time.Second, "a to see b leave", func() bool {
		p, _ := a.Doctor(context.Background()).Check(doctor.CheckPeers)
		return p.Status == api.StatusFail
	})
}
