package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/testnet"
)

// The cluster figures (gpumesh run --nodes N), on a testnet of their own
// whose suppliers give jobs networks (root):
//
//   - ringcheck.py's ring all-reduce bandwidth and small-message round
//     trip between three members over the mesh (each TCP connection a
//     libp2p stream between the members' suppliers), beside the same
//     program in three network namespaces on one bridge of plain veths;
//   - the time from a request to every member of a three-member cluster
//     running, beside the same for one job on one lease;
//   - the time from a member's supplier killed to every rank running
//     again, in stages.

// clusterNodes is the cluster testnet's size: three members, and
// suppliers left to lease a cluster again after one is killed.
const clusterNodes = 6

// ringcheckArgs is the all-reduce the bandwidth is measured with, over
// the mesh and over the veths alike.
var ringcheckArgs = []string{"--mib", "8", "--steps", "6", "--pings", "50", "--no-member-check"}

// clusterRows measures the cluster figures; without root each row says
// why it was not measured.
func clusterRows(ctx context.Context, c config, log *slog.Logger) ([]Row, error) {
	names := []string{
		"cluster all-reduce bus bandwidth, 3 members over the mesh (ringcheck.py, 8 MiB ring all-reduce; 127.0.0.1 testnet with job networks)",
		"cluster small-message round trip between two members over the mesh (ringcheck.py, 8 bytes, p50)",
		"cluster formation: request → all 3 members running, p50 of 3",
		"cluster member lost: supplier killed (kill -9) → every rank running again, 3 members",
	}
	if os.Geteuid() != 0 {
		rows := make([]Row, len(names))
		for i, n := range names {
			rows[i] = Row{Figure: n, Value: "not measured: job networks need root", Goal: "—"}
		}
		return rows, nil
	}
	script, err := os.ReadFile("testnet/workloads/ringcheck.py")
	if err != nil {
		return nil, fmt.Errorf("cluster figures: run from the repository root: %w", err)
	}
	dir := c.dir + "-cluster"
	fmt.Fprintf(os.Stderr, "starting a %d-node testnet with job networks for the cluster figures...\n", clusterNodes)
	_ = testnet.Down(dir)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	st, err := testnet.Up(ctx, testnet.Options{Binary: c.bin, Dir: dir, Nodes: clusterNodes, JobNetwork: true, Logger: log, HeartbeatInterval: c.hb, AuditInterval: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer testnet.Down(dir)
	rc, err := api.ClientForDataDir(st.Nodes[0].API, st.Nodes[0].DataDir)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := clusterBench{rc: rc, st: st, script: script}

	var rows []Row
	fmt.Fprintln(os.Stderr, "cluster: ringcheck.py over the mesh and over plain veths...")
	mesh, err := b.ringcheckMesh(ctx)
	if err != nil {
		return nil, err
	}
	veth, err := ringcheckVeth(ctx, script)
	if err != nil {
		return nil, err
	}
	bw := mesh.BusBW / veth.BusBW
	rows = append(rows, Row{Figure: names[0], Value: fmt.Sprintf("%.1f MB/s", mesh.BusBW),
		Baseline: fmt.Sprintf("%.1f MB/s the same program in 3 network namespaces on one bridge of veths", veth.BusBW),
		Ratio:    bw, Goal: "≥ 0.5×", Met: met(bw >= 0.5)})
	rtt, raw := time.Duration(mesh.RTTms*float64(time.Millisecond)), time.Duration(veth.RTTms*float64(time.Millisecond))
	rows = append(rows, Row{Figure: names[1], Value: msStr(rtt), Baseline: msStr(raw) + " the same over the veths",
		Ratio: float64(rtt) / float64(raw), Goal: "≤ 2× + 1 ms", Met: met(rtt <= 2*raw+time.Millisecond)})

	fmt.Fprintln(os.Stderr, "cluster: formation beside one lease...")
	var forms, singles, threes []time.Duration
	for range 3 {
		d, err := b.formation(ctx, 0)
		if err != nil {
			return nil, err
		}
		singles = append(singles, d)
		if d, err = b.formation(ctx, 3); err != nil {
			return nil, err
		}
		forms = append(forms, d)
		if d, err = b.threeAtOnce(ctx); err != nil {
			return nil, err
		}
		threes = append(threes, d)
	}
	r := ratioRow(names[2], pct(forms, 50), pct(singles, 50), "one job on one lease: request → running", 2)
	r.Value += fmt.Sprintf(" (three single jobs requested at once, on suppliers sharing this machine's %d cores: all running in %s)", runtime.NumCPU(), msStr(pct(threes, 50)))
	rows = append(rows, r)

	fmt.Fprintln(os.Stderr, "cluster: a member's supplier killed...")
	loss, err := b.memberLoss(ctx)
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{Figure: names[3], Value: fmt.Sprintf("%s: loss seen %s, leased again %s later, all running %s later",
		loss.total().Round(time.Millisecond), loss.detect.Round(time.Millisecond), loss.lease.Round(time.Millisecond), loss.start.Round(time.Millisecond)),
		Goal: "—"})
	return rows, nil
}

// clusterBench is the cluster testnet, driven from node 0's API.
type clusterBench struct {
	rc     *api.Client
	st     *testnet.State
	script []byte
}

// ringcheckResult is ringcheck.py's last line on rank 0.
type ringcheckResult struct {
	BusBW float64 `json:"busbw_MBps"`
	RTTms float64 `json:"rtt_ms"`
	Steps int     `json:"steps"`
}

// parseRingcheck finds ringcheck.py's result line in out.
func parseRingcheck(out []byte) (ringcheckResult, error) {
	var r ringcheckResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "ringcheck "); ok {
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				return r, fmt.Errorf("ringcheck's result %q: %w", line, err)
			}
			if r.BusBW <= 0 || r.RTTms <= 0 {
				return r, fmt.Errorf("ringcheck's result %q: no bandwidth or round trip", line)
			}
			return r, nil
		}
	}
	return r, fmt.Errorf("no ringcheck result in its output:\n%s", out)
}

