package testnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet/netlab"
)

// Defaults of a namespace testnet (--netns).
const (
	// DefaultNetnsNodes is 12: four of each kind, so that at least four
	// public nodes can observe a node's address (libp2p trusts an observed
	// address only once four distinct peers report it).
	DefaultNetnsNodes = 12
	// DefaultPrefix names the lab's namespaces.
	DefaultPrefix = "gmtn"
	// NetnsP2PPort is every node's libp2p port (tcp and udp/quic-v1)
	// inside its own namespace.
	NetnsP2PPort = 4001
	// NetnsAPI is every node's API inside its own namespace.
	NetnsAPI = "127.0.0.1:5001"
	// WANLogFile is the WAN process's log in the state directory.
	WANLogFile = "wan.log"
)

// Netns is the lab of a testnet started with --netns, as recorded in
// state.json.
type Netns struct {
	Spec   netlab.Spec `json:"spec"`
	WANPID int         `json:"wan_pid"` // the `testnet wan` process
	WANLog string      `json:"wan_log"`
}

// NetnsKind is node i's place in a namespace testnet: node 0 is behind a
// cone NAT (the demo's renter), node 1 public, node 2 behind a symmetric
// NAT, and so on in turn.
func NetnsKind(i int) netlab.Kind {
	return [...]netlab.Kind{netlab.Cone, netlab.Public, netlab.Symmetric}[i%3]
}

// netnsSpec is the lab of n nodes: host n<i> in node i's region, placed
// by kinds[i], or NetnsKind(i) when kinds is empty.
func netnsSpec(prefix string, n int, kinds []netlab.Kind) netlab.Spec {
	spec := netlab.Spec{Prefix: prefix, Regions: []string{"eu-west", "us-east", "ap-south"}}
	for i := range n {
		kind := NetnsKind(i)
		if len(kinds) > 0 {
			kind = kinds[i]
		}
		spec.Hosts = append(spec.Hosts, netlab.Host{Name: "n" + strconv.Itoa(i), Region: ProfileFor(i).Region, Kind: kind})
	}
	return spec
}

func (n *Netns) attach() (*netlab.Lab, error) {
	return netlab.Attach(n.Spec, nil)
}

// labDialer reaches APIs from inside host's namespace.
func labDialer(lab *netlab.Lab, host string) api.DialFunc {
	return api.DialFunc(lab.Dialer(host))
}

// searchNS is the namespace where light-client searches run: none on
// loopback, the first public node's with --netns.
func (st *State) searchNS() string {
	if st.Netns == nil {
		return ""
	}
	for _, n := range st.Nodes {
		if n.NAT == netlab.Public.String() {
			return n.NS
		}
	}
	return ""
}

// Command runs binary with args as node 0's user would: on this machine
// for a loopback testnet, inside node 0's namespace (behind a cone NAT)
// with --netns, where node 0's API on 127.0.0.1 and the lab's internet are
// reachable.
// The command is on the testnet's network (GPUMESH_NETWORK).
func (st *State) Command(ctx context.Context, binary string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if len(st.Nodes) > 0 && st.Nodes[0].NS != "" {
		cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", st.Nodes[0].NS, binary}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, binary, args...)
	}
	cmd.Env = append(os.Environ(), "GPUMESH_NETWORK="+Network)
	return cmd
}

// quicAddr is the udp/quic-v1 address of a netns node whose tcp address
// is addr (/ip4/A/tcp/4001/p2p/ID): every node listens on both, on the
// same port.
func quicAddr(addr string) string {
	return strings.Replace(addr, fmt.Sprintf("/tcp/%d/", NetnsP2PPort), fmt.Sprintf("/udp/%d/quic-v1/", NetnsP2PPort), 1)
}

// withBootstrap returns args with a --bootstrap flag for each address of
// bootstrap that is not self's and not there yet.
func withBootstrap(args, bootstrap []string, self string) []string {
	out := slices.Clone(args)
	for _, b := range bootstrap {
		if (self != "" && strings.HasSuffix(b, "/p2p/"+self)) || slices.Contains(args, b) {
			continue
		}
		out = append(out, "--bootstrap", b)
	}
	return out
}

