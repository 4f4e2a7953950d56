package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// wantCheck fails t unless got has the name, status and the words wanted,
// and a fix exactly when it is not ok.
func wantCheck(t *testing.T, got api.Check, name, status, inDetail, inFix string) {
	t.Helper()
	if got.Name != name || got.Status != status {
		t.Fatalf("check %s/%s (%q), want %s/%s", got.Name, got.Status, got.Detail, name, status)
	}
	if !strings.Contains(got.Detail, inDetail) {
		t.Errorf("%s detail %q lacks %q", name, got.Detail, inDetail)
	}
	if (status == api.StatusOK) != (got.Fix == "") {
		t.Errorf("%s is %s with fix %q: a fix is for warn and fail only", name, status, got.Fix)
	}
	if !strings.Contains(got.Fix, inFix) {
		t.Errorf("%s fix %q lacks %q", name, got.Fix, inFix)
	}
}

func TestCheckReachability(t *testing.T) {
	tests := []struct {
		reach               p2p.Reach
		status, detail, fix string
	}{
		{p2p.ReachPublic, api.StatusOK, "public", ""},
		{p2p.ReachPunchable, api.StatusOK, "hole punching", ""},
		{p2p.ReachRelayOnly, api.StatusWarn, "relay-only", "forward a port"},
		{p2p.ReachUnknown, api.StatusWarn, "unknown", "--bootstrap"},
		{"", api.StatusWarn, "unknown", "--bootstrap"},
	}
	for _, tt := range tests {
		t.Run(string(tt.reach), func(t *testing.T) {
			got := checkReachability(p2p.ReachInfo{Reach: tt.reach, Reason: "because"})
			wantCheck(t, got, CheckReachability, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestCheckObserved(t *testing.T) {
	wantCheck(t, checkObserved(p2p.ReachInfo{}), CheckObserved, api.StatusWarn, "no peer", "--bootstrap")
	got := checkObserved(p2p.ReachInfo{Observed: []p2p.Observation{
		{Addr: "/ip4/198.51.100.7/tcp/4001", Observers: 3}, {Addr: "/ip4/198.51.100.7/udp/4001/quic-v1", Observers: 1},
	}})
	wantCheck(t, got, CheckObserved, api.StatusOK, "/ip4/198.51.100.7/tcp/4001 (3 observers), /ip4/198.51.100.7/udp/4001/quic-v1 (1 observer)", "")
}

func TestCheckRelays(t *testing.T) {
	relay := []string{"/ip4/198.51.100.1/tcp/4001/p2p/12D3KooWA/p2p-circuit"}
	tests := []struct {
		name                string
		info                p2p.ReachInfo
		status, detail, fix string
	}{
		{"public without relays", p2p.ReachInfo{Reach: p2p.ReachPublic, AutoNAT: "public"}, api.StatusOK, "not needed", ""},
		{"public by AutoNAT v2, private by v1", p2p.ReachInfo{Reach: p2p.ReachPublic, AutoNAT: "private", Reachable: []string{"/ip4/198.51.100.7/tcp/4001"}}, api.StatusOK, "not needed", ""},
		{"punchable without relays", p2p.ReachInfo{Reach: p2p.ReachPunchable}, api.StatusFail, "no relay reservation", "relay service"},
		{"relay-only without relays", p2p.ReachInfo{Reach: p2p.ReachRelayOnly}, api.StatusFail, "behind NAT", "relay service"},
		{"autonat private, verdict unknown", p2p.ReachInfo{Reach: p2p.ReachUnknown, AutoNAT: "private"}, api.StatusFail, "behind NAT", "relay service"},
		{"relay-only with a relay", p2p.ReachInfo{Reach: p2p.ReachRelayOnly, RelayAddrs: relay}, api.StatusOK, "1 relay address held: " + relay[0], ""},
		{"unknown without relays", p2p.ReachInfo{Reach: p2p.ReachUnknown}, api.StatusOK, "only if the node turns out to be behind NAT", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCheck(t, checkRelays(tt.info), CheckRelays, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestCheckPeers(t *testing.T) {
	wantCheck(t, checkPeers(0), CheckPeers, api.StatusFail, "no connected peers", "--bootstrap")
	wantCheck(t, checkPeers(1), CheckPeers, api.StatusOK, "1 connected peer", "")
	wantCheck(t, checkPeers(7), CheckPeers, api.StatusOK, "7 connected peers", "")
}

func TestCheckGPUs(t *testing.T) {
	real := []inventory.GPU{
		{Model: "h100-sxm", DriverVersion: "550.54.15", CUDAVersion: "12.4"},
		{Model: "h100-sxm", DriverVersion: "550.54.15", CUDAVersion: "12.4"},
		{Model: "a100-80gb", DriverVersion: "550.54.15", CUDAVersion: "12.4"},
	}
	sim := []inventory.GPU{{Model: "rtx4090", Simulated: true}}
	tests := []struct {
		name                string
		mode                string
		gpus                []inventory.GPU
		err                 error
		status, detail, fix string
	}{
		{"nvml with gpus", inventory.ModeAuto, real, nil, api.StatusOK, "NVML: 3 GPUs (2×h100-sxm, 1×a100-80gb), driver 550.54.15, CUDA 12.4", ""},
		{"nvml without gpus", inventory.ModeAuto, nil, nil, api.StatusWarn, "NVML found no GPUs", "install the NVIDIA driver"},
		{"detection failed", inventory.ModeAuto, nil, errors.New("nvml: init: ERROR_UNKNOWN"), api.StatusFail, "ERROR_UNKNOWN", "nvidia-smi"},
		{"simulated", inventory.ModeSim, sim, nil, api.StatusOK, "1 simulated GPU (1×rtx4090)", ""},
		{"none by choice", inventory.ModeNone, nil, nil, api.StatusOK, "rents, it does not supply", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCheck(t, checkGPUs(tt.mode, tt.gpus, tt.err), CheckGPUs, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestCheckClockSkew(t *testing.T) {
	tests := []struct {
		name                string
		s                   SkewSummary
		status, detail, fix string
	}{
		{"no samples", SkewSummary{}, api.StatusWarn, "skew unknown", "NTP"},
		{"small", SkewSummary{Median: 150 * time.Millisecond, Samples: 12, Peers: 3}, api.StatusOK, "150ms (median of 12 heartbeats from 3 peers", ""},
		{"at the warn limit", SkewSummary{Median: -SkewWarn, Samples: 1, Peers: 1}, api.StatusOK, "2s (median of 1 heartbeat from 1 peer; peers' clocks behind ours, or the delay of gossip)", ""},
		{"above the warn limit", SkewSummary{Median: SkewWarn + time.Millisecond, Samples: 4, Peers: 2}, api.StatusWarn, "2.001s", "NTP"},
		{"behind, above the warn limit", SkewSummary{Median: -5 * time.Second, Samples: 4, Peers: 2}, api.StatusWarn, "behind ours", "NTP"},
		{"at the validators' window", SkewSummary{Median: p2p.ClockSkew, Samples: 4, Peers: 2}, api.StatusWarn, "30s", "NTP"},
		{"beyond the validators' window", SkewSummary{Median: -p2p.ClockSkew - time.Second, Samples: 4, Peers: 2}, api.StatusFail, "they reject this node's records", "NTP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCheck(t, checkClockSkew(tt.s), CheckClockSkew, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestCheckDisk(t *testing.T) {
	tests := []struct {
		name                string
		d                   DiskSpace
		status, detail, fix string
	}{
		{"plenty", DiskSpace{Path: "/data", Free: 100 << 30}, api.StatusOK, "100.0 GiB free in /data", ""},
		{"at the warn limit", DiskSpace{Path: "/data", Free: DiskWarnBytes}, api.StatusOK, "5.0 GiB", ""},
		{"below the warn limit", DiskSpace{Path: "/data", Free: DiskWarnBytes - 1}, api.StatusWarn, "free in /data", "at least 5.0 GiB"},
		{"at the fail limit", DiskSpace{Path: "/data", Free: DiskFailBytes}, api.StatusWarn, "512.0 MiB", "at least"},
		{"below the fail limit", DiskSpace{Path: "/data", Free: DiskFailBytes - 1}, api.StatusFail, "free in /data", "move the data dir"},
		{"empty", DiskSpace{Path: "/data", Free: 0}, api.StatusFail, "0 B", "move the data dir"},
		{"not created yet", DiskSpace{Path: "/", Free: 100 << 30}, api.StatusOK, "/data (not created yet; measured /)", ""},
		{"statfs failed", DiskSpace{Path: "/data", Err: errors.New("permission denied")}, api.StatusFail, "permission denied", "--data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCheck(t, checkDisk("/data", tt.d), CheckDisk, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestMeasureDisk(t *testing.T) {
	dir := t.TempDir()
	d := measureDisk(dir)
	if d.Err != nil || d.Path != dir || d.Free == 0 {
		t.Fatalf("measureDisk(%s) = %+v", dir, d)
	}
	missing := filepath.Join(dir, "not", "yet")
	if d := measureDisk(missing); d.Err != nil || d.Path != dir {
		t.Fatalf("measureDisk(%s) = %+v, want the free space of %s", missing, d, dir)
	}
	// A file where a directory should be is not a missing directory.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if d := measureDisk(filepath.Join(file, "sub")); d.Err == nil {
		t.Fatalf("measureDisk under a file = %+v, want an error", d)
	}
}

func TestCheckAPIBind(t *testing.T) {
	tests := []struct {
		addr                string
		status, detail, fix string
	}{
		{"127.0.0.1:7450", api.StatusOK, "loopback", ""},
		{"[::1]:7450", api.StatusOK, "loopback", ""},
		{"localhost:7450", api.StatusOK, "loopback", ""},
		{"off", api.StatusOK, "off", ""},
		{"", api.StatusOK, "off", ""},
		{"0.0.0.0:7450", api.StatusWarn, "beyond this machine", "127.0.0.1"},
		{"[::]:7450", api.StatusWarn, "beyond this machine", "127.0.0.1"},
		{"192.0.2.10:7450", api.StatusWarn, "beyond this machine", "firewall"},
		{"7450", api.StatusFail, "not HOST:PORT", "--api"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			wantCheck(t, checkAPIBind(tt.addr), CheckAPIBind, tt.status, tt.detail, tt.fix)
		})
	}
}

func TestCheckListen(t *testing.T) {
	wantCheck(t, checkListen(nil), CheckListen, api.StatusFail, "no address", "--listen")
	wantCheck(t, checkListen([]string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"}), CheckListen, api.StatusOK, "/ip4/127.0.0.1/tcp/4001, /ip4/127.0.0.1/udp/4001/quic-v1", "")
}

func TestCheckLocalClock(t *testing.T) {
	yes, no := true, false
	wantCheck(t, checkLocalClock(&yes), CheckClockSkew, api.StatusOK, "synchronised (NTP)", "")
	wantCheck(t, checkLocalClock(&no), CheckClockSkew, api.StatusWarn, "not synchronised", "NTP")
	wantCheck(t, checkLocalClock(nil), CheckClockSkew, api.StatusWarn, "cannot tell", "NTP")
}

func TestCheckServices(t *testing.T) {
	wantCheck(t, checkServices(false, errors.New("x")), CheckServices, api.StatusOK, "runs no jobs", "")
	wantCheck(t, checkServices(true, nil), CheckServices, api.StatusOK, "network of its own", "")
	wantCheck(t, checkServices(true, errors.New("job networks need root")), CheckServices, api.StatusWarn, "refused: job networks need root", "nftables")
}

// TestEvaluateDoctorOrder: a report lists every check once, in order.
func TestEvaluateDoctorOrder(t *testing.T) {
	got := EvaluateDoctor(DoctorFacts{})
	want := []string{CheckReachability, CheckObserved, CheckRelays, CheckPeers, CheckGPUs, CheckClockSkew, CheckDisk, CheckAPIBind, CheckListen, CheckServices, CheckProver}
	if len(got) != len(want) {
		t.Fatalf("%d checks, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i] {
			t.Errorf("check %d is %s, want %s", i, got[i].Name, want[i])
		}
	}
	// Empty facts: no peers, no listen address, an unmeasured disk.
	if !(api.DoctorReport{Checks: got}).Failed() {
		t.Errorf("a report of empty facts did not fail: %+v", got)
	}
}

func TestSkewRing(t *testing.T) {
	ids := []peer.ID{"peer-a", "peer-b", "peer-c"}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var r skewRing
	if s := r.summary(now); s != (SkewSummary{}) {
		t.Fatalf("empty ring: %+v", s)
	}
	// peer-a: its clock 3 s ahead; peer-b: 1 s behind; peer-c: 10 s
	// ahead, but only in an old sample.
	r.add(ids[2], now.Add(-20*time.Minute+10*time.Second), now.Add(-20*time.Minute))
	r.add(ids[0], now.Add(-time.Minute+3*time.Second), now.Add(-time.Minute))
	r.add(ids[1], now.Add(-time.Minute-time.Second), now.Add(-time.Minute))
	if s := r.summary(now); s.Samples != 2 || s.Peers != 2 || s.Median != time.Second {
		t.Fatalf("two peers: %+v, want the median 1s of 3s and -1s, 2 samples of 2 peers", s)
	}
	// A chatty peer counts once, with its latest sample.
	for i := range 20 {
		at := now.Add(-30*time.Second + time.Duration(i)*time.Second)
		r.add(ids[1], at.Add(-2*time.Second), at)
	}
	if s := r.summary(now); s.Samples != 22 || s.Peers != 2 || s.Median != 500*time.Millisecond {
		t.Fatalf("chatty peer: %+v, want the median 0.5s of 3s and -2s, 22 samples of 2 peers", s)
	}
	// The ring is bounded: old samples fall out.
	for range 2 * skewRingSize {
		r.add(ids[2], now, now)
	}
	if s := r.summary(now); s.Samples != skewRingSize || s.Peers != 1 || s.Median != 0 {
		t.Fatalf("after a flood: %+v, want %d samples of peer-c only", s, skewRingSize)
	}
}

// TestOfflineDoctor: without a node, the report fails on the node check,
// names the API address, and still checks GPUs, the clock, the disk of
// the data dir and the configured API bind.
func TestOfflineDoctor(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, "sim:rtx4090:2", "eu-west", nil)
	cfg.API = "127.0.0.1:1"
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rep := OfflineDoctor(context.Background(), cfg, "seed", now)
	if !rep.Failed() || rep.Reach != nil || !rep.Time.Equal(now) {
		t.Fatalf("report %+v: want failed, without reach, at %s", rep, now)
	}
	names := []string{CheckNode, CheckGPUs, CheckClockSkew, CheckDisk, CheckAPIBind, CheckProver}
	if len(rep.Checks) != len(names) {
		t.Fatalf("checks %+v, want %v", rep.Checks, names)
	}
	for i, name := range names {
		if rep.Checks[i].Name != name {
			t.Errorf("check %d is %s, want %s", i, rep.Checks[i].Name, name)
		}
	}
	wantCheck(t, rep.Checks[0], CheckNode, api.StatusFail, "no node is running at 127.0.0.1:1", "gpumesh node")
	wantCheck(t, rep.Checks[1], CheckGPUs, api.StatusOK, "2 simulated GPUs", "")
	if c := rep.Checks[2]; !strings.Contains(c.Detail, "no skew measured") {
		t.Errorf("clock check %+v does not say skew needs peers", c)
	}
	wantCheck(t, rep.Checks[3], CheckDisk, api.StatusOK, dir, "")
	wantCheck(t, rep.Checks[4], CheckAPIBind, api.StatusOK, "loopback", "")

	cfg.API = "off"
	rep = OfflineDoctor(context.Background(), cfg, "seed", now)
	wantCheck(t, rep.Checks[0], CheckNode, api.StatusFail, "the API is off", "--api")
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
		skew, _ := rep.Check(CheckClockSkew)
		return skew.Status == api.StatusOK
	})
	if rep.PeerID != b.ID().String() || rep.Reach == nil || rep.Time.IsZero() {
		t.Fatalf("report of %s, reach %v, time %s", rep.PeerID, rep.Reach, rep.Time)
	}
	want := map[string]struct{ status, detail string }{
		CheckPeers:     {api.StatusOK, "1 connected peer"},
		CheckAPIBind:   {api.StatusOK, b.APIAddr() + " (loopback)"},
		CheckListen:    {api.StatusOK, "/ip4/127.0.0.1/tcp/"},
		CheckDisk:      {api.StatusOK, "free in " + bDir},
		CheckClockSkew: {api.StatusOK, "from 1 peer"},
		CheckGPUs:      {api.StatusOK, "--gpus none"},
		CheckServices:  {api.StatusOK, "runs no jobs"},
		// Loopback is no public address: AutoNAT has no verdict, and no
		// peer reports a public address.
		CheckReachability: {api.StatusWarn, "unknown"},
		CheckObserved:     {api.StatusWarn, "no peer"},
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
	if l, _ := rep.Check(CheckListen); strings.Contains(l.Detail, "p2p-circuit") {
		t.Errorf("listen check %q lists the relay transport", l.Detail)
	}

	// Alone, the first node's peers check fails once b is gone.
	b.Close()
	eventually(t, 10*time.Second, "a to see b leave", func() bool {
		p, _ := a.Doctor(context.Background()).Check(CheckPeers)
		return p.Status == api.StatusFail
	})
}