// request is a cluster (nodes > 0) or a single job of argv.
func (b *clusterBench) request(nodes int, argv ...string) api.JobRequest {
	return api.JobRequest{Filter: "vram>=24", Count: 1, Hours: 1, MaxPrice: "3.00", AllowUnproven: true, AllowSimulated: true,
		ReceiptInterval: "1s", CheckpointEvery: "1s", Nodes: nodes, Argv: argv,
		Files: []api.JobFile{{Path: "ringcheck.py", Mode: 0o644, Data: b.script}}}
}

// ringcheckMesh runs ringcheck.py as a cluster of three and returns rank
// 0's result.
func (b *clusterBench) ringcheckMesh(ctx context.Context) (ringcheckResult, error) {
	v, err := b.rc.SubmitJob(ctx, b.request(3, append([]string{"python3", "ringcheck.py"}, ringcheckArgs...)...))
	if err != nil {
		return ringcheckResult{}, fmt.Errorf("ringcheck cluster: %w", err)
	}
	v, err = b.until(ctx, v.JobID, 3*time.Minute, func(v job.View) bool { return ended(v.State) })
	if err != nil {
		return ringcheckResult{}, err
	}
	var out bytes.Buffer
	if err := b.rc.Logs(ctx, v.JobID, 0, false, &out); err != nil {
		return ringcheckResult{}, err
	}
	if v.State != job.StateSucceeded {
		return ringcheckResult{}, fmt.Errorf("ringcheck cluster %s: %s (%s); rank 0's output:\n%s", v.JobID[:12], v.State, v.Message, out.Bytes())
	}
	return parseRingcheck(out.Bytes())
}

