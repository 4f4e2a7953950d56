// Package doctor is the read model of `gpumesh doctor`: the checks of
// what a supplier needs, so that it learns it is unreachable (or short of
// disk, or off by seconds) before renters do. Each check is a pure function
// of facts the node (or, without a node, the CLI) gathers (Facts,
// OfflineFacts), so that its OK/WARN/FAIL boundaries are table-tested;
// MeasureDisk, KernelClockSynced and HasUVM gather the facts of this
// machine, and a SkewRing those of peers' clocks.
package doctor

import (
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// The names of the doctor's checks, in the order a report lists them.
const (
	CheckNode         = "node"
	CheckReachability = "reachability"
	CheckObserved     = "observed-addresses"
	CheckRelays       = "relay-reservations"
	CheckPeers        = "peers"
	CheckNetwork      = "network"
	CheckGPUs         = "gpus"
	CheckClockSkew    = "clock-skew"
	CheckDisk         = "disk"
	CheckAPIBind      = "api-bind"
	CheckListen       = "listen"
	CheckServices     = "services"
	CheckProver       = "gpu-prover"
)

// Thresholds of the disk and clock checks.
const (
	// DiskWarnBytes: below this much free space in the data dir the disk
	// check warns (checkpoints and job files need room).
	DiskWarnBytes = 5 << 30
	// DiskFailBytes: below this the store itself may fail to write.
	DiskFailBytes = 512 << 20
	// SkewWarn is the clock skew against peers the check warns at; above
	// p2p.ClockSkew, the window validators enforce, peers reject this
	// node's records and it fails.
	SkewWarn = 2 * time.Second
)

// Facts is what the checks are evaluated from.
type Facts struct {
	Reach p2p.ReachInfo
	Peers int // connected peers
	// Network is the node's network ID, BootstrapList which bootstrap
	// list it uses (node.Config.BootstrapList), and WrongPeers the peers
	// found on other networks.
	Network       string
	BootstrapList string
	WrongPeers    []p2p.WrongPeer
	Listen        []string // libp2p listen addresses
	APIAddr       string   // the API's address, "" when off
	GPUMode       string   // inventory.ModeAuto, ModeNone or ModeSim
	GPUs          []inventory.GPU
	GPUErr        error // GPU detection failed
	Skew          SkewSummary
	DataDir       string
	Disk          DiskSpace
	// RunsJobs: the node sells, so it runs renters' jobs; JobNetErr is
	// why those jobs share its network (nil: each has its own, so jobs
	// may serve ports).
	RunsJobs  bool
	JobNetErr error
	// ProverErr is why the node's real GPUs have no GPU prover (nil: they
	// have one, or there are none); UVM reports whether /dev/nvidia-uvm,
	// which CUDA jobs need, exists.
	ProverErr error
	UVM       bool
}

// DiskSpace is the free space of the file system that holds a directory.
type DiskSpace struct {
	Path string // the directory measured (the data dir, or its nearest existing parent)
	Free uint64 // bytes available to this user
	Err  error
}

// Evaluate runs every check of a running node on f, in report
// order.
func Evaluate(f Facts) []api.Check {
	return []api.Check{
		checkReachability(f.Reach),
		checkObserved(f.Reach),
		checkRelays(f.Reach),
		checkPeers(f.Peers),
		checkNetwork(f.Network, f.BootstrapList, f.WrongPeers),
		checkGPUs(f.GPUMode, f.GPUs, f.GPUErr),
		checkClockSkew(f.Skew),
		checkDisk(f.DataDir, f.Disk),
		checkAPIBind(f.APIAddr),
		checkListen(f.Listen),
		checkServices(f.RunsJobs, f.JobNetErr),
		checkProver(f.GPUs, f.ProverErr, f.UVM),
	}
}

// OfflineFacts is what the checks without a running node are evaluated
// from: the configured API address, GPUs, data dir and this machine.
type OfflineFacts struct {
	APIAddr string // the configured API address; "" or "off" is no API
	// Network and BootstrapList are the configured network and bootstrap
	// list (node.Config.BootstrapList).
	Network       string
	BootstrapList string
	GPUMode       string
	GPUs          []inventory.GPU
	GPUErr        error
	// ClockSynced is whether the kernel says the clock is synchronised;
	// nil when it cannot tell.
	ClockSynced *bool
	DataDir     string
	Disk        DiskSpace
	ProverErr   error
	UVM         bool
}

// EvaluateOffline runs the checks that need no node on f, in report
// order, led by a failed "node" check.
func EvaluateOffline(f OfflineFacts) []api.Check {
	var nodeCheck api.Check
	if f.APIAddr == "" || f.APIAddr == "off" {
		nodeCheck = fail(CheckNode, "the API is off, so no running node can be asked",
			"pass --api HOST:PORT of the running node, or start one with gpumesh node")
	} else {
		nodeCheck = fail(CheckNode, "no node is running at "+f.APIAddr, "start it with gpumesh node")
	}
	return []api.Check{
		nodeCheck,
		checkNetwork(f.Network, f.BootstrapList, nil),
		checkGPUs(f.GPUMode, f.GPUs, f.GPUErr),
		checkLocalClock(f.ClockSynced),
		checkDisk(f.DataDir, f.Disk),
		checkAPIBind(f.APIAddr),
		checkProver(f.GPUs, f.ProverErr, f.UVM),
	}
}

func ok(name, detail string) api.Check {
	return api.Check{Name: name, Status: api.StatusOK, Detail: detail}
}

func warn(name, detail, fix string) api.Check {
	return api.Check{Name: name, Status: api.StatusWarn, Detail: detail, Fix: fix}
}

func fail(name, detail, fix string) api.Check {
	return api.Check{Name: name, Status: api.StatusFail, Detail: detail, Fix: fix}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	if strings.HasSuffix(word, "s") {
		return word + "es"
	}
	return word + "s"
}
