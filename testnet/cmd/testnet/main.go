// Command testnet runs a local gpumesh network of real node processes on
// 127.0.0.1, or in a lab of network namespaces behind NAT routers with
// --netns (see package testnet):
//
//	testnet up [N] [--bin bin/gpumesh] [--dir testnet/.run] [--base-port N]
//	testnet up --netns [N] [--prefix gmtn]
//	testnet status [--json]
//	testnet demo
//	testnet down [--netns [--prefix gmtn]]
//	testnet partition|heal REGION_A REGION_B
//
// Run it from the repository root after `go build -o bin/gpumesh ./cmd/gpumesh`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet"
)

const usage = `usage: testnet COMMAND [flags]

  up [N]    start N nodes (default 5; 12 with --netns) and wait until search finds them all
  status    show each node's process and health
  demo      search the running testnet for everything, then for model=h100-sxm
  down      stop the nodes (keeps their data dirs and logs); --netns also
            removes what a killed namespace testnet left
  partition A B   with --netns: cut the WAN between regions A and B
  heal A B        with --netns: end that cut

Run "testnet COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the exit status: 0 on success, 2 for
// usage errors, 1 otherwise.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c := &cli{stdout: stdout, stderr: stderr}
	cmds := map[string]func(context.Context, []string) error{
		"up": c.up, "down": c.down, "status": c.status, "demo": c.demo,
		"partition": c.cut(true), "heal": c.cut(false),
		"wan": c.wan, // hidden: runs a namespace testnet's WAN for `up --netns`
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "testnet: unknown command %q\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "testnet:", err)
		return 2
	default:
		fmt.Fprintln(stderr, err)
		return 1
	}
}

type usageError struct{ error }

type cli struct {
	stdout, stderr io.Writer
}

// flags makes a FlagSet for a command with the --dir flag every command has.
func (c *cli) flags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("testnet "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	dir := fs.String("dir", testnet.DefaultDir, "state directory")
	return fs, dir
}

// parse parses flags that may come before or after positional arguments,
// and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (c *cli) up(ctx context.Context, args []string) error {
	fs, dir := c.flags("up")
	bin := fs.String("bin", testnet.DefaultBinary, "gpumesh binary")
	base := fs.Int("base-port", 0, "fixed ports: node i listens on BASE+i (libp2p) and BASE+1000+i (API); by default (0) the kernel picks free ports")
	hb := fs.Duration("heartbeat-interval", 0, "heartbeat interval passed to every node (default 2s, and 2s per 20 nodes past 20)")
	audit := fs.Duration("audit-interval", 0, "every node's mean time between challenges of a random peer (default 2m, and 2m per 20 nodes past 20)")
	timeout := fs.Duration("timeout", 0, "give up start-up after this long (default 12s a node, at least 30s)")
	netns := fs.Bool("netns", false, "run the nodes in network namespaces behind cone and symmetric NAT routers, with a WAN between regions (Linux, root, iproute2, nftables)")
	prefix := fs.String("prefix", testnet.DefaultPrefix, "with --netns: the namespaces' name prefix")
	jobNet := autoBool{}
	fs.Var(&jobNet, "job-network", "give the suppliers' jobs networks of their own, so that they can serve ports: auto (on when this is Linux, run as root, with ip and nft), true or false (on 127.0.0.1 their links and NAT are made in this machine's own namespace; always on with --netns)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	n := 0 // the default of the mode
	switch len(pos) {
	case 0:
	case 1:
		if n, err = strconv.Atoi(pos[0]); err != nil || n < 1 {
			return usageError{fmt.Errorf("up: node count %q: want a positive number", pos[0])}
		}
	default:
		return usageError{fmt.Errorf("up: want at most one argument, the node count; got %q", pos)}
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, err := testnet.Up(ctx, testnet.Options{
		Binary: *bin, Dir: *dir, Nodes: n, BasePort: *base, HeartbeatInterval: *hb, AuditInterval: *audit, Timeout: *timeout, Logger: log,
		Netns: *netns, Prefix: *prefix, JobNetwork: jobNet.resolve(jobNetworkPossible),
	})
	if err != nil {
		return err
	}
	c.printUp(st, *dir)
	return nil
}

// printUp tells the user what runs and how to use it.
func (c *cli) printUp(st *testnet.State, dirFlag string) {
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return r
			}
		}
		return p
	}
	self := os.Args[0] // as the user invoked it, e.g. bin/testnet
	if strings.Contains(os.Args[0], "go-build") {
		self = "go run ./testnet/cmd/testnet"
	}
	dirArg := ""
	if dirFlag != testnet.DefaultDir {
		dirArg = " --dir " + dirFlag
	}
	bin, bootstrap := rel(st.Binary), rel(filepath.Join(st.Dir, testnet.BootstrapFile))
	fmt.Fprintf(c.stdout, "testnet: %d nodes up in %s\n\n", len(st.Nodes), rel(st.Dir))
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	if st.Netns != nil {
		fmt.Fprintln(w, "NODE\tPID\tPEER\tGPUS\tREGION\tNS\tNAT\tPUBLIC\tLOG")
		for _, n := range st.Nodes {
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Index, n.PID, n.PeerID, n.GPUs, n.Region, n.NS, n.NAT, n.Public, rel(n.Log))
		}
		w.Flush()
		fmt.Fprintf(c.stdout, `
