package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/api"

	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/testnet/netlab"
)

// Defaults filled in by Up for zero Options fields.
const (
	DefaultNodes             = 5
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultDir               = "testnet/.run"
	DefaultBinary            = "bin/gpumesh"

	// DefaultAuditInterval is the nodes' mean time between challenges of
	// other suppliers: often enough to catch the impostor in a demo, rare
	// enough to leave the machine idle most of the time.
	DefaultAuditInterval = 2 * time.Minute

	// APIPortOffset separates a node's API port from its libp2p port.
	APIPortOffset = 1000

	// StateFile and BootstrapFile are written into the state directory.
	StateFile     = "state.json"
	BootstrapFile = "bootstrap.txt"

	stopGrace = 10 * time.Second

	// startBatch is how many nodes Up starts at once after the bootstrap
	// peers.
	startBatch = 10
)

// Network is the network ID of every testnet and NAT lab node, and of
// the commands and clients the testnet runs against them: a testnet never
// mixes with the mainnet, nor uses its built-in bootstrap list.
const Network = "testnet"

// ErrNotRunning means the state directory records no testnet.
var ErrNotRunning = errors.New("no testnet is running there")

// Options configure Up. Zero fields take the defaults above.
type Options struct {
	// Binary is the gpumesh binary to run (default bin/gpumesh).
	Binary string
	// Dir is the state directory (default testnet/.run).
	Dir string
	// Nodes is how many nodes to start (default 5, at most 1000).
	Nodes int
	// BasePort, when set, fixes the ports: node i uses tcp and udp
	// BasePort+i for libp2p and BasePort+1000+i for its API. By default
	// (0) the kernel chooses every port: each node listens on port 0 and
	// the testnet reads back what it got (the node writes its API address
	// to api.addr in its data dir; /healthz lists the rest), so that runs
	// never collide with each other or with ephemeral ports. A restarted
	// node asks for the ports it had.
	BasePort int
	// HeartbeatInterval is passed to every node (default 2s, and 2s per
	// 20 nodes past 20: 10s for 100). Past 20 nodes each node also
	// spreads its heartbeats itself (nodes/2 s, at most 60 s; node's
	// heartbeatEvery).
	HeartbeatInterval time.Duration
	// AuditInterval is passed to every node (default 2m, and 2m per 20
	// nodes past 20).
	AuditInterval time.Duration
	// Timeout bounds the whole start-up (default 12s a node, at least 30s).
	Timeout time.Duration
	// Logger reports progress; discarded when nil.
	Logger *slog.Logger
	// ExtraArgs, when set, returns more `gpumesh node` arguments for node
	// i (the chaos run's --clock-offset); a restart keeps them.
	ExtraArgs func(i int) []string
	// JobNetwork gives the suppliers' jobs networks of their own (config
	// job_network; they need root). On 127.0.0.1 it is off unless set:
	// the jobs' links and NAT would be made in this machine's own
	// namespace. In a namespace lab (Netns) it is always on: they are
	// made inside the lab's namespaces.
	JobNetwork bool

	// Netns runs the nodes in a namespace lab (package netlab) instead of
	// on 127.0.0.1: a third public, a third behind cone NATs, a third
	// behind symmetric NATs, with a WAN between regions (default 12
	// nodes). Linux and root only.
	Netns bool
	// Kinds, when set with Netns, is each node's place in the lab
	// (public, behind a cone NAT, behind a symmetric NAT) instead of
	// NetnsKind's rotation; it must name every node.
	Kinds []netlab.Kind
	// Prefix names the lab's namespaces (default "gmtn").
	Prefix string
	// WANBinary is a testnet binary whose hidden `wan --dir DIR` command
	// runs the lab's WAN after Up returns (default: this executable).
	WANBinary string
}

