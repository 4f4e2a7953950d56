package doctor

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

func checkReachability(r p2p.ReachInfo) api.Check {
	detail := string(r.Reach)
	if r.Reason != "" {
		detail += ": " + r.Reason
	}
	switch r.Reach {
	case p2p.ReachPublic:
		return ok(CheckReachability, detail)
	case p2p.ReachPunchable:
		return ok(CheckReachability, detail+" (renters reach it through relays, then directly after hole punching)")
	case p2p.ReachRelayOnly:
		return warn(CheckReachability, detail,
			"forward a port to this machine, give it a public address, or use a NAT with endpoint-independent mapping: jobs need a direct connection")
	}
	if r.Reach == "" {
		detail = string(p2p.ReachUnknown)
	}
	return warn(CheckReachability, detail,
		"wait a minute for peers to dial back; if it stays unknown, check that --bootstrap names running public nodes")
}

// privateReach reports whether r says the node is behind NAT (a public
// verdict aside: AutoNAT v2 may confirm an address while v1 says private).
func privateReach(r p2p.ReachInfo) bool {
	return r.Reach == p2p.ReachPunchable || r.Reach == p2p.ReachRelayOnly || r.AutoNAT == "private"
}

func checkObserved(r p2p.ReachInfo) api.Check {
	if len(r.Observed) == 0 {
		return warn(CheckObserved, "no peer has reported a public address of this node",
			"connect to peers on public addresses (check --bootstrap); until one reports an address, the node cannot tell its NAT's mapping")
	}
	parts := make([]string, 0, len(r.Observed))
	for _, o := range r.Observed {
		parts = append(parts, fmt.Sprintf("%s (%d %s)", o.Addr, o.Observers, plural(o.Observers, "observer")))
	}
	return ok(CheckObserved, strings.Join(parts, ", "))
}

func checkRelays(r p2p.ReachInfo) api.Check {
	n := len(r.RelayAddrs)
	held := fmt.Sprintf("%d relay %s held", n, plural(n, "address"))
	if n > 0 {
		held += ": " + strings.Join(r.RelayAddrs, ", ")
	}
	switch {
	case r.Reach == p2p.ReachPublic:
		return ok(CheckRelays, held+" (not needed: the node is public)")
	case privateReach(r) && n == 0:
		return fail(CheckRelays, "behind NAT and no relay reservation held: no peer can reach this node",
			"bootstrap to public nodes that run the relay service")
	case n == 0:
		return ok(CheckRelays, "none held (needed only if the node turns out to be behind NAT)")
	}
	return ok(CheckRelays, held)
}

func checkPeers(n int) api.Check {
	if n == 0 {
		return fail(CheckPeers, "no connected peers", "check --bootstrap and that the firewall lets the listen port through")
	}
	return ok(CheckPeers, fmt.Sprintf("%d connected %s", n, plural(n, "peer")))
}

// checkNetwork names the network and the bootstrap list in use, and
// fails when a bootstrap peer is on another network (the node joined the
// wrong one, or none), warns when another peer is.
func checkNetwork(network, bootstrap string, wrong []p2p.WrongPeer) api.Check {
	detail := network + "; bootstrap: " + bootstrap
	if len(wrong) == 0 {
		return ok(CheckNetwork, detail)
	}
	parts := make([]string, 0, len(wrong))
	boot := ""
	for _, w := range wrong {
		parts = append(parts, w.String(network))
		if w.Bootstrap && boot == "" {
			boot = w.Network
		}
	}
	detail += "; " + strings.Join(parts, "; ")
	if boot != "" {
		return fail(CheckNetwork, detail,
			"give --bootstrap peers of network "+network+", or pass --network "+boot+" to join theirs")
	}
	return warn(CheckNetwork, detail,
		"nothing to do unless they should be on this network: nodes of other networks are dropped, and exchange no records with this one")
}