Every node's API is on %[5]s inside its own namespace; the lab's WAN runs as pid %[6]d (log %[7]s).
Bootstrap addresses (public nodes), one a line: %[2]s
Try, as node 0 behind its cone NAT:
  ip netns exec %[3]s %[1]s search --bootstrap $(head -1 %[2]s) model=h100-sxm
  ip netns exec %[3]s %[1]s peers --api %[5]s --data %[8]s
  %[4]s status%[9]s
  %[4]s demo%[9]s
Stop it and remove the namespaces with:
  %[4]s down%[9]s
`, bin, bootstrap, st.Nodes[0].NS, self, testnet.NetnsAPI, st.Netns.WANPID, rel(st.Netns.WANLog), rel(st.Nodes[0].DataDir), dirArg)
		return
	}
	fmt.Fprintln(w, "NODE\tPID\tPEER\tGPUS\tREGION\tAPI\tLOG")
	for _, n := range st.Nodes {
		fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", n.Index, n.PID, n.PeerID, n.GPUs, n.Region, n.API, rel(n.Log))
	}
	w.Flush()
	fmt.Fprintf(c.stdout, "\nThe Explorer of node 0 (it shows the demo as it happens): http://%s/\n", st.Nodes[0].API)
	if token, err := api.ReadToken(st.Nodes[0].DataDir); err == nil {
		fmt.Fprintf(c.stdout, "Node 0's own leases and receipts there, with its token: http://%s/#/node?token=%s\n", st.Nodes[0].API, token)
	}
	fmt.Fprintf(c.stdout, `
Bootstrap addresses, one a line: %[2]s
Try:
  %[1]s search --bootstrap $(head -1 %[2]s) model=h100-sxm
  %[1]s search --bootstrap $(head -1 %[2]s) region=eu-west --json
  %[1]s peers --api %[3]s --data %[6]s
  %[4]s status%[5]s
  %[4]s demo%[5]s
Stop it with:
  %[4]s down%[5]s