func (o Options) withDefaults() (Options, error) {
	if o.Binary == "" {
		o.Binary = DefaultBinary
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
		if o.Netns {
			o.Nodes = DefaultNetnsNodes
		}
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	// Every node verifies every other's heartbeats and is challenged by
	// the others: work that grows with the square of the network's size.
	// Past 20 nodes the defaults slow down with it, so that a hundred
	// nodes still fit on a 2-core machine.
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = max(DefaultHeartbeatInterval, time.Duration(o.Nodes)*DefaultHeartbeatInterval/20)
	}
	if o.AuditInterval == 0 {
		o.AuditInterval = max(DefaultAuditInterval, time.Duration(o.Nodes)*DefaultAuditInterval/20)
	}
	if o.Timeout == 0 {
		o.Timeout = max(30*time.Second, time.Duration(o.Nodes)*12*time.Second)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Nodes < 1 || o.Nodes > APIPortOffset {
		return o, fmt.Errorf("testnet: %d nodes: want 1 to %d", o.Nodes, APIPortOffset)
	}
	if len(o.Kinds) > 0 && (!o.Netns || len(o.Kinds) != o.Nodes) {
		return o, fmt.Errorf("testnet: %d kinds for %d nodes: Kinds needs Netns and one kind per node", len(o.Kinds), o.Nodes)
	}
	if o.BasePort != 0 && (o.BasePort < 1024 || o.BasePort+APIPortOffset+o.Nodes-1 > 65535) {
		return o, fmt.Errorf("testnet: base port %d: ports %d..%d must lie in 1024..65535", o.BasePort, o.BasePort, o.BasePort+APIPortOffset+o.Nodes-1)
	}
	var err error
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return o, fmt.Errorf("testnet: dir: %w", err)
	}
	if o.Binary, err = filepath.Abs(o.Binary); err != nil {
		return o, fmt.Errorf("testnet: binary: %w", err)
	}
	if fi, err := os.Stat(o.Binary); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return o, fmt.Errorf("testnet: no gpumesh binary at %s; build it with `go build -o bin/gpumesh ./cmd/gpumesh` or pass its path", o.Binary)
	}
	return o, nil
}

// Profile is the simulated hardware and region of one node.
type Profile struct {
	GPUs    string                  // the node's --gpus value
	Region  string                  // --region
	Pricing string                  // --pricing
	Prices  map[string]money.Micros // --price MODEL=AMOUNT, in micros per GPU-hour
	Cheat   string                  // --sim-cheat: the impostor of each round of five
}

// ProfileFor returns node i's hardware, region and pricing: a fixed
// rotation of five profiles (see the package comment). Each later round
// of five asks 0.05 more per GPU-hour, so that prices differ.
func ProfileFor(i int) Profile {
	rotation := [...]Profile{
		{"sim:h100-sxm:8", "eu-west", "fixed", map[string]money.Micros{"h100-sxm": 2_100_000}, ""},
		{"sim:rtx4090:2", "us-east", "auction", map[string]money.Micros{"rtx4090": 450_000}, ""},
		{"sim:a100-80gb:4", "eu-west", "dynamic", map[string]money.Micros{"a100-80gb": 1_400_000}, ""},
		{"sim:l40s:2", "ap-south", "fixed", map[string]money.Micros{"l40s": 900_000}, ""},
		{"sim:h100-sxm:2,rtx4090:1", "us-east", "auction", map[string]money.Micros{"h100-sxm": 2_400_000, "rtx4090": 500_000}, "slow=3"},
	}
	p := rotation[i%len(rotation)]
	prices := make(map[string]money.Micros, len(p.Prices))
	for m, v := range p.Prices {
		prices[m] = v + money.Micros(i/len(rotation))*50_000
	}
	p.Prices = prices
	return p
}

// priceArgs are the --price flags of a profile, in model order.
func (p Profile) priceArgs() []string {
	models := make([]string, 0, len(p.Prices))
	for m := range p.Prices {
		models = append(models, m)
	}
	sort.Strings(models)
	var args []string
	for _, m := range models {
		args = append(args, "--price", m+"="+p.Prices[m].String())
	}
	return args
}

// NodeInfo is one node of a testnet as recorded in state.json.
type NodeInfo struct {
	Index   int      `json:"index"`
	PID     int      `json:"pid"`
	PeerID  string   `json:"peer_id"`
	Addr    string   `json:"addr"` // tcp multiaddr ending in /p2p/PEERID
	API     string   `json:"api"`  // host:port of the HTTP API
	GPUs    string   `json:"gpus"`
	Region  string   `json:"region"`
	DataDir string   `json:"data_dir"`
	Log     string   `json:"log"`
	Args    []string `json:"args"` // the node's command line after the binary
	// Started is when the testnet started the node's process.
	Started time.Time `json:"started"`

	// With --netns: the node's lab host, namespace, NAT kind (public,
	// cone, symmetric) and public address (its router's behind NAT).
	Host   string `json:"host,omitempty"`
	NS     string `json:"ns,omitempty"`
	NAT    string `json:"nat,omitempty"`
	Public string `json:"public,omitempty"`
}