func checkGPUs(mode string, gpus []inventory.GPU, err error) api.Check {
	if err != nil {
		return fail(CheckGPUs, "GPU detection failed: "+err.Error(), "check the NVIDIA driver with nvidia-smi, or pass --gpus none to rent only")
	}
	switch mode {
	case inventory.ModeNone:
		return ok(CheckGPUs, "no GPUs offered (--gpus none): this node rents, it does not supply")
	case inventory.ModeSim:
		return ok(CheckGPUs, fmt.Sprintf("%d simulated %s (%s): for testing, renters see them as simulated", len(gpus), plural(len(gpus), "GPU"), gpuModels(gpus)))
	}
	if len(gpus) == 0 {
		return warn(CheckGPUs, "NVML found no GPUs (no NVIDIA library, no driver loaded, or no devices)",
			"install the NVIDIA driver and check nvidia-smi, or pass --gpus none to rent only")
	}
	detail := fmt.Sprintf("NVML: %d %s (%s)", len(gpus), plural(len(gpus), "GPU"), gpuModels(gpus))
	if d := gpus[0].DriverVersion; d != "" {
		detail += ", driver " + d
	}
	if c := gpus[0].CUDAVersion; c != "" {
		detail += ", CUDA " + c
	}
	return ok(CheckGPUs, detail)
}

// gpuModels lists the models of gpus with their counts, in first-seen
// order: "2×h100-sxm, 1×a100-80gb".
func gpuModels(gpus []inventory.GPU) string {
	var order []string
	count := map[string]int{}
	for _, g := range gpus {
		if count[g.Model] == 0 {
			order = append(order, g.Model)
		}
		count[g.Model]++
	}
	parts := make([]string, 0, len(order))
	for _, m := range order {
		parts = append(parts, fmt.Sprintf("%d×%s", count[m], m))
	}
	return strings.Join(parts, ", ")
}

func checkClockSkew(s SkewSummary) api.Check {
	if s.Samples == 0 {
		return warn(CheckClockSkew, "no heartbeats from peers yet: skew unknown",
			"wait for peers' heartbeats; if none arrive while peers are connected, this clock may be far off: enable NTP (chrony or systemd-timesyncd)")
	}
	abs := s.Median.Abs()
	detail := fmt.Sprintf("%s (median of %d %s from %d %s; peers' clocks %s)",
		abs.Round(time.Millisecond), s.Samples, plural(s.Samples, "heartbeat"), s.Peers, plural(s.Peers, "peer"), aheadOrBehind(s.Median))
	switch {
	case abs > p2p.ClockSkew:
		return fail(CheckClockSkew, detail+fmt.Sprintf("; beyond the %s peers allow, they reject this node's records", p2p.ClockSkew),
			"enable NTP (chrony or systemd-timesyncd) and check the time zone setting of the system clock")
	case abs > SkewWarn:
		return warn(CheckClockSkew, detail, "enable NTP (chrony or systemd-timesyncd)")
	}
	return ok(CheckClockSkew, detail)
}

func aheadOrBehind(d time.Duration) string {
	if d >= 0 {
		return "ahead of ours"
	}
	return "behind ours, or the delay of gossip"
}

func checkDisk(dataDir string, d DiskSpace) api.Check {
	if d.Err != nil {
		return fail(CheckDisk, fmt.Sprintf("cannot measure free space of %s: %v", dataDir, d.Err), "check that the data dir (--data) is on a mounted, readable file system")
	}
	where := dataDir
	if d.Path != dataDir {
		where = fmt.Sprintf("%s (not created yet; measured %s)", dataDir, d.Path)
	}
	detail := fmt.Sprintf("%s free in %s", bytesString(d.Free), where)
	switch {
	case d.Free < DiskFailBytes:
		return fail(CheckDisk, detail, fmt.Sprintf("free space, or move the data dir (--data) to a disk with at least %s free", bytesString(DiskWarnBytes)))
	case d.Free < DiskWarnBytes:
		return warn(CheckDisk, detail, fmt.Sprintf("free space to at least %s: job files and checkpoints need room", bytesString(DiskWarnBytes)))
	}
	return ok(CheckDisk, detail)
}