`, bin, bootstrap, st.Nodes[0].API, self, dirArg, rel(st.Nodes[0].DataDir))
}

func (c *cli) down(_ context.Context, args []string) error {
	fs, dir := c.flags("down")
	netns := fs.Bool("netns", false, "also remove the namespaces (and their processes) a killed `up --netns` left")
	prefix := fs.String("prefix", testnet.DefaultPrefix, "with --netns: the namespaces' name prefix")
	if err := c.noArgs(fs, args); err != nil {
		return err
	}
	err := testnet.Down(*dir)
	if *netns {
		if cerr := testnet.CleanupNetns(*prefix); cerr != nil {
			return errors.Join(err, cerr)
		}
		if errors.Is(err, testnet.ErrNotRunning) {
			fmt.Fprintf(c.stdout, "testnet: no testnet recorded in %s; removed any namespace %s-*\n", *dir, *prefix)
			return nil
		}
	}
	if errors.Is(err, testnet.ErrNotRunning) {
		fmt.Fprintf(c.stdout, "testnet: nothing to stop in %s\n", *dir)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "testnet: stopped; data dirs and logs kept in %s\n", *dir)
	return nil
}

func (c *cli) status(_ context.Context, args []string) error {
	fs, dir := c.flags("status")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := c.noArgs(fs, args); err != nil {
		return err
	}
	nodes, err := testnet.Status(*dir)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(nodes); err != nil {
			return err
		}
	} else if len(nodes) > 0 && nodes[0].NS != "" {
		w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "NODE\tPID\tPEER\tNS\tNAT\tALIVE\tHEALTHY\tPEERS\tADVERTISED\tERROR")
		for _, n := range nodes {
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%t\t%t\t%d\t%t\t%s\n", n.Index, n.PID, n.PeerID, n.NS, n.NAT, n.Alive, n.Healthy, n.Peers, n.Advertised, n.Error)
		}
		w.Flush()
	} else {
		w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "NODE\tPID\tPEER\tAPI\tALIVE\tHEALTHY\tPEERS\tADVERTISED\tERROR")
		for _, n := range nodes {
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%t\t%t\t%d\t%t\t%s\n", n.Index, n.PID, n.PeerID, n.API, n.Alive, n.Healthy, n.Peers, n.Advertised, n.Error)
		}
		w.Flush()
	}
	for _, n := range nodes {
		if !n.Healthy {
			return fmt.Errorf("testnet: node %d is not healthy: %s; see its log in %s", n.Index, n.Error, *dir)
		}
	}
	return nil
}

func (c *cli) demo(ctx context.Context, args []string) error {
	fs, dir := c.flags("demo")
	bin := fs.String("bin", "", "gpumesh binary (default: the one the testnet runs)")
	if err := c.noArgs(fs, args); err != nil {
		return err
	}
	st, err := testnet.Load(*dir)
	if err != nil {
		return err
	}
	if *bin == "" {
		*bin = st.Binary
	}
	if st.Netns == nil {
		fmt.Fprintf(c.stdout, "# open the Explorer of node 0 to watch the demo happen: http://%s/\n\n", st.Nodes[0].API)
	}
	bs := st.BootstrapArgs()
	// A node's API answers only with its token, read from its data dir.
	api := func(i int) []string {
		n := st.Nodes[i%len(st.Nodes)]
		return []string{"--api", n.API, "--data", n.DataDir}
	}
	steps := []step{
		{"a renter looks for H100s: this testnet's GPUs are all simulated (--gpus sim:...), and search shows real GPUs only unless asked, so it finds none and says how many it left out", append([]string{"search", "model=h100-sxm"}, bs...), false, 0},
		{"every offer on the network, simulated ones included (--allow-simulated, which every search, rent and run of this demo passes from here on; DHT profiles, prices from the order book)", append([]string{"search", "--allow-simulated"}, bs...), false, 0},
		{"H100s at 2.50 or less", append([]string{"search", "--allow-simulated", "model=h100-sxm", "price<=2.50"}, bs...), false, 0},
		{"node 0's order book", append([]string{"orders"}, api(0)...), false, 0},
	}
	// Node 0 challenges the impostor (a node that computes slower than
	// the GPUs it claims) and an honest supplier; it signs and gossips
	// both verdicts, which every renter's reputation then counts.
	for _, i := range []int{impostor(st), honestPeer(st)} {
		if i < 0 {
			continue
		}
		steps = append(steps, step{
			fmt.Sprintf("node 0 challenges node %d (%s)", i, ProfileNote(i)),
			append([]string{"challenge", st.Nodes[i].PeerID}, api(0)...), true, 500 * time.Millisecond,
		})
	}
	steps = append(steps, []step{
		{"H100 offers with their reputation now", append([]string{"search", "--allow-simulated", "model=h100-sxm"}, bs...), false, 0},
		{"rent two H100s for an hour, paying at most 2.50 per GPU-hour, without --allow-simulated: only simulated H100s are on offer, and rent says so", append([]string{"rent", "model=h100-sxm", "--count", "2", "--hours", "1", "--max-price", "2.50"}, bs...), true, 0},
		{"the same with --allow-simulated: by default only from proven suppliers, and nobody has challenged node 0 yet (the impostor failed), so rent says why it leases from none", append([]string{"rent", "model=h100-sxm", "--count", "2", "--hours", "1", "--max-price", "2.50", "--allow-simulated"}, bs...), true, 0},
		{"the same with --allow-unproven: node 0, unproven but not failed, is leased from; the impostor is still left out", append([]string{"rent", "model=h100-sxm", "--count", "2", "--hours", "1", "--max-price", "2.50", "--allow-unproven", "--allow-simulated"}, bs...), false, 500 * time.Millisecond},
		{"a bid nobody can fill is told why", append([]string{"rent", "model=h100-sxm", "--count", "16", "--hours", "1", "--max-price", "1.00", "--allow-simulated"}, bs...), true, 0},
	}...)
	if err := c.runSteps(ctx, st, *bin, steps); err != nil {
		return err
	}
	if err := c.jobDemo(ctx, st, *bin); err != nil {
		return err
	}
	if err := c.serviceDemo(ctx, st, *bin); err != nil {
		return err
	}
	// Then: a price index counts only the trades of suppliers whose
	// reputation it knows. Node 0's counts the job's lease from node 1,
	// which it passed, and its own lease above; nobody else knows node
	// 0's reputation, so no other index counts that one.
	if err := c.runSteps(ctx, st, *bin, []step{
		{"node 0's price index: trade prints of suppliers whose reputation it knows (node 1, which it passed, and itself)", append([]string{"prices"}, api(0)...), false, 0},
	}); err != nil {
		return err
	}
	// The workloads decentralized compute does best: one job across
	// several suppliers, and one split into tasks.
	if err := c.clusterDemo(ctx, st, *bin); err != nil {
		return err
	}
	return c.tasksDemo(ctx, st, *bin)
}

// runSteps runs each step's command as node 0's user (inside node 0's
// namespace with --netns), showing it and its output.
func (c *cli) runSteps(ctx context.Context, st *testnet.State, bin string, steps []step) error {
	for _, step := range steps {
		if err := c.demoShow(ctx, st, step.title, step.mayErr, bin, step.args...); err != nil {
			return err
		}
		time.Sleep(step.pause)
	}
	return nil
}

// demoShow shows the command name args under title, runs it as node 0's
// user and shows its output; it fails when the command does, unless
// mayErr.
func (c *cli) demoShow(ctx context.Context, st *testnet.State, title string, mayErr bool, name string, args ...string) error {
	fmt.Fprintf(c.stdout, "# %s\n$ %s%s %s\n", title, nsNote(st), filepath.Base(name), strings.Join(args, " "))
	cmd := st.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = c.stdout, c.stdout
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	fmt.Fprintln(c.stdout)
	if err != nil && !mayErr {
		return fmt.Errorf("testnet: demo: %s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// demoOutput runs the command name args as node 0's user and returns what
// it printed on stdout; its stderr goes to the demo's output.
func (c *cli) demoOutput(ctx context.Context, st *testnet.State, name string, args ...string) ([]byte, error) {
	cmd := st.Command(ctx, name, args...)
	cmd.Stderr = c.stdout
	cmd.WaitDelay = 2 * time.Second
	return cmd.Output()
}

// demoRun shows a `gpumesh run ... --json` under title, runs it and
// decodes what it printed into v.
func (c *cli) demoRun(ctx context.Context, st *testnet.State, title, bin string, args []string, v any) error {
	fmt.Fprintf(c.stdout, "# %s\n$ %s%s %s\n", title, nsNote(st), filepath.Base(bin), strings.Join(args, " "))
	out, err := c.demoOutput(ctx, st, bin, args...)
	c.stdout.Write(out)
	fmt.Fprintln(c.stdout)
	if err != nil {
		return fmt.Errorf("testnet: demo: run: %w", err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("testnet: demo: run printed %q: %w", out, err)
	}
	return nil
}

// nodeOf is the index of the testnet node with peer ID id, or -1.
func nodeOf(st *testnet.State, id string) int {
	for i, n := range st.Nodes {
		if n.PeerID == id {
			return i
		}
	}
	return -1
}

// demoJob counts to 30, one step every 0.3 s, keeping its place in
// $CHECKPOINT_DIR (written by rename, so a checkpoint is never torn) and
// resuming from there.
const demoJob = `s=0
[ -f "$CHECKPOINT_DIR/step" ] && s=$(cat "$CHECKPOINT_DIR/step")
echo "attempt $JOB_ATTEMPT starts at step $s on GPU $CUDA_VISIBLE_DEVICES"
while [ "$s" -lt 30 ]; do
  s=$((s+1))
  echo "$s" > "$CHECKPOINT_DIR/step.tmp" && mv "$CHECKPOINT_DIR/step.tmp" "$CHECKPOINT_DIR/step"
  echo "step $s"
  sleep 0.3
