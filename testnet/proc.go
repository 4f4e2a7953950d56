package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
)

// ErrPortInUse means a port a testnet node needs is taken.
var ErrPortInUse = errors.New("port in use")

// proc is a node process started by this process. done is closed once the
// process has exited and been reaped; waitErr is valid after that.
type proc struct {
	info    NodeInfo
	started time.Time
	done    chan struct{}
	waitErr error
	last    error        // why the node is not ready yet
	dial    api.DialFunc // reaches the node's API (nil: loopback)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) exitError() error {
	status := "with status 0"
	if p.waitErr != nil {
		status = p.waitErr.Error()
	}
	return fmt.Errorf("testnet: %s exited (%s); see %s%s", p.info.name(), status, p.info.Log, logTail(p.info.Log, 3))
}

// startNode runs `binary node ...` for info in its own process group, with
// stdout and stderr going to info.Log (truncated, or appended to when
// appendLog is set). The child outlives this process.
func startNode(binary string, info NodeInfo, appendLog bool) (*proc, error) {
	if err := os.MkdirAll(info.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("testnet: %s: %w", info.name(), err)
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logf, err := os.OpenFile(info.Log, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testnet: %s: log: %w", info.name(), err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "# testnet %s: %s %s\n", time.Now().UTC().Format(time.RFC3339), binary, strings.Join(info.Args, " "))

	// A node asked for a kernel-chosen API port writes the one it got;
	// an old file must not be read for it.
	_ = os.Remove(filepath.Join(info.DataDir, api.AddrFile))
	cmd := exec.Command(binary, info.Args...)
	if info.NS != "" {
		// ip netns exec execs the binary: the PID is the node's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", info.NS, binary}, info.Args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testnet: %s: start %s: %w", info.name(), binary, err)
	}
	info.PID, info.Started = cmd.Process.Pid, time.Now()
	p := &proc{info: info, started: info.Started, done: make(chan struct{})}
	// Reap the child whenever it exits, so that it does not linger as a
	// zombie while this process runs (tests start and stop many nodes).
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// childEnv is this process's environment without GPUMESH_* settings, so
// that a user's own node configuration does not leak into the testnet,
// and with the testnet's network (GPUMESH_NETWORK).
func childEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GPUMESH_") })
	return append(env, "GPUMESH_NETWORK="+Network)
}

// isOurs reports whether pid is alive (not a zombie) and still runs
// `gpumesh node` with dataDir, judged by /proc/PID/cmdline.
func isOurs(pid int, dataDir string) bool {
	if pid <= 0 || !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return isNodeCmdline(strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), dataDir)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state field follows the command name, which ends at the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// isNodeCmdline reports whether argv runs the node subcommand with
// --data dataDir.
func isNodeCmdline(argv []string, dataDir string) bool {
	if len(argv) < 2 || argv[1] != "node" {
		return false
	}
	for i, a := range argv {
		if a == "--data="+dataDir || (a == "--data" && i+1 < len(argv) && argv[i+1] == dataDir) {
			return true
		}
	}
	return false
}

// liveNodes returns the nodes whose recorded process is still ours.
func liveNodes(nodes []NodeInfo) []NodeInfo {
	var live []NodeInfo
	for _, n := range nodes {
		if isOurs(n.PID, n.DataDir) {
			live = append(live, n)
		}
	}
	return live
}

// stopNodes sends SIGTERM to each node still ours, waits up to grace for
// them to exit, then sends SIGKILL to the survivors. Only the recorded
// PIDs are signalled, never their process groups.
func stopNodes(nodes []NodeInfo, grace time.Duration) error {
	signal := func(sig syscall.Signal) {
		for _, n := range liveNodes(nodes) {
			_ = syscall.Kill(n.PID, sig)
		}
	}
	waitGone := func(d time.Duration) []NodeInfo {
		deadline := time.Now().Add(d)
		for {
			live := liveNodes(nodes)
			if len(live) == 0 || time.Now().After(deadline) {
				return live
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	signal(syscall.SIGTERM)
	if len(waitGone(grace)) == 0 {
		return nil
	}
	signal(syscall.SIGKILL)
	var errs []error
	for _, n := range waitGone(3 * time.Second) {
		errs = append(errs, fmt.Errorf("testnet: %s survived SIGKILL", n.name()))
	}
	return errors.Join(errs...)
}

// checkPorts fails with ErrPortInUse unless every port of nodes 0..n-1 is
// free on 127.0.0.1.
func checkPorts(base, n int) error {
	for i := range n {
		if err := checkNodePorts(base, i); err != nil {
			return err
		}
	}
	return nil
}

func checkNodePorts(base, i int) error {
	type port struct {
		network, what string
		n             int
	}
	for _, p := range []port{{"tcp", "libp2p", base + i}, {"udp", "libp2p quic", base + i}, {"tcp", "api", base + APIPortOffset + i}} {
		addr := "127.0.0.1:" + strconv.Itoa(p.n)
		var c io.Closer
		var err error
		if p.network == "udp" {
			c, err = net.ListenPacket("udp", addr)
		} else {
			c, err = net.Listen("tcp", addr)
		}
		if err != nil {
			return fmt.Errorf("testnet: node %d: %s port %d/%s: %w (%w); pick another --base-port, or stop what holds it (`testnet down` if it is an old testnet)", i, p.what, p.n, p.network, ErrPortInUse, err)
		}
		c.Close()
	}
	return nil
}

// getHealth asks the node API at addr (host:port) for /healthz, through dial
// when it is not nil (a lab's in-namespace dialer).
func getHealth(ctx context.Context, addr string, dial api.DialFunc) (api.Health, error) {
	var opts []api.ClientOption
	if dial != nil {
		opts = append(opts, api.WithDialer(dial))
	}
	c := api.NewClient(addr, "", opts...)
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		return h, fmt.Errorf("healthz: %w", err)
	}
	return h, nil
}

// condition is what waitFor waits for in a node's /healthz.
type condition func(api.Health) error

// answers is met once /healthz answers at all.
func answers(api.Health) error { return nil }

// ready is met once the node has a peer and has advertised its profile.
func ready(h api.Health) error {
	switch {
	case h.Peers < 1:
		return errors.New("no peers yet")
	case !h.Advertised:
		return errors.New("profile not advertised yet")
	}
	return nil
}

// waitFor polls each node's /healthz until cond holds for all of them,
// filling in their peer IDs and addresses on the way. It fails at once
// when a node exits, and names the first node not ready when ctx ends.
func waitFor(ctx context.Context, procs []*proc, cond condition) error {
	start := time.Now()
	pending := slices.Clone(procs)
	for {
		pending = slices.DeleteFunc(pending, func(p *proc) bool {
			if p.exited() {
				return false
			}
			if strings.HasSuffix(p.info.API, ":0") {
				b, err := os.ReadFile(filepath.Join(p.info.DataDir, api.AddrFile))
				if err != nil {
					p.last = fmt.Errorf("the API has not said where it listens yet: %w", err)
					return false
				}
				if p.info.API = strings.TrimSpace(string(b)); p.info.API == "" {
					p.info.API = "127.0.0.1:0"
					p.last = errors.New("the API has not said where it listens yet")
					return false
				}
			}
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			h, err := getHealth(hctx, p.info.API, p.dial)
			if err != nil {
				p.last = err
				return false
			}
			p.info.PeerID = h.PeerID
			if p.info.Addr, err = tcpAddr(h.Addrs, p.info.Public); err != nil {
				p.last = err
				return false
			}
			pinPorts(&p.info, h.Addrs)
			p.last = cond(h)
			return p.last == nil
		})
		for _, p := range pending {
			if p.exited() {
				return p.exitError()
			}
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			p := pending[0]
			return fmt.Errorf("testnet: %s: %s: %v; see %s%s", p.info.name(), gaveUp(ctx, start, "not ready"), p.last, p.info.Log, logTail(p.info.Log, 3))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pinPorts rewrites a node's arguments that asked for kernel-chosen ports
// (--api 127.0.0.1:0, --listen …/tcp/0 and …/udp/0/quic-v1) to the ports
// it got, so that a restart asks for the same ones and its peers' records
// of it stay true.
func pinPorts(info *NodeInfo, addrs []string) {
	for i := 0; i+1 < len(info.Args); i++ {
		arg := info.Args[i+1]
		switch {
		case info.Args[i] == "--api" && strings.HasSuffix(arg, ":0"):
			info.Args[i+1] = info.API
		case info.Args[i] == "--listen":
			for _, suffix := range []string{"/tcp/0", "/udp/0/quic-v1"} {
				if !strings.HasSuffix(arg, suffix) {
					continue
				}
				// "/ip4/127.0.0.1/udp/" + port + "/quic-v1"
				prefix := strings.TrimSuffix(arg, suffix) + suffix[:4] + "/"
				after := suffix[6:]
				// Only the plain transport: not …/ws, not …/quic-v1/webtransport.
				tail := strings.TrimPrefix(after+"/p2p/", "/")
				for _, a := range addrs {
					port, rest, _ := strings.Cut(strings.TrimPrefix(a, prefix), "/")
					if _, err := strconv.Atoi(port); err == nil && strings.HasPrefix(a, prefix) && (rest+"/" == tail[:len(tail)-4] || strings.HasPrefix(rest, tail)) {
						info.Args[i+1] = prefix + port + after
						break
					}
				}
			}
		}
	}
}

// gaveUp says why a wait that began at start ended with ctx.
func gaveUp(ctx context.Context, start time.Time, what string) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("%s after %s (raise the timeout?)", what, time.Since(start).Round(time.Second))
	}
	return fmt.Sprintf("interrupted (%s)", what)
}

// tcpAddr picks the tcp multiaddr with /p2p/ from a node's addresses, on
// the IP address prefer when there is one.
func tcpAddr(addrs []string, prefer string) (string, error) {
	if prefer != "" {
		for _, a := range addrs {
			if strings.HasPrefix(a, "/ip4/"+prefer+"/tcp/") && strings.Contains(a, "/p2p/") {
				return a, nil
			}
		}
		return "", fmt.Errorf("healthz lists no tcp address on %s among %q", prefer, addrs)
	}
	for _, a := range addrs {
		if strings.Contains(a, "/tcp/") && strings.Contains(a, "/p2p/") {
			return a, nil
		}
	}
	return "", fmt.Errorf("healthz lists no tcp address among %q", addrs)
}

// waitSearch runs light-client searches (in namespace ns, unless ""),
// backing off, until each node has an offer whose profile was issued after
// the node started.
func waitSearch(ctx context.Context, ns, binary string, bootstrap []string, procs []*proc) error {
	start := time.Now()
	backoff := 500 * time.Millisecond
	var missing []*proc
	var lastErr error
	for {
		offers, err := searchIn(ctx, ns, binary, bootstrap)
		lastErr = err
		missing = slices.DeleteFunc(slices.Clone(procs), func(p *proc) bool {
			return slices.ContainsFunc(offers, func(o market.Offer) bool {
				// A profile is stamped by its node's clock, which may be
				// set off on purpose (--clock-offset).
				return o.PeerID == p.info.PeerID && !o.SeenAt.Before(p.started.Add(clockOffset(p.info.Args)-time.Second))
			})
		})
		for _, p := range procs {
			if p.exited() {
				return p.exitError()
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			p := missing[0]
			why := "it is not among the offers"
			if lastErr != nil {
				why = "last search: " + lastErr.Error()
			}
			return fmt.Errorf("testnet: %s: %s (%s); see %s%s", p.info.name(), gaveUp(ctx, start, "a light client's search has not found its fresh profile"), why, p.info.Log, logTail(p.info.Log, 3))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 4*time.Second)
	}
}

// clockOffset is the --clock-offset among a node's arguments, or 0.
func clockOffset(args []string) time.Duration {
	for i, a := range args {
		if a == "--clock-offset" && i+1 < len(args) {
			d, _ := time.ParseDuration(args[i+1])
			return d
		}
	}
	return 0
}

// Search runs `binary search --json` as a light client joining through
// bootstrap, with the given filter terms, and returns the offers.
func Search(ctx context.Context, binary string, bootstrap []string, filter ...string) ([]market.Offer, error) {
	return searchIn(ctx, "", binary, bootstrap, filter...)
}

// searchIn is Search run inside namespace ns (none when "").
func searchIn(ctx context.Context, ns, binary string, bootstrap []string, filter ...string) ([]market.Offer, error) {
	args := []string{"search", "--allow-simulated", "--json"}
	for _, b := range bootstrap {
		args = append(args, "--bootstrap", b)
	}
	args = append(args, filter...)
	cmd := exec.CommandContext(ctx, binary, args...)
	if ns != "" {
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, binary}, args...)...)
	}
	cmd.Env = childEnv()
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gpumesh search %s: %w: %s", strings.Join(filter, " "), err, strings.TrimSpace(stderr.String()))
	}
	var offers []market.Offer
	if err := json.Unmarshal(stdout.Bytes(), &offers); err != nil {
		return nil, fmt.Errorf("gpumesh search %s: decode: %w", strings.Join(filter, " "), err)
	}
	return offers, nil
}

// logTail formats the last n lines of a log file for an error message.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		_, _ = f.Seek(-tail, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := slices.DeleteFunc(strings.Split(strings.TrimSpace(string(b)), "\n"), func(l string) bool {
		return strings.HasPrefix(l, "# testnet ") // our own start-up header
	})
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 || (len(lines) == 1 && lines[0] == "") {
		return ""
	}
	return "; it ends:\n    " + strings.Join(lines, "\n    ")
}

// CPUTicks is the CPU time (user and system, in clock ticks of 1/100 s)
// process pid has used, from /proc/PID/stat.
func CPUTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return utime + stime, nil
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes, the
// first three fields of /proc/loadavg, or "?" where it cannot be read.
// Benchmarks print it beside their figures.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