func (n NodeInfo) name() string {
	if n.PeerID != "" {
		return fmt.Sprintf("node %d (%s)", n.Index, n.PeerID)
	}
	return fmt.Sprintf("node %d (pid %d)", n.Index, n.PID)
}

// State is a running testnet, as recorded in state.json.
type State struct {
	Nodes     []NodeInfo `json:"nodes"`
	Bootstrap []string   `json:"bootstrap"`
	Started   time.Time  `json:"started"`
	Binary    string     `json:"binary"`
	Dir       string     `json:"dir"`
	BasePort  int        `json:"base_port"`
	Netns     *Netns     `json:"netns,omitempty"` // set with --netns
	// JobNetwork: the suppliers give jobs networks of their own, so jobs
	// may serve ports (Options.JobNetwork, or a namespace lab).
	JobNetwork bool `json:"job_network,omitempty"`
}

// BootstrapArgs returns the flags that join the testnet: --network and
// --bootstrap for each of its bootstrap peers.
func (s *State) BootstrapArgs() []string {
	args := []string{"--network", Network}
	for _, b := range s.Bootstrap {
		args = append(args, "--bootstrap", b)
	}
	return args
}

// plan lays out node i: its ports (port 0 for the kernel to choose,
// unless o.BasePort), directories, hardware and arguments. With a lab node
// (--netns), the node listens on every address of its own namespace, on
// fixed ports.
func plan(o Options, i int, bootstrap []string, ln *netlab.Node) NodeInfo {
	p := ProfileFor(i)
	port, api := "0", "127.0.0.1:0"
	if o.BasePort != 0 {
		port, api = strconv.Itoa(o.BasePort+i), "127.0.0.1:"+strconv.Itoa(o.BasePort+APIPortOffset+i)
	}
	listenIP := "127.0.0.1"
	n := NodeInfo{
		Index:   i,
		API:     api,
		GPUs:    p.GPUs,
		Region:  p.Region,
		DataDir: filepath.Join(o.Dir, fmt.Sprintf("node-%d", i)),
		Log:     filepath.Join(o.Dir, fmt.Sprintf("node-%d.log", i)),
	}
	if ln != nil {
		port, listenIP, n.API = strconv.Itoa(NetnsP2PPort), "0.0.0.0", NetnsAPI
		n.Host, n.NS, n.NAT = ln.Name, ln.NS, ln.Kind.String()
		if ln.Kind == netlab.Public {
			n.Public = ln.Public.String()
		}
	}
	n.Args = []string{
		"node", "--data", n.DataDir, "--network", Network,
		"--listen", "/ip4/" + listenIP + "/tcp/" + port,
		"--listen", "/ip4/" + listenIP + "/udp/" + port + "/quic-v1",
		"--api", n.API,
		"--gpus", n.GPUs, "--region", n.Region,
		"--heartbeat-interval", o.HeartbeatInterval.String(),
		"--log-level", "info",
		"--pricing", p.Pricing,
		"--audit-interval", o.AuditInterval.String(),
		"--job-network=" + strconv.FormatBool(o.JobNetwork || ln != nil),
	}
	if p.Cheat != "" {
		n.Args = append(n.Args, "--sim-cheat", p.Cheat)
	}
	// Every node keeps a connection to a bootstrap peer: past the default
	// watermarks (32/96) a bootstrap node would trim connections that
	// come straight back.
	if i < 2 && o.Nodes+64 > 96 {
		n.Args = append(n.Args, "--conn-low", strconv.Itoa(max(32, o.Nodes)), "--conn-high", strconv.Itoa(o.Nodes+64))
	}
	n.Args = append(n.Args, p.priceArgs()...)
	if o.ExtraArgs != nil {
		n.Args = append(n.Args, o.ExtraArgs(i)...)
	}
	for _, b := range bootstrap {
		n.Args = append(n.Args, "--bootstrap", b)
	}
	return n
}