done
echo "done: $(cat input.txt)"
`

// jobDemo runs a job from node 0 (the renter's own node pays and follows
// it), kills its supplier with SIGKILL midway, and shows the job finish on
// another supplier from its last checkpoint, with a bill that verifies.
func (c *cli) jobDemo(ctx context.Context, st *testnet.State, bin string) error {
	data := []string{"--data", st.Nodes[0].DataDir, "--api", st.Nodes[0].API}
	script := filepath.Join(st.Dir, "demo-job.sh")
	input := filepath.Join(st.Dir, "demo-input.txt")
	if err := os.WriteFile(script, []byte(demoJob), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(input, []byte("input file delivered"), 0o644); err != nil {
		return err
	}
	gm := func(args ...string) ([]byte, error) { return c.demoOutput(ctx, st, bin, args...) }
	show := func(title string, mayErr bool, args ...string) error {
		return c.demoShow(ctx, st, title, mayErr, bin, args...)
	}
	runArgs := append([]string{"run", "vram>=24", "--count", "1", "--max-price", "1.50", "--hours", "1",
		"--receipt-interval", "1s", "--checkpoint-every", "1s", "--file", script + ":job.sh", "--file", input + ":input.txt",
		"--allow-unproven", "--allow-simulated", "--detach", "--json"}, data...)
	runArgs = append(runArgs, "--", "sh", "job.sh")
	var started struct {
		JobID    string `json:"job_id"`
		Supplier string `json:"supplier"`
	}
	if err := c.demoRun(ctx, st, "node 0 rents a GPU with 24 GiB or more (proven suppliers first: node 1, which it passed; --allow-unproven lets the job fail over to the others) and runs a job on it; node 0 pays each receipt and pulls checkpoints", bin, runArgs, &started); err != nil {
		return err
	}
	victim := nodeOf(st, started.Supplier)
	if victim < 0 {
		return fmt.Errorf("testnet: demo: the job's supplier %s is not a testnet node", started.Supplier)
	}
	// Wait until node 0 holds a checkpoint pulled after step 8 was
	// logged, so from step 8 or later (one pulled before may predate the
	// job's first rename: receipt 1 comes as the job starts).
	deadline := time.Now().Add(60 * time.Second)
	checkpoint := func() string {
		var v struct {
			Checkpoint string `json:"checkpoint"`
		}
		if b, err := gm(append([]string{"jobs", started.JobID, "--json"}, data...)...); err == nil && json.Unmarshal(b, &v) == nil {
			return v.Checkpoint
		}
		return ""
	}
	before, seen := "", false
	for {
		c := checkpoint()
		if !seen {
			if logs, err := gm(append([]string{"logs", started.JobID}, data...)...); err == nil && strings.Contains(string(logs), "step 8\n") {
				before, seen = c, true
			}
		} else if c != "" && c != before {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("testnet: demo: the job made no checkpoint after step 8 within 60 s")
		}
		time.Sleep(300 * time.Millisecond)
	}
	fmt.Fprintf(c.stdout, "# the job's supplier, node %d, dies: kill -9 %d\n\n", victim, st.Nodes[victim].PID)
	if err := syscall.Kill(st.Nodes[victim].PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testnet: demo: kill node %d: %w", victim, err)
	}
	if err := show("node 0 notices, rents elsewhere and resumes from the last checkpoint (JOB_ATTEMPT=2); follow the output to the end", false,
		append([]string{"logs", "-f", started.JobID}, data...)...); err != nil {
		return err
	}
	if err := show("the job's attempts and what each was paid", false, append([]string{"jobs", started.JobID}, data...)...); err != nil {
		return err
	}
	if err := show("the bill: every receipt and voucher signature, the hash chains and the sums, checked", false,
		append([]string{"receipts", "--verify"}, data...)...); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "# node %d comes back (its copy of the job died with it and is closed as interrupted)\n", victim)
	info, err := testnet.Restart(ctx, st.Dir, victim)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "node %d restarted as pid %d\n", victim, info.PID)
	return nil
}

// nsNote is how the demo shows that a command runs in node 0's namespace.
func nsNote(st *testnet.State) string {
	if len(st.Nodes) > 0 && st.Nodes[0].NS != "" {
		return "ip netns exec " + st.Nodes[0].NS + " "
	}
	return ""
}

// wan runs the WAN of the namespace testnet in --dir until SIGTERM; `up
// --netns` starts it detached and reads "ready" from its stdout.
func (c *cli) wan(ctx context.Context, args []string) error {
	fs, dir := c.flags("wan")
	if err := c.noArgs(fs, args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	return testnet.RunWAN(ctx, abs, log, func() {
		fmt.Fprintln(c.stdout, "ready")
		if f, ok := c.stdout.(*os.File); ok {
			f.Close() // the parent stops reading
		}
	})
}

// step is one command of the demo.
type step struct {
	title  string
	args   []string
	mayErr bool // the step shows a failure on purpose
	pause  time.Duration
}

// impostor is the index of the testnet's first impostor, or -1.
func impostor(st *testnet.State) int {
	for i := range st.Nodes {
		if testnet.ProfileFor(i).Cheat != "" {
			return i
		}
	}
	return -1
}

// honestPeer is an honest supplier other than node 0, or -1.
func honestPeer(st *testnet.State) int {
	for i := 1; i < len(st.Nodes); i++ {
		if testnet.ProfileFor(i).Cheat == "" {
			return i
		}
	}
	return -1
}

// ProfileNote describes node i for the demo.
func ProfileNote(i int) string {
	p := testnet.ProfileFor(i)
	if p.Cheat != "" {
		return p.GPUs + ", an impostor: " + p.Cheat
	}
	return p.GPUs + ", honest"
}

func (c *cli) noArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Errorf("%s: unexpected arguments %q", fs.Name(), pos)}
	}
	return nil
}

// cut returns the partition (on) or heal command: it asks the running
// namespace testnet's WAN to cut, or restore, the link between two
// regions, both ways.
func (c *cli) cut(on bool) func(context.Context, []string) error {
	name := map[bool]string{true: "partition", false: "heal"}[on]
	return func(ctx context.Context, args []string) error {
		fs, dir := c.flags(name)
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return usageError{fmt.Errorf("%s: want two regions, e.g. testnet %s eu-west ap-south", name, name)}
		}
		st, err := testnet.Load(*dir)
		if err != nil {
			return err
		}
		if on {
			err = st.Partition(ctx, pos[0], pos[1])
		} else {
			err = st.Heal(ctx, pos[0], pos[1])
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "testnet: %s %s <-> %s\n", map[bool]string{true: "cut", false: "healed"}[on], pos[0], pos[1])
		return nil
	}
}
