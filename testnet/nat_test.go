package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/testnet/netlab"
)

// natNet is a 12-node namespace testnet for the NAT tests: nodes 1, 4, 7
// and 10 public (four, because libp2p takes an observed address only once
// four peers agree on it), 0, 3, 6 and 9 behind cone NATs, 2, 5, 8 and 11
// behind symmetric NATs. Node 0 is the renter.
type natNet struct {
	t   testing.TB
	st  *State
	lab *netlab.Lab
	bin string
}

func startNATNet(t testing.TB) *natNet {
	t.Helper()
	return startLab(t, Options{Nodes: 12})
}

// startLab starts a namespace testnet of o.Nodes nodes (o.Kinds places
// them; o.ExtraArgs adds flags) for a test, and removes it and its
// namespaces when the test ends, keeping the nodes' logs and data when
// it failed.
func startLab(t testing.TB, o Options) *natNet {
	t.Helper()
	if testing.Short() {
		t.Skipf("starts %d real gpumesh processes in namespaces; skipped with -short", o.Nodes)
	}
	if err := netlab.Check(); err != nil {
		testenv.Skip(t, testenv.Netlab, "%v", err)
	}
	bin, wanBin := binary(t), testnetBinary(t)
	// The state dir (node logs, data) is kept when the test fails.
	dir, err := os.MkdirTemp("", "nat-testnet-")
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("nt%d", os.Getpid()%1000000)
	t.Cleanup(func() {
		if t.Failed() {
			for i := range o.Nodes {
				t.Logf("node %d log tail:%s", i, logTail(filepath.Join(dir, fmt.Sprintf("node-%d.log", i)), 15))
			}
		}
		if err := Down(dir); err != nil && !errors.Is(err, ErrNotRunning) {
			t.Errorf("Down: %v", err)
		}
		if err := CleanupNetns(prefix); err != nil {
			t.Errorf("CleanupNetns: %v", err)
		}
		if t.Failed() {
			t.Logf("node logs and data kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 240*time.Second)
	defer cancel()
	start := time.Now()
	o.Binary, o.Dir, o.Netns, o.Prefix, o.WANBinary, o.Logger = bin, dir, true, prefix, wanBin, testLogger(t)
	st, err := Up(ctx, o)
	if err != nil {
		t.Fatalf("Up --netns: %v", err)
	}
	t.Logf("%d nodes up in namespaces in %s", o.Nodes, time.Since(start).Round(time.Millisecond))
	lab, err := st.Netns.attach()
	if err != nil {
		t.Fatal(err)
	}
	return &natNet{t: t, st: st, lab: lab, bin: bin}
}

// gm runs the gpumesh CLI as node 0's user, inside node 0's namespace,
// against node 0's API.
func (n *natNet) gm(ctx context.Context, args ...string) ([]byte, error) {
	return n.gmAt(ctx, 0, args...)
}

// gmAt runs the gpumesh CLI inside node i's namespace, against node i's
// API.
func (n *natNet) gmAt(ctx context.Context, i int, args ...string) ([]byte, error) {
	// The flags go before the command's own arguments, which may end in
	// "--" and a job's argv.
	args = append([]string{args[0], "--data", n.st.Nodes[i].DataDir, "--api", n.st.Nodes[i].API}, args[1:]...)
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.st.Nodes[i].NS, n.bin}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	return cmd.CombinedOutput()
}

// client is node i's API, reached inside node i's namespace.
func (n *natNet) client(i int) *api.Client {
	c, err := api.ClientForDataDir(n.st.Nodes[i].API, n.st.Nodes[i].DataDir, api.WithDialer(labDialer(n.lab, n.st.Nodes[i].Host)))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(c.Close)
	return c
}

// public is the public address of node i: its own, or its NAT router's.
func (n *natNet) public(i int) netip.Addr {
	node, ok := n.lab.Node(n.st.Nodes[i].Host)
	if !ok {
		n.t.Fatalf("node %d: host %q not in the lab", i, n.st.Nodes[i].Host)
	}
	return node.Public
}

// offers are node 0's offers for filter, as its own node sees them.
func (n *natNet) offers(ctx context.Context, filter string) []market.Offer {
	offers, err := n.client(0).Offers(ctx, filter)
	if err != nil {
		n.t.Fatalf("offers %q: %v", filter, err)
	}
	return offers
}

// waitReach waits until node 0 sees node i's profile with reach want.
func (n *natNet) waitReach(ctx context.Context, i int, want string) {
	n.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		for _, o := range n.offers(ctx, "") {
			if o.PeerID == n.st.Nodes[i].PeerID {
				last = o.Reach
				if o.Reach == want {
					return
				}
			}
		}
		time.Sleep(time.Second)
	}
	n.t.Fatalf("node %d (%s): node 0 sees reach %q, want %q", i, n.st.Nodes[i].NAT, last, want)
}

// conn is how node 0 is connected to node i: "direct", "relayed" or "".
func (n *natNet) conn(ctx context.Context, i int) string { return n.connAt(ctx, 0, i) }

// connAt is how node from is connected to node i.
func (n *natNet) connAt(ctx context.Context, from, i int) string {
	peers, err := n.client(from).Peers(ctx)
	if err != nil {
		n.t.Fatalf("peers: %v", err)
	}
	for _, p := range peers {
		if p.ID.String() == n.st.Nodes[i].PeerID {
			return p.Conn
		}
	}
	return ""
}

// runJob starts a job on a supplier that filter picks, from node 0, and
// returns its ID and supplier.
func (n *natNet) runJob(ctx context.Context, filter string, argv ...string) (id, supplier string, err error) {
	return n.runJobAt(ctx, 0, filter, argv...)
}

// runJobAt is runJob from node i.
func (n *natNet) runJobAt(ctx context.Context, i int, filter string, argv ...string) (id, supplier string, err error) {
	args := append([]string{"run", filter, "--count", "1", "--max-price", "5", "--hours", "1",
		"--receipt-interval", "1s", "--allow-unproven", "--allow-simulated", "--detach", "--json", "--"}, argv...)
	out, err := n.gmAt(ctx, i, args...)
	if err != nil {
		return "", "", fmt.Errorf("run %q: %w: %s", filter, err, out)
	}
	var started struct {
		JobID    string `json:"job_id"`
		Supplier string `json:"supplier"`
	}
	if err := json.Unmarshal(out, &started); err != nil {
		return "", "", fmt.Errorf("run printed %q: %w", out, err)
	}
	return started.JobID, started.Supplier, nil
}

// waitJob waits until node 0's job id is in a final state and returns it.
func (n *natNet) waitJob(ctx context.Context, id string, limit time.Duration) job.View {
	n.t.Helper()
	return n.waitJobAt(ctx, 0, id, limit)
}

// waitJobAt is waitJob for a job of node i.
func (n *natNet) waitJobAt(ctx context.Context, i int, id string, limit time.Duration) job.View {
	return n.waitJobFor(n.t, ctx, i, id, limit)
}

// waitJobFor is waitJobAt failing t, which may be a subtest's.
func (n *natNet) waitJobFor(t testing.TB, ctx context.Context, i int, id string, limit time.Duration) job.View {
	t.Helper()
	deadline := time.Now().Add(limit)
	var v job.View
	for time.Now().Before(deadline) {
		var err error
		if v, err = n.client(i).Job(ctx, id); err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		switch v.State {
		case job.StateSucceeded, job.StateFailed, job.StateStopped:
			return v
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("job %s not done within %s: %+v", id, limit, v)
	return v
}

// TestNATTraversal runs the market across NATs in one 12-node namespace
// testnet with WAN latency between regions:
//   - every node learns its reach, and renters see it;
//   - a renter behind a cone NAT challenges and runs a job on a supplier
//     behind another cone NAT, over a direct, hole-punched connection
//     (the WAN carried bytes between the two routers' public addresses);
//   - a job for a supplier behind a symmetric NAT is refused at once,
//     saying why, and runs there when the renter is public;
//   - a partition between regions, and its healing.
func TestNATTraversal(t *testing.T) {
	n := startNATNet(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	// Node 3 is behind a cone NAT, node 2 a symmetric one, node 1 public.
	n.waitReach(ctx, 1, "public")
	n.waitReach(ctx, 3, "punchable")
	n.waitReach(ctx, 2, "relay-only")

	t.Run("cone to cone: challenge and job over a hole-punched connection", func(t *testing.T) {
		supplier := n.st.Nodes[3]
		out, err := n.gm(ctx, "challenge", supplier.PeerID, "--json")
		if err != nil {
			t.Fatalf("challenge node 3 across two NATs: %v: %s", err, out)
		}
		var rep api.ChallengeReport
		if err := json.Unmarshal(out, &rep); err != nil || !rep.Passed {
			t.Fatalf("challenge node 3: passed=%v %s (%v): %s", rep.Passed, rep.Reason, err, out)
		}
		before, _, err := n.st.Flow(ctx, n.public(0), n.public(3))
		if err != nil {
			t.Fatal(err)
		}
		// l40s is sold by node 3 (cone) and node 8 (symmetric); the job
		// path leaves relay-only suppliers out, so it lands on node 3.
		id, on, err := n.runJob(ctx, "model=l40s", "sh", "-c", "echo hello from behind two NATs; head -c 300000 /dev/zero | tr '\\0' x; echo")
		if err != nil {
			t.Fatal(err)
		}
		if on != supplier.PeerID {
			t.Fatalf("job %s on %s, want node 3 %s (the only punchable l40s supplier)", id, on, supplier.PeerID)
		}
		v := n.waitJob(ctx, id, 2*time.Minute)
		if v.State != job.StateSucceeded {
			t.Fatalf("job %s: %s (%s)", id, v.State, v.Message)
		}
		if c := n.conn(ctx, 3); c != "direct" {
			t.Errorf("node 0's connection to node 3 is %q after the job, want direct (hole-punched)", c)
		}
		after, bytes, err := n.st.Flow(ctx, n.public(0), n.public(3))
		if err != nil {
			t.Fatal(err)
		}
		_, back, _ := n.st.Flow(ctx, n.public(3), n.public(0))
		t.Logf("WAN flow between the two NATs' public addresses: %d packets (%d before the job), %d bytes out, %d bytes back", after, before, bytes, back)
		// The job's 300 kB of log came straight from router to router:
		// through a relay it would have gone to the relay's address.
		if back < 300_000 {
			t.Errorf("only %d bytes went straight from node 3's NAT to node 0's: the job did not run over a direct connection", back)
		}
	})

	t.Run("symmetric NAT: the renter is told at once", func(t *testing.T) {
		start := time.Now()
		// a100-80gb: node 2 (symmetric) and node 7 (public); ask for the
		// symmetric one by its reach.
		_, _, err := n.runJob(ctx, "model=a100-80gb reach=relay-only", "true")
		took := time.Since(start)
		if err == nil {
			t.Fatal("a job for a relay-only supplier started")
		}
		if !strings.Contains(err.Error(), "symmetric NAT") || !strings.Contains(err.Error(), "cannot be reached") {
			t.Errorf("the refusal does not say why (the supplier is behind a symmetric NAT and cannot be reached): %v", err)
		}
		if took > 30*time.Second {
			t.Errorf("the refusal took %s: the renter was left waiting", took)
		}
		t.Logf("refused in %s: %v", took.Round(time.Millisecond), err)
	})

	t.Run("symmetric NAT: a public renter runs there over a direct connection", func(t *testing.T) {
		// Node 1 is public: the supplier behind the symmetric NAT (node
		// 2, the only relay-only a100-80gb) dials it back directly.
		id, on, err := n.runJobAt(ctx, 1, "model=a100-80gb reach=relay-only", "sh", "-c", "echo hello from behind a symmetric NAT; head -c 300000 /dev/zero | tr '\\0' x; echo")
		if err != nil {
			t.Fatal(err)
		}
		if on != n.st.Nodes[2].PeerID {
			t.Fatalf("job %s on %s, want node 2 %s", id, on, n.st.Nodes[2].PeerID)
		}
		if v := n.waitJobAt(ctx, 1, id, 2*time.Minute); v.State != job.StateSucceeded {
			t.Fatalf("job %s: %s (%s)", id, v.State, v.Message)
		}
		if c := n.connAt(ctx, 1, 2); c != "direct" {
			t.Errorf("node 1's connection to node 2 is %q after the job, want direct", c)
		}
	})

	t.Run("partition: heartbeats stop and come back, the job fails over", func(t *testing.T) {
		// A job on a supplier in another region than node 0's (eu-west),
		// most likely node 3 behind its cone NAT in ap-south (node 0
		// proved it in the first subtest, and proven suppliers come
		// first). Its region is cut off from both others, then healed;
		// the job fails over to a supplier of the other region. The
		// filter leaves several there: under load, an honest simulated
		// supplier can fail a timing challenge of the audit loop and fall
		// below the reputation floor.
		id, on, err := n.runJob(ctx, "vram>=24 reach!=relay-only region!=eu-west", "sh", "-c",
			`s=0; [ -f "$CHECKPOINT_DIR/s" ] && s=$(cat "$CHECKPOINT_DIR/s"); while [ $s -lt 60 ]; do s=$((s+1)); echo $s > "$CHECKPOINT_DIR/s"; echo step $s; sleep 0.5; done`)
		if err != nil {
			t.Fatal(err)
		}
		victim := -1
		for i, node := range n.st.Nodes {
			if node.PeerID == on {
				victim = i
			}
		}
		if victim < 0 || n.st.Nodes[victim].Region == n.st.Nodes[0].Region {
			t.Fatalf("job on %s (node %d), want a supplier outside eu-west", on, victim)
		}
		region := n.st.Nodes[victim].Region
		t.Logf("the job runs on node %d (%s, %s)", victim, n.st.Nodes[victim].NAT, region)
		var others []string // every other region: gossip would route around a cut of one pair
		for _, node := range n.st.Nodes {
			if node.Region != region && !slices.Contains(others, node.Region) {
				others = append(others, node.Region)
			}
		}
		heard := func() time.Time {
			peers, err := n.client(0).Peers(ctx)
			if err != nil {
				t.Fatalf("peers: %v", err)
			}
			for _, p := range peers {
				if p.ID.String() == on {
					return p.LastSeen
				}
			}
			return time.Time{}
		}
		time.Sleep(3 * time.Second) // the job runs a while
		t.Logf("cutting %s (node %d's region) off from %v", region, victim, others)
		for _, o := range others {
			if err := n.st.Partition(ctx, region, o); err != nil {
				t.Fatal(err)
			}
		}
		healed := false
		heal := func() {
			if healed {
				return
			}
			healed = true
			for _, o := range others {
				if err := n.st.Heal(ctx, region, o); err != nil {
					t.Error(err)
				}
			}
		}
		defer heal()
		time.Sleep(3 * time.Second) // heartbeats already in flight land
		cut := heard()
		// The renter loses its supplier: the job moves on, as when the
		// supplier is killed.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			v, err := n.client(0).Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if v.Supplier != on && v.Attempt > 1 {
				t.Logf("failed over to %s (attempt %d) after the partition", v.Supplier, v.Attempt)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still on %s 2 min after the partition: %+v", id, on, v)
			}
			time.Sleep(time.Second)
		}
		if got := heard(); got.After(cut) {
			t.Errorf("node 0 heard node %d while its region was cut off (last seen %s, then %s)", victim, cut, got)
		}
		heal()
		// The links come back at once and keepBootstrap redials within
		// 10 s, but GossipSub's mesh can take longer: peers that pruned
		// each other while the links were dead back off for a minute
		// (PruneBackoff) and scored each other down for the messages
		// they missed, so the first heartbeats after healing may need
		// up to about two minutes to find a path.
		const healWait = 150 * time.Second
		deadline = time.Now().Add(healWait)
		healedAt := time.Now()
		for !heard().After(cut) {
			if time.Now().After(deadline) {
				t.Fatalf("node 0 has not heard node %d's heartbeat within %s of healing", victim, healWait)
			}
			time.Sleep(time.Second)
		}
		t.Logf("node 0 heard node %d again %s after healing", victim, time.Since(healedAt).Round(time.Second))
		if v := n.waitJob(ctx, id, 3*time.Minute); v.State != job.StateSucceeded {
			t.Fatalf("job %s after failover: %s (%s)", id, v.State, v.Message)
		}
	})
	t.Run("service: two replicas behind node 0's address, one supplier killed under load", func(t *testing.T) {
		n.serviceUnderKill(ctx, t)
	})
}

// natServer is a service job: an HTTP server that answers which replica
// served the request.
const natServer = `import os, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = ("replica %s\n" % os.environ["GPUMESH_JOB_ID"][:8]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// natLoad sends requests to a URL from several threads for some seconds,
// each on a new connection, and prints "OK FAILED".
const natLoad = `import sys, threading, time, urllib.request
url, secs, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
count = {"ok": 0, "fail": 0}
lock, end = threading.Lock(), time.time() + secs
def worker():
    while time.time() < end:
        k = "ok"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                r.read()
        except Exception:
            k = "fail"
        with lock:
            count[k] += 1
        time.sleep(0.05)
ts = [threading.Thread(target=worker) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(count["ok"], count["fail"])
`

// serviceUnderKill runs a service of two replicas from node 0 (behind
// its cone NAT) on suppliers it can reach directly, sends requests to
// node 0's local address from 10 clients inside node 0's namespace, kills
// one replica's supplier process with SIGKILL meanwhile, and checks that
// at least 99% of the requests succeed and that the replica is replaced
// on another supplier and healthy, behind the same address.
func (n *natNet) serviceUnderKill(ctx context.Context, t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, testenv.Python3, "the service job and the load need python3")
	}
	dir := t.TempDir()
	server, load := filepath.Join(dir, "server.py"), filepath.Join(dir, "load.py")
	if err := os.WriteFile(server, []byte(natServer), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(load, []byte(natLoad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := n.gm(ctx, "run", "vram>=24 reach!=relay-only", "--count", "1", "--max-price", "5", "--hours", "1",
		"--replicas", "2", "--port", "8000", "--publish", "127.0.0.1:0:8000", "--health", "/", "--health-grace", "2m",
		"--receipt-interval", "1s", "--credit-limit", "0.10", "--file", server+":server.py",
		"--allow-unproven", "--allow-simulated", "--detach", "--json", "--", "python3", "server.py", "8000")
	if err != nil {
		t.Fatalf("run --replicas 2: %v: %s", err, out)
	}
	var started job.View
	if err := json.Unmarshal(out, &started); err != nil || len(started.Publish) != 1 {
		t.Fatalf("run printed %q (%v)", out, err)
	}
	url := "http://" + started.Publish[0].Listen + "/"
	replicas := func() []job.View {
		all, err := n.client(0).Jobs(ctx)
		if err != nil {
			t.Fatalf("jobs: %v", err)
		}
		var mine []job.View
		for _, v := range all {
			if v.Group == started.JobID {
				mine = append(mine, v)
			}
		}
		return mine
	}
	waitHealthy := func(what string, extra func([]job.View) bool) []job.View {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			rs := replicas()
			if len(rs) == 2 && rs[0].Health == "healthy" && rs[1].Health == "healthy" && rs[0].Supplier != rs[1].Supplier && extra(rs) {
				return rs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 3 minutes: %+v", what, rs)
			}
			time.Sleep(time.Second)
		}
	}
	rs := waitHealthy("two healthy replicas", func([]job.View) bool { return true })
	victimJob, victim := rs[0], -1
	for i, node := range n.st.Nodes {
		if node.PeerID == victimJob.Supplier {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("replica %s runs on %s, not a testnet node", victimJob.JobID, victimJob.Supplier)
	}
	loadCmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.st.Nodes[0].NS, "python3", load, url, "60", "10")
	var stdout strings.Builder
	loadCmd.Stdout, loadCmd.Stderr = &stdout, &stdout
	if err := loadCmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	t.Logf("kill -9 node %d (%s), the supplier of replica %s", victim, n.st.Nodes[victim].NAT, victimJob.JobID[:8])
	if err := syscall.Kill(n.st.Nodes[victim].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	if err := loadCmd.Wait(); err != nil {
		t.Fatalf("load: %v: %s", err, stdout.String())
	}
	var ok, failed int
	if _, err := fmt.Sscan(stdout.String(), &ok, &failed); err != nil {
		t.Fatalf("load printed %q: %v", stdout.String(), err)
	}
	total := ok + failed
	t.Logf("10 clients for 60 s, one replica's supplier killed after 10 s: %d requests, %d failed (%.2f%%)", total, failed, 100*float64(failed)/float64(max(total, 1)))
	if total < 100 || float64(failed) > 0.01*float64(total) {
		t.Errorf("%d of %d requests failed, want at most 1%%", failed, total)
	}
	waitHealthy("the replica replaced", func(rs []job.View) bool {
		for _, r := range rs {
			if r.JobID == victimJob.JobID {
				return r.Attempt > victimJob.Attempt && r.Supplier != victimJob.Supplier
			}
		}
		return false
	})
	t.Logf("the replica was replaced and healthy %s after its supplier was killed", time.Since(killedAt).Round(time.Second))
	if v, err := n.client(0).Job(ctx, started.JobID); err != nil || len(v.Publish) != 1 || v.Publish[0].Listen != started.Publish[0].Listen {
		t.Errorf("the address moved: %+v (%v)", v.Publish, err)
	}
	for _, r := range replicas() {
		if _, err := n.client(0).StopJob(ctx, r.JobID, "test over"); err != nil {
			t.Errorf("stop %s: %v", r.JobID, err)
		}
	}
}