func bytesString(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d B", b)
}

// checkAPIBind judges the address the API listens on (or, without a
// node, is configured to): "" or "off" is no API.
func checkAPIBind(addr string) api.Check {
	if addr == "" || addr == "off" {
		return ok(CheckAPIBind, "the API is off")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fail(CheckAPIBind, fmt.Sprintf("%q is not HOST:PORT: %v", addr, err), "set --api to HOST:PORT, e.g. 127.0.0.1:7450")
	}
	if host == "localhost" {
		return ok(CheckAPIBind, addr+" (loopback)")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ok(CheckAPIBind, addr+" (loopback)")
	}
	return warn(CheckAPIBind, addr+" is reachable beyond this machine",
		"bind --api to 127.0.0.1, or firewall the port: the API needs its token, but should not be exposed")
}

func checkListen(addrs []string) api.Check {
	if len(addrs) == 0 {
		return fail(CheckListen, "libp2p listens on no address", "check --listen: each address must be free and local to this machine")
	}
	return ok(CheckListen, strings.Join(addrs, ", "))
}

// checkServices says whether this supplier's jobs may serve ports: only
// a job with a network of its own may (S18a), else it could reach the
// node's API and the machine's other services.
func checkServices(runsJobs bool, netErr error) api.Check {
	switch {
	case !runsJobs:
		return ok(CheckServices, "this node runs no jobs")
	case netErr == nil:
		return ok(CheckServices, "every job gets a network of its own: jobs may serve ports, which renters reach through tunnels")
	}
	return warn(CheckServices, "jobs share this machine's network, so jobs that serve ports are refused: "+netErr.Error(),
		"run the node as root on Linux with iproute2 and nftables, and job_network on")
}

// checkProver says whether the node's real GPUs can be proven: without a
// GPU prover their challenges are refused with no-prover, so no trusted
// challenger ever passes them, and renters, who lease from proven
// suppliers by default, do not lease them.
func checkProver(gpus []inventory.GPU, proverErr error, uvm bool) api.Check {
	real := 0
	for _, g := range gpus {
		if !g.Simulated {
			real++
		}
	}
	switch {
	case real == 0 && len(gpus) > 0:
		return ok(CheckProver, "simulated GPUs only: the CPU prover answers their challenges")
	case real == 0:
		return ok(CheckProver, "no GPUs to prove")
	case proverErr != nil:
		return warn(CheckProver, "renters will not lease these GPUs by default: no GPU prover ("+proverErr.Error()+"); challenges of them are refused with no-prover",
			"install the NVIDIA driver's CUDA library (libcuda.so.1; Debian: libcuda1 and libnvidia-ptxjitcompiler1), check it with make gpu-check, and restart the node")
	case !uvm:
		return warn(CheckProver, fmt.Sprintf("CUDA prover on %d %s, but /dev/nvidia-uvm is missing: renters' CUDA jobs will fail", real, plural(real, "GPU")),
			"load the nvidia-uvm module (nvidia-modprobe -u -c=0) and restart the node")
	}
	return ok(CheckProver, fmt.Sprintf("CUDA prover on %d %s: challenges of them run on the devices", real, plural(real, "GPU")))
}

// checkLocalClock is the clock check without peers: only whether the
// kernel says the clock is synchronised (synced is nil when it cannot
// tell).
func checkLocalClock(synced *bool) api.Check {
	const none = "no skew measured: that needs peers' heartbeats (no node is running)"
	switch {
	case synced == nil:
		return warn(CheckClockSkew, none+"; cannot tell whether the clock is synchronised",
			"run a node to measure skew against peers, and enable NTP (chrony or systemd-timesyncd)")
	case !*synced:
		return warn(CheckClockSkew, none+"; the kernel says the clock is not synchronised",
			"enable NTP (chrony or systemd-timesyncd)")
	}
	return ok(CheckClockSkew, none+"; the kernel says the clock is synchronised (NTP)")
}