// formation times a request to every member running (a single job:
// to its process running), then stops the job and waits for its end.
func (b *clusterBench) formation(ctx context.Context, nodes int) (time.Duration, error) {
	t0 := time.Now()
	v, err := b.rc.SubmitJob(ctx, b.request(nodes, "sleep", "300"))
	if err != nil {
		return 0, fmt.Errorf("formation of %d: %w", nodes, err)
	}
	if _, err := b.until(ctx, v.JobID, 2*time.Minute, allRunning(1)); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	return took, b.stop(ctx, v.JobID)
}

// threeAtOnce times three single jobs requested at once until all run:
// the share of a cluster's formation that is three starts on suppliers
// that share this machine's cores.
func (b *clusterBench) threeAtOnce(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	var (
		ids  [3]string
		errs [3]error
		wg   sync.WaitGroup
	)
	for i := range ids {
		wg.Go(func() {
			v, err := b.rc.SubmitJob(ctx, b.request(0, "sleep", "300"))
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = v.JobID
			_, errs[i] = b.until(ctx, v.JobID, 2*time.Minute, allRunning(1))
		})
	}
	wg.Wait()
	took := time.Since(t0)
	all := errs[:]
	for _, id := range ids {
		if id != "" {
			all = append(all, b.stop(ctx, id))
		}
	}
	if err := errors.Join(all...); err != nil {
		return 0, fmt.Errorf("three single jobs at once: %w", err)
	}
	return took, nil
}

// allRunning: the job, or every member of a cluster, runs in its
// attempt-th attempt or a later one.
func allRunning(attempt uint32) func(job.View) bool {
	return func(v job.View) bool {
		if len(v.Members) == 0 {
			return v.State == job.StateRunning && v.Attempt >= attempt
		}
		for _, m := range v.Members {
			if m.State != job.StateRunning || m.Attempt < attempt {
				return false
			}
		}
		return true
	}
}

// lossStages is the time from a member's supplier killed to every rank
// running again: until the renter's node saw the member lost, from then
// until all members were leased again, and from then until all ran.
type lossStages struct{ detect, lease, start time.Duration }

func (l lossStages) total() time.Duration { return l.detect + l.lease + l.start }

// memberLoss runs a cluster of three, kills rank 1's supplier and times
// the stages until every rank runs again.
func (b *clusterBench) memberLoss(ctx context.Context) (lossStages, error) {
	v, err := b.rc.SubmitJob(ctx, b.request(3, "sleep", "600"))
	if err != nil {
		return lossStages{}, fmt.Errorf("member loss: %w", err)
	}
	id := v.JobID
	defer b.stop(ctx, id)
	if v, err = b.until(ctx, id, 2*time.Minute, allRunning(1)); err != nil {
		return lossStages{}, err
	}
	victim := slices.IndexFunc(b.st.Nodes, func(n testnet.NodeInfo) bool { return n.PeerID == v.Members[1].Supplier })
	if victim <= 0 {
		return lossStages{}, fmt.Errorf("member loss: rank 1's supplier %s is not a supplier of the testnet but node 0", v.Members[1].Supplier)
	}
	if err := syscall.Kill(b.st.Nodes[victim].PID, syscall.SIGKILL); err != nil {
		return lossStages{}, fmt.Errorf("member loss: kill node %d: %w", victim, err)
	}
	t0 := time.Now()
	var s lossStages
	if _, err := b.until(ctx, id, 3*time.Minute, func(v job.View) bool { return v.Members[1].State != job.StateRunning || v.Members[1].Attempt > 1 }); err != nil {
		return s, err
	}
	s.detect = time.Since(t0)
	if _, err := b.until(ctx, id, 3*time.Minute, func(v job.View) bool {
		return !slices.ContainsFunc(v.Members, func(m job.MemberView) bool { return m.Attempt < 2 })
	}); err != nil {
		return s, err
	}
	s.lease = time.Since(t0) - s.detect
	if _, err := b.until(ctx, id, 3*time.Minute, allRunning(2)); err != nil {
		return s, err
	}
	s.start = time.Since(t0) - s.detect - s.lease
	return s, nil
}

