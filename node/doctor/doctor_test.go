package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	d := MeasureDisk(dir)
	if d.Err != nil || d.Path != dir || d.Free == 0 {
		t.Fatalf("MeasureDisk(%s) = %+v", dir, d)
	}
	missing := filepath.Join(dir, "not", "yet")
	if d := MeasureDisk(missing); d.Err != nil || d.Path != dir {
		t.Fatalf("MeasureDisk(%s) = %+v, want the free space of %s", missing, d, dir)
	}
	// A file where a directory should be is not a missing directory.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if d := MeasureDisk(filepath.Join(file, "sub")); d.Err == nil {
		t.Fatalf("MeasureDisk under a file = %+v, want an error", d)
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

// TestEvaluateOrder: a report lists every check once, in order.
func TestEvaluateOrder(t *testing.T) {
	got := Evaluate(Facts{})
	want := []string{CheckReachability, CheckObserved, CheckRelays, CheckPeers, CheckNetwork, CheckGPUs, CheckClockSkew, CheckDisk, CheckAPIBind, CheckListen, CheckServices, CheckProver}
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

// TestEvaluateOffline: without a node, the report fails on the node
// check, names the API address, and still checks GPUs, the clock, the
// disk of the data dir and the configured API bind.
func TestEvaluateOffline(t *testing.T) {
	yes := true
	f := OfflineFacts{
		APIAddr: "127.0.0.1:1", GPUMode: inventory.ModeSim, Network: "lab-1", BootstrapList: "configured (1 entry)",
		GPUs:        []inventory.GPU{{Model: "rtx4090", Simulated: true}, {Model: "rtx4090", Simulated: true}},
		ClockSynced: &yes, DataDir: "/data", Disk: DiskSpace{Path: "/data", Free: 100 << 30},
	}
	got := EvaluateOffline(f)
	names := []string{CheckNode, CheckNetwork, CheckGPUs, CheckClockSkew, CheckDisk, CheckAPIBind, CheckProver}
	if len(got) != len(names) {
		t.Fatalf("checks %+v, want %v", got, names)
	}
	wantCheck(t, got[0], CheckNode, api.StatusFail, "no node is running at 127.0.0.1:1", "gpumesh node")
	wantCheck(t, got[1], CheckNetwork, api.StatusOK, "lab-1; bootstrap: configured (1 entry)", "")
	wantCheck(t, got[2], CheckGPUs, api.StatusOK, "2 simulated GPUs", "")
	wantCheck(t, got[3], CheckClockSkew, api.StatusOK, "no skew measured", "")
	wantCheck(t, got[4], CheckDisk, api.StatusOK, "/data", "")
	wantCheck(t, got[5], CheckAPIBind, api.StatusOK, "loopback", "")
	wantCheck(t, got[6], CheckProver, api.StatusOK, "simulated GPUs only", "")

	f.APIAddr = "off"
	wantCheck(t, EvaluateOffline(f)[0], CheckNode, api.StatusFail, "the API is off", "--api")
}

func TestCheckProver(t *testing.T) {
	real := []inventory.GPU{{Model: "h100-sxm"}, {Model: "h100-sxm"}}
	sim := []inventory.GPU{{Model: "h100-sxm", Simulated: true}}
	for _, tt := range []struct {
		name          string
		gpus          []inventory.GPU
		err           error
		uvm           bool
		status, words string
	}{
		{"no gpus", nil, nil, false, api.StatusOK, "no GPUs to prove"},
		{"simulated", sim, nil, false, api.StatusOK, "CPU prover"},
		{"no prover", real, errors.New("cuda: no CUDA driver"), true, api.StatusWarn, "renters will not lease these GPUs by default: no GPU prover (cuda: no CUDA driver)"},
		{"no uvm", real, nil, false, api.StatusWarn, "/dev/nvidia-uvm is missing"},
		{"prover", real, nil, true, api.StatusOK, "CUDA prover on 2 GPUs"},
	} {
		c := checkProver(tt.gpus, tt.err, tt.uvm)
		if c.Name != CheckProver || c.Status != tt.status || !strings.Contains(c.Detail, tt.words) {
			t.Errorf("%s: %+v, want %s with %q", tt.name, c, tt.status, tt.words)
		}
	}
}

func TestCheckNetwork(t *testing.T) {
	wantCheck(t, checkNetwork("mainnet", "none (the first node of network mainnet)", nil), CheckNetwork, api.StatusOK, "mainnet; bootstrap: none", "")
	other := p2p.WrongPeer{Peer: "peerA", Network: "lab-1"}
	wantCheck(t, checkNetwork("mainnet", "configured (2 entries)", []p2p.WrongPeer{other}), CheckNetwork, api.StatusWarn,
		"is on network lab-1, this node is on mainnet", "dropped")
	boot := p2p.WrongPeer{Peer: "peerB", Network: "testnet-7", Bootstrap: true}
	wantCheck(t, checkNetwork("mainnet", "configured (1 entry)", []p2p.WrongPeer{boot, other}), CheckNetwork, api.StatusFail,
		"bootstrap peer "+boot.Peer.String()+" is on network testnet-7, this node is on mainnet", "--network testnet-7")
}