// upNetns is Up with Options.Netns: it builds the lab, starts the WAN
// process, then the public nodes one at a time (each bootstraps from those
// before it), then the nodes behind NAT, bootstrapping from every public
// node.
func upNetns(ctx context.Context, o Options) (_ *State, err error) {
	log := o.Logger
	if err := netlab.Check(); err != nil {
		return nil, fmt.Errorf("testnet: --netns: %w", err)
	}
	if st, err := Load(o.Dir); err == nil {
		if live := liveNodes(st.Nodes); len(live) > 0 {
			return nil, fmt.Errorf("testnet: already running in %s (%d of %d nodes alive); run `testnet down --dir %s` first", o.Dir, len(live), len(st.Nodes), o.Dir)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	_ = os.Remove(filepath.Join(o.Dir, BootstrapFile))
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	lab, err := netlab.Up(ctx, netnsSpec(o.Prefix, o.Nodes, o.Kinds), log, netlab.WithoutWAN())
	if err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	st := &State{
		Started: time.Now().UTC(), Binary: o.Binary, Dir: o.Dir, BasePort: NetnsP2PPort, JobNetwork: true,
		Netns: &Netns{Spec: lab.Spec(), WANLog: filepath.Join(o.Dir, WANLogFile)},
		Nodes: make([]NodeInfo, o.Nodes),
	}
	var procs []*proc
	defer func() {
		if err == nil {
			return
		}
		log.Warn("start-up failed; stopping the nodes and removing the lab", "err", err)
		_ = stopNodes(st.Nodes, 5*time.Second)
		_ = st.netnsDown()
		_ = os.Remove(filepath.Join(o.Dir, StateFile))
	}()
	if err := save(st); err != nil {
		return nil, err
	}
	if st.Netns.WANPID, err = startWAN(ctx, o.WANBinary, o.Dir, st.Netns.WANLog); err != nil {
		return nil, err
	}
	if err := save(st); err != nil {
		return nil, err
	}
	log.Info("lab and WAN up", "prefix", o.Prefix, "wan_pid", st.Netns.WANPID, "wan_log", st.Netns.WANLog)

	nodes := lab.Nodes()
	start := func(i int) (*proc, error) {
		p, err := startNode(o.Binary, plan(o, i, st.Bootstrap, &nodes[i]), false)
		if err != nil {
			return nil, err
		}
		p.dial = labDialer(lab, nodes[i].Name)
		log.Info("started node", "index", i, "pid", p.info.PID, "ns", p.info.NS, "nat", p.info.NAT, "region", p.info.Region, "log", p.info.Log)
		procs = append(procs, p)
		st.Nodes[i] = p.info
		return p, save(st)
	}
	for i, n := range nodes {
		if n.Kind != netlab.Public {
			continue
		}
		p, err := start(i)
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, []*proc{p}, answers); err != nil {
			return nil, err
		}
		st.Nodes[i] = p.info
		// Both transports, as a real node's bootstrap list would have
		// them: libp2p then prefers QUIC, and nodes behind NAT learn
		// their observed UDP addresses, which hole punching over UDP
		// needs (TCP simultaneous open through two NATs fails far more
		// often).
		st.Bootstrap = append(st.Bootstrap, p.info.Addr, quicAddr(p.info.Addr))
	}
	if len(st.Bootstrap) == 0 {
		return nil, fmt.Errorf("testnet: --netns with %d nodes has no public node; start at least 2, or place one", o.Nodes)
	}
	for i, n := range nodes {
		if n.Kind != netlab.Public {
			if _, err := start(i); err != nil {
				return nil, err
			}
		}
	}
	if err := waitFor(ctx, procs, ready); err != nil {
		return nil, err
	}
	for _, p := range procs {
		st.Nodes[p.info.Index] = p.info
	}
	log.Info("all nodes connected and advertised; searching as a light client", "ns", st.searchNS())
	if err := waitSearch(ctx, st.searchNS(), o.Binary, st.Bootstrap, procs); err != nil {
		return nil, err
	}
	if err := save(st); err != nil {
		return nil, err
	}
	bs := strings.Join(st.Bootstrap, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(o.Dir, BootstrapFile), []byte(bs), 0o644); err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	log.Info("testnet up in namespaces", "nodes", o.Nodes, "took", time.Since(st.Started).Round(time.Millisecond))
	return st, nil
}

// startWAN starts `bin wan --dir dir` detached, logging to logPath, and
// waits until it says "ready" on its stdout. bin defaults to this
// executable.
func startWAN(ctx context.Context, bin, dir, logPath string) (int, error) {
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return 0, fmt.Errorf("testnet: wan: find own executable: %w", err)
		}
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("testnet: wan: log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("testnet: wan: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "wan", "--dir", dir)
	cmd.Stdout, cmd.Stderr = w, logf
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return 0, fmt.Errorf("testnet: wan: start %s: %w", bin, err)
	}
	pid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it whenever it exits
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	fail := func(why string) (int, error) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("testnet: wan (pid %d): %s; see %s%s", pid, why, logPath, logTail(logPath, 3))
	}
	select {
	case line := <-lines:
		if line != "ready" {
			return fail("exited before it was ready")
		}
		return pid, nil
	case <-ctx.Done():
		r.Close() // ends the reader
		<-lines
		return fail("not ready: " + ctx.Err().Error())
	}
}