// Up starts a testnet of o.Nodes nodes and returns once every node is
// connected, advertised, and found by a light client's search. It records
// the network in state.json and bootstrap.txt under o.Dir. On failure it
// stops every node it started and names the failing node and its log.
func Up(ctx context.Context, o Options) (_ *State, err error) {
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	if o.Netns {
		return upNetns(ctx, o)
	}
	log := o.Logger
	if st, err := Load(o.Dir); err == nil {
		if live := liveNodes(st.Nodes); len(live) > 0 {
			return nil, fmt.Errorf("testnet: already running in %s (%d of %d nodes alive); run `testnet down --dir %s` first", o.Dir, len(live), len(st.Nodes), o.Dir)
		}
	}
	if o.BasePort != 0 {
		if err := checkPorts(o.BasePort, o.Nodes); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	_ = os.Remove(filepath.Join(o.Dir, BootstrapFile))

	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	st := &State{Started: time.Now().UTC(), Binary: o.Binary, Dir: o.Dir, BasePort: o.BasePort, JobNetwork: o.JobNetwork || o.Netns}
	var procs []*proc
	defer func() {
		if err == nil {
			return
		}
		log.Warn("start-up failed; stopping the nodes started", "err", err)
		infos := make([]NodeInfo, len(procs))
		for i, p := range procs {
			infos[i] = p.info
		}
		_ = stopNodes(infos, 5*time.Second)
		_ = os.Remove(filepath.Join(o.Dir, StateFile))
	}()

	// start launches node i and records it at once, so that `testnet down`
	// can clean up even if this process dies half-way.
	start := func(i int) (*proc, error) {
		p, err := startNode(o.Binary, plan(o, i, st.Bootstrap, nil), false)
		if err != nil {
			return nil, err
		}
		log.Info("started node", "index", i, "pid", p.info.PID, "gpus", p.info.GPUs, "region", p.info.Region, "log", p.info.Log)
		procs = append(procs, p)
		st.Nodes = append(st.Nodes, p.info)
		return p, save(st)
	}
	// Nodes 0 and 1 are the bootstrap peers: start them one at a time and
	// learn their addresses before the others need them.
	for i := 0; i < min(2, o.Nodes); i++ {
		p, err := start(i)
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, []*proc{p}, answers); err != nil {
			return nil, err
		}
		st.Nodes[i] = p.info
		st.Bootstrap = append(st.Bootstrap, p.info.Addr)
	}
	// The rest in batches, each joined (its API answers only once the
	// node has reached a bootstrap peer) before the next starts: a
	// hundred nodes dialling the two bootstrap peers at once, on a small
	// machine, time out in their handshakes.
	for i := 2; i < o.Nodes; i += startBatch {
		var batch []*proc
		for j := i; j < min(i+startBatch, o.Nodes); j++ {
			p, err := start(j)
			if err != nil {
				return nil, err
			}
			batch = append(batch, p)
		}
		if o.Nodes > startBatch+2 {
			if err := waitFor(ctx, batch, answers); err != nil {
				return nil, err
			}
		}
	}
	if err := save(st); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, procs, ready); err != nil {
		return nil, err
	}
	for i, p := range procs {
		st.Nodes[i] = p.info
	}
	log.Info("all nodes connected and advertised; searching as a light client")
	if err := waitSearch(ctx, "", o.Binary, st.Bootstrap, procs); err != nil {
		return nil, err
	}
	if err := save(st); err != nil {
		return nil, err
	}
	bs := strings.Join(st.Bootstrap, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(o.Dir, BootstrapFile), []byte(bs), 0o644); err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	log.Info("testnet up", "nodes", o.Nodes, "took", time.Since(st.Started).Round(time.Millisecond))
	return st, nil
}