// until polls job id every 20 ms until ok holds of its view, or fails
// after limit (or when the job ends while ok does not hold).
func (b *clusterBench) until(ctx context.Context, id string, limit time.Duration, ok func(job.View) bool) (job.View, error) {
	deadline := time.Now().Add(limit)
	for {
		v, err := b.rc.Job(ctx, id)
		if err == nil && ok(v) {
			return v, nil
		}
		if err == nil && ended(v.State) {
			return v, fmt.Errorf("job %s ended %s (%s) before the awaited state", id[:12], v.State, v.Message)
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("job %s: not in the awaited state after %s (last %v: %s)", id[:12], limit, err, v.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops job id and waits for it to end.
func (b *clusterBench) stop(ctx context.Context, id string) error {
	if _, err := b.rc.StopJob(ctx, id, "bench"); err != nil {
		return err
	}
	_, err := b.until(ctx, id, 2*time.Minute, func(v job.View) bool { return ended(v.State) })
	return err
}

// ringcheckVeth runs ringcheck.py as three processes in three network
// namespaces of its own, joined by veths to a bridge in a fourth, with
// the variables a cluster member gets: the baseline of the mesh. It
// removes the namespaces before it returns.
func ringcheckVeth(ctx context.Context, script []byte) (ringcheckResult, error) {
	const n = 3
	prefix := fmt.Sprintf("gmbench%d", os.Getpid())
	br := prefix + "-br"
	ns := func(r int) string { return fmt.Sprintf("%s-r%d", prefix, r) }
	defer func() {
		for r := range n {
			_ = exec.Command("ip", "netns", "del", ns(r)).Run()
		}
		_ = exec.Command("ip", "netns", "del", br).Run()
	}()
	ip := func(args ...string) error {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	steps := [][]string{{"netns", "add", br}, {"-n", br, "link", "add", "br0", "type", "bridge"}, {"-n", br, "link", "set", "br0", "up"}}
	addrs := make([]string, n)
	for r := range n {
		addrs[r] = fmt.Sprintf("100.64.0.%d", r+1)
		host := fmt.Sprintf("v%d", r)
		steps = append(steps,
			[]string{"netns", "add", ns(r)},
			[]string{"-n", ns(r), "link", "set", "lo", "up"},
			[]string{"-n", ns(r), "link", "add", "gm0", "type", "veth", "peer", "name", host, "netns", br},
			[]string{"-n", ns(r), "addr", "add", addrs[r] + "/24", "dev", "gm0"},
			[]string{"-n", ns(r), "link", "set", "gm0", "up"},
			[]string{"-n", br, "link", "set", host, "master", "br0"},
			[]string{"-n", br, "link", "set", host, "up"})
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return ringcheckResult{}, fmt.Errorf("the veth baseline: %w", err)
		}
	}
	f, err := os.CreateTemp("", "ringcheck-*.py")
	if err != nil {
		return ringcheckResult{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(script); err != nil {
		return ringcheckResult{}, err
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns(r), "python3", f.Name()}, ringcheckArgs...)...)
		cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR="+addrs[0], "MASTER_PORT=29500",
			"GPUMESH_CLUSTER_ADDRS="+strings.Join(addrs, ","), "JOB_ATTEMPT=1", "GLOO_SOCKET_IFNAME=gm0")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			return ringcheckResult{}, err
		}
		cmds[r] = cmd
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w: %s", r, err, outs[r].Bytes()))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ringcheckResult{}, fmt.Errorf("the veth baseline: %w", err)
	}
	return parseRingcheck(outs[0].Bytes())
}

// ended reports whether a job in state s is over.
func ended(s job.State) bool {
	return s == job.StateSucceeded || s == job.StateFailed || s == job.StateStopped
}