// RunWAN runs the WAN of the namespace testnet recorded in dir until ctx
// ends (the hidden `testnet wan` command). It calls ready once the WAN
// forwards.
func RunWAN(ctx context.Context, dir string, logger *slog.Logger, ready func()) error {
	st, err := Load(dir)
	if err != nil {
		return err
	}
	if st.Netns == nil {
		return fmt.Errorf("testnet: wan: the testnet in %s does not run in namespaces", dir)
	}
	wan, err := netlab.StartWAN(ctx, st.Netns.Spec, logger)
	if err != nil {
		return fmt.Errorf("testnet: wan: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- netlab.ServeControl(ctx, wan, WANSocket(dir), logger) }()
	ready()
	select {
	case <-ctx.Done():
		err = <-served
	case err = <-served: // the control socket failed: stop, and say why
	}
	cancel()
	return errors.Join(err, wan.Close())
}

// WANSocket is the control socket of the WAN of the namespace testnet in
// dir (see netlab.Control).
func WANSocket(dir string) string { return filepath.Join(dir, "wan.sock") }

// Partition cuts the WAN between regions a and b of the running namespace
// testnet, both ways, until Heal.
func (st *State) Partition(ctx context.Context, a, b string) error {
	return st.wanControl(ctx, "partition", a, b)
}

// Heal ends a partition between regions a and b.
func (st *State) Heal(ctx context.Context, a, b string) error {
	return st.wanControl(ctx, "heal", a, b)
}

// Flow is the packets and bytes the WAN carried from public address src
// to dst: between two NAT routers' addresses, a direct (hole-punched)
// flow.
func (st *State) Flow(ctx context.Context, src, dst netip.Addr) (packets, bytes uint64, err error) {
	if st.Netns == nil {
		return 0, 0, errors.New("testnet: not a namespace testnet")
	}
	return netlab.ControlFlow(ctx, WANSocket(st.Dir), src, dst)
}

func (st *State) wanControl(ctx context.Context, req ...string) error {
	if st.Netns == nil {
		return errors.New("testnet: not a namespace testnet")
	}
	_, err := netlab.Control(ctx, WANSocket(st.Dir), req...)
	return err
}

// isWAN reports whether pid is alive and runs `testnet wan --dir dir`.
func isWAN(pid int, dir string) bool {
	if pid <= 0 || !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	return len(argv) >= 4 && argv[1] == "wan" && slices.Equal(argv[2:4], []string{"--dir", dir})
}

// netnsDown stops the WAN process (only if it is still ours), then kills
// whatever runs in the lab's namespaces and removes them.
func (st *State) netnsDown() error {
	var errs []error
	if pid := st.Netns.WANPID; isWAN(pid, st.Dir) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(5 * time.Second)
		for isWAN(pid, st.Dir) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if isWAN(pid, st.Dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := netlab.Cleanup(st.Netns.Spec.Prefix); err != nil {
		errs = append(errs, fmt.Errorf("testnet: remove the lab: %w", err))
	}
	return errors.Join(errs...)
}

// CleanupNetns removes what a killed namespace testnet with this prefix
// left: the processes in its namespaces and the namespaces.
func CleanupNetns(prefix string) error {
	if err := netlab.Cleanup(prefix); err != nil {
		return fmt.Errorf("testnet: %w", err)
	}
	return nil
}