// Restart starts node index of the testnet in dir again, on the same data
// dir, ports and arguments (so with the same peer ID), stopping it first if
// it still runs. It returns once the node is connected, re-advertised, and
// found by a light client with a profile issued after the restart.
func Restart(ctx context.Context, dir string, index int) (NodeInfo, error) {
	st, err := Load(dir)
	if err != nil {
		return NodeInfo{}, err
	}
	if index < 0 || index >= len(st.Nodes) {
		return NodeInfo{}, fmt.Errorf("testnet: restart node %d: the testnet in %s has nodes 0..%d", index, dir, len(st.Nodes)-1)
	}
	info := st.Nodes[index]
	if err := stopNodes([]NodeInfo{info}, stopGrace); err != nil {
		return info, err
	}
	var dial api.DialFunc
	if st.Netns != nil {
		lab, err := st.Netns.attach()
		if err != nil {
			return info, err
		}
		dial = labDialer(lab, info.Host)
		// Public nodes started before the others knew no bootstrap
		// peers; coming back, a node joins through every other one.
		info.Args = withBootstrap(info.Args, st.Bootstrap, info.PeerID)
	} else if st.BasePort != 0 {
		if err := checkNodePorts(st.BasePort, index); err != nil {
			return info, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, restartTimeout(len(st.Nodes)))
	defer cancel()
	p, err := startNode(st.Binary, info, true)
	if err != nil {
		return info, err
	}
	p.dial = dial
	st.Nodes[index].PID = p.info.PID
	if err := save(st); err != nil {
		return p.info, err
	}
	err = waitFor(ctx, []*proc{p}, ready)
	if err == nil && p.info.PeerID != info.PeerID {
		err = fmt.Errorf("%s: came back as %s; was the data dir %s replaced?", info.name(), p.info.PeerID, info.DataDir)
	}
	if err == nil {
		err = waitSearch(ctx, st.searchNS(), st.Binary, st.Bootstrap, []*proc{p})
	}
	if err != nil {
		_ = stopNodes([]NodeInfo{p.info}, 5*time.Second)
		return p.info, err
	}
	st.Nodes[index] = p.info
	return p.info, save(st)
}

// restartTimeout bounds Restart on a testnet of nodes nodes: 30 s, and
// 1 s more for each node past 20. A node that comes back re-advertises and
// must be found again while every other node of the machine shares its
// cores: at 100 nodes on 2 cores that takes longer than at 20.
func restartTimeout(nodes int) time.Duration {
	return 30*time.Second + time.Duration(max(0, nodes-20))*time.Second
}

// Down stops the testnet recorded in dir: SIGTERM to each recorded node
// that is still ours, SIGKILL to those alive 10 s later. It removes
// state.json and bootstrap.txt and keeps data dirs and logs. It returns an error wrapping
// ErrNotRunning when dir records no testnet.
func Down(dir string) error {
	st, err := Load(dir)
	if err != nil {
		return err
	}
	if err := stopNodes(st.Nodes, stopGrace); err != nil {
		return err
	}
	if st.Netns != nil {
		if err := st.netnsDown(); err != nil {
			return err
		}
	}
	_ = os.Remove(filepath.Join(dir, BootstrapFile))
	if err := os.Remove(filepath.Join(dir, StateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("testnet: %w", err)
	}
	return nil
}

// NodeStatus is what Status reports about one node.
type NodeStatus struct {
	Index      int    `json:"index"`
	PID        int    `json:"pid"`
	PeerID     string `json:"peer_id"`
	API        string `json:"api"`
	Alive      bool   `json:"alive"`   // the process exists and is this node
	Healthy    bool   `json:"healthy"` // /healthz answered
	Peers      int    `json:"peers"`
	Advertised bool   `json:"advertised"`
	Error      string `json:"error,omitempty"`
	NS         string `json:"ns,omitempty"`  // with --netns: the node's namespace
	NAT        string `json:"nat,omitempty"` // with --netns: public, cone or symmetric
}

// Status reports on every node recorded in dir.
func Status(dir string) ([]NodeStatus, error) {
	st, err := Load(dir)
	if err != nil {
		return nil, err
	}
	var lab *netlab.Lab
	if st.Netns != nil {
		if lab, err = st.Netns.attach(); err != nil {
			return nil, err
		}
	}
	out := make([]NodeStatus, len(st.Nodes))
	var wg sync.WaitGroup
	for i, n := range st.Nodes {
		out[i] = NodeStatus{Index: n.Index, PID: n.PID, PeerID: n.PeerID, API: n.API, Alive: isOurs(n.PID, n.DataDir), NS: n.NS, NAT: n.NAT}
		var dial api.DialFunc
		if lab != nil {
			dial = labDialer(lab, n.Host)
		}
		if !out[i].Alive {
			out[i].Error = "not running"
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			h, err := getHealth(ctx, n.API, dial)
			switch {
			case err != nil:
				out[i].Error = err.Error()
			case h.PeerID != n.PeerID:
				out[i].Error = fmt.Sprintf("the API at %s is peer %s, not %s", n.API, h.PeerID, n.PeerID)
			default:
				out[i].Healthy, out[i].Peers, out[i].Advertised = true, h.Peers, h.Advertised
			}
		})
	}
	wg.Wait()
	return out, nil
}

// Load reads dir/state.json.
func Load(dir string) (*State, error) {
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("testnet: %s: %w (no %s); start one with `testnet up`", dir, ErrNotRunning, StateFile)
	}
	if err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("testnet: %s: %w", path, err)
	}
	return &st, nil
}

// save writes state.json atomically.
func save(st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("testnet: %w", err)
	}
	path := filepath.Join(st.Dir, StateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("testnet: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("testnet: %w", err)
	}
	return nil
}
