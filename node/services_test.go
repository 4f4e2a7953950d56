package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/tunnel"
	"github.com/gpumesh/gpumesh/p2p"
)

// netnsChildEnv marks a test binary re-executed inside a network namespace
// its parent test made.
const netnsChildEnv = "GPUMESH_TEST_IN_NETNS"

// inOwnNetns runs the calling test again in a fresh network namespace of
// its own, with only a loopback, and reports whether this is that run.
// The parent (false) waits for the child, fails with it, and removes the
// namespace; the child (true) runs the test body. Jobs with networks of
// their own make veth links and nftables rules in the node's namespace,
// which must not be the machine's. It skips without root, ip or nft.
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(netnsChildEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Jobnet, "job networks need root")
	}
	for _, tool := range []string{"ip", "nft", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, testenv.Jobnet, "job networks (and this test's namespace) need %s", tool)
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	ns := "gmtest-" + hex.EncodeToString(rnd[:])
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				_ = exec.Command("kill", "-9", pid).Run()
			}
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// nsenter, not "ip netns exec", which mounts a sysfs of the
	// namespace's own over /sys and so hides the cgroup mounts container
	// engines need.
	args := []string{"--net=/run/netns/" + ns, bin, "-test.run", "^" + t.Name() + "$", "-test.v", "-test.count=1"}
	if dl, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout", time.Until(dl).Round(time.Second).String())
	}
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), netnsChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in network namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test in its namespace failed: %v", err)
	}
	if bytes.Contains(out, []byte("--- SKIP: "+t.Name())) {
		t.Skip("the test skipped in its namespace (see its output above)")
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the test in its namespace did not pass (skipped?)")
	}
	return false
}

// echoServer is the job's HTTP server: GET answers with the job and the
// attempt that serve it, POST echoes the body as it arrives. It listens on loopback
// only, inside the job's network.
const echoServer = `import os, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = ("job %s attempt %s\n" % (os.environ.get("GPUMESH_JOB_ID"), os.environ.get("JOB_ATTEMPT"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        n = int(self.headers["Content-Length"])
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        while n > 0:
            b = self.rfile.read(min(n, 1 << 20))
            if not b:
                break
            self.wfile.write(b)
            n -= len(b)

print("serving", flush=True)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// echoService is a request for an echoServer job on one rtx4090 serving
// port 8000, published on a free local port; edit changes it.
func echoService(t *testing.T, edit func(*job.Request)) job.Request {
	r := job.Request{AllowSimulated: true,
		Spec: &pb.JobSpec{
			Argv:  []string{"python3", "server.py", "8000"},
			Files: []*pb.File{{Path: "server.py", Data: []byte(echoServer)}},
			Ports: []*pb.Port{{Number: 8000, Protocol: "tcp"}},
		},
		Publish: []job.Publish{{Listen: "127.0.0.1:0", Port: 8000}},
		Filter:  mustFilter(t, "model=rtx4090"), RentTerms: market.RentTerms{Count: 1, Duration: time.Hour, MaxPrice: money.Unit}, MinReputation: 0.5, AllowUnproven: true,
		// Credit for several receipts: moving 200 MiB keeps both nodes
		// busy, and a voucher late by one receipt would halt the job.
		ReceiptInterval: 500 * time.Millisecond, CreditLimit: money.Unit / 10,
	}
	if edit != nil {
		edit(&r)
	}
	return r
}

// serviceNet is startJobNet with job networks, run in a network
// namespace of the test's own (inOwnNetns): nil in the parent process,
// whose test then returns. It skips without python3, which the job's
// server needs.
func serviceNet(t *testing.T) *jobNet {
	t.Helper()
	if !inOwnNetns(t) {
		return nil
	}
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, testenv.Python3, "the job's server needs python3")
	}
	return startJobNet(t, 3*time.Second, func(c *Config) { c.JobNetwork = true })
}

// TestServiceThroughForward: a renter runs an HTTP server job that
// declares port 8000 and publishes it on a local address. Requests and a
// 100 MiB body go through the address, the renter's node, a tunnel stream
// and the supplier into the job's own network and back intact; another
// peer and an undeclared port are refused; when the supplier is lost, the
// job fails over and the same local address reaches the new attempt.
func TestServiceThroughForward(t *testing.T) {
	jn := serviceNet(t)
	if jn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := jn.renter.Jobs().Submit(ctx, echoService(t, nil))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if len(v.Publish) != 1 || strings.HasSuffix(v.Publish[0].Listen, ":0") {
		t.Fatalf("published %+v, want one address with the port picked", v.Publish)
	}
	addr := "http://" + v.Publish[0].Listen
	client := &http.Client{Timeout: 60 * time.Second}
	get := func() string {
		resp, err := client.Get(addr + "/")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return ""
		}
		return string(b)
	}
	eventually(t, 30*time.Second, "the job's server to answer through the forward", func() bool { return strings.HasSuffix(get(), " attempt 1\n") })

	// 100 MiB up and back, checksummed.
	body := make([]byte, 100<<20)
	_, _ = rand.Read(body)
	start := time.Now()
	resp, err := client.Post(addr+"/echo", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST 100 MiB: %v", err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != int64(len(body)) || !bytes.Equal(h.Sum(nil), sha256Of(body)) {
		t.Fatalf("echo of 100 MiB: %d bytes, err %v, checksum match %v", n, err, bytes.Equal(h.Sum(nil), sha256Of(body)))
	}
	t.Logf("100 MiB up and back through the tunnel in %s", time.Since(start).Round(time.Millisecond))

	// Only the renter, only a declared port.
	lease := mustID(t, v.LeaseID)
	ep := tunnel.Endpoint{Peer: jn.cheap.ID(), LeaseID: [32]byte(lease), Attempt: 1}
	open := func(n *Node) func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return func(ctx context.Context, p peer.ID) (network.Stream, error) {
			if err := n.connectPeer(ctx, p); err != nil {
				return nil, err
			}
			return n.net.Host.NewStream(ctx, p, tunnel.Protocol)
		}
	}
	if _, err := tunnel.Dial(ctx, open(jn.boot), ep, 8000); !tunnel.IsRefusal(err, tunnel.RefusedNoAttempt) {
		t.Errorf("another peer's tunnel to the job: %v, want refused as no-attempt", err)
	}
	if _, err := tunnel.Dial(ctx, open(jn.renter), ep, 22); !tunnel.IsRefusal(err, tunnel.RefusedPort) {
		t.Errorf("a tunnel to an undeclared port: %v, want refused as port", err)
	}
	st, err := tunnel.Dial(ctx, open(jn.renter), ep, 8000)
	if err != nil {
		t.Fatalf("the renter's own tunnel: %v", err)
	}
	st.Close()

	// A flood of tunnel streams from another peer, each left with only
	// the first byte of its Open: the resource manager holds at most its per-peer limit in the
	// tunnel service, resets the rest, and the supplier's own protocols
	// and the renter's tunnels go on.
	fctx, fcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer fcancel()
	var opened, held []network.Stream
	refused := 0
	for range p2p.MaxTunnelStreamsPeer + 40 {
		st, err := jn.boot.net.Host.NewStream(fctx, jn.cheap.ID(), tunnel.Protocol)
		if err == nil {
			_, err = st.Write([]byte{5}) // an Open's length, and never the Open
		}
		if err != nil {
			refused++
			continue
		}
		opened = append(opened, st)
	}
	time.Sleep(500 * time.Millisecond)
	wait := time.Now().Add(time.Second) // well within the supplier's 10 s for an Open
	for _, st := range opened {
		_ = st.SetReadDeadline(wait)
		var timeout net.Error
		if _, err := st.Read(make([]byte, 1)); err != nil && !(errors.As(err, &timeout) && timeout.Timeout()) {
			refused++
			st.Close()
			continue
		}
		held = append(held, st)
	}
	if len(held) > p2p.MaxTunnelStreamsPeer || refused < 40 {
		t.Errorf("flood: %d tunnel streams held, %d refused; want at most %d held", len(held), refused, p2p.MaxTunnelStreamsPeer)
	}
	if res := <-ping.Ping(fctx, jn.boot.net.Host, jn.cheap.ID()); res.Error != nil {
		t.Errorf("ping during the flood: %v", res.Error)
	}
	if st, err := tunnel.Dial(fctx, open(jn.renter), ep, 8000); err != nil {
		t.Errorf("the renter's tunnel during the flood: %v", err)
	} else {
		st.Close()
	}
	for _, st := range held {
		st.Reset()
	}
	t.Logf("flood from one peer: %d tunnel streams held, %d refused", len(held), refused)

	// Failover: the same address reaches attempt 2 on the other supplier.
	if err := jn.cheap.Network().Host.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the job to run on the other supplier", func() bool {
		v = jobView(t, jn.renter, v.JobID)
		return v.Attempt == 2 && v.Supplier == jn.boot.ID().String() && v.State == job.StateRunning
	})
	eventually(t, 30*time.Second, "attempt 2 to answer on the same address", func() bool { return strings.HasSuffix(get(), " attempt 2\n") })
	fs, err := jn.renter.Jobs().Forwards(v.JobID)
	if err != nil || len(fs) != 1 || "http://"+fs[0].Listen != addr || fs[0].Accepted < 2 {
		t.Fatalf("forwards %+v (%v)", fs, err)
	}
	if _, err := jn.renter.Jobs().Stop(v.JobID, "test over"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the forward to close with the job", func() bool {
		fs, _ := jn.renter.Jobs().Forwards(v.JobID)
		return len(fs) == 0
	})
}

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// TestReplicasBehindOneAddress: a service of two replicas behind one
// published address. Both serve (connections are balanced), each on a
// supplier of its own; when one replica's supplier is lost under a steady
// load, at least 99% of requests still succeed, the lost replica is
// replaced on the third supplier (never the lost one, nor its sibling's),
// becomes healthy and serves again, on the same address.
func TestReplicasBehindOneAddress(t *testing.T) {
	jn := serviceNet(t)
	if jn == nil {
		return
	}
	third := sellerConfig(t, "unset", "sim:rtx4090:1", "eu-west", "fixed", []string{"rtx4090=0.60"}, bootstrapOf(jn.boot))
	third.DataDir, third.HaltGrace, third.AuditInterval, third.JobNetwork = t.TempDir(), 3*time.Second, 0, true
	spare := startNode(t, third)
	waitAdvertised(t, spare)
	eventually(t, 20*time.Second, "the third ask in the renter's book", func() bool {
		for _, a := range jn.renter.Book().Asks("") {
			if a.Supplier == spare.ID() {
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v, err := jn.renter.Jobs().Submit(ctx, echoService(t, func(r *job.Request) {
		r.Replicas, r.Health, r.HealthGrace = 2, "/healthz", time.Minute
	}))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	addr := "http://" + v.Publish[0].Listen
	replicas := func() []job.View { return groupOf(jn.renter, v.JobID) }
	eventually(t, 60*time.Second, "two healthy replicas on distinct suppliers", func() bool {
		rs := replicas()
		return len(rs) == 2 && rs[0].Health == "healthy" && rs[1].Health == "healthy" && rs[0].Supplier != rs[1].Supplier
	})

	// Steady load: 8 clients (GPUMESH_LOAD_CLIENTS), each a request at a
	// time, each request on a new connection, for 3 s before the loss and
	// 3 s after the replacement (GPUMESH_LOAD_SECONDS each).
	clients, hold := envInt(t, "GPUMESH_LOAD_CLIENTS", 8), time.Duration(envInt(t, "GPUMESH_LOAD_SECONDS", 3))*time.Second
	var (
		mu       sync.Mutex
		ok, fail int
		served   = map[string]int{}
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A connection per request: the forward balances connections.
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			defer client.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(addr + "/")
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				mu.Lock()
				if err != nil {
					fail++
				} else {
					ok++
					served[strings.Fields(string(body))[1]]++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(hold)
	mu.Lock()
	before := len(served)
	mu.Unlock()
	if before != 2 {
		t.Errorf("connections went to %d replicas before the loss, want 2: %v", before, served)
	}
	rs := replicas()
	lostID, lostSupplier := rs[0].JobID, rs[0].Supplier
	var lostNode *Node
	for _, n := range []*Node{jn.boot, jn.cheap, spare} {
		if n.ID().String() == lostSupplier {
			lostNode = n
		}
	}
	lostAt := time.Now()
	if err := lostNode.Network().Host.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the lost replica replaced on the spare supplier and healthy", func() bool {
		r := jobView(t, jn.renter, lostID)
		return r.Attempt == 2 && r.Supplier == spare.ID().String() && r.Health == "healthy"
	})
	t.Logf("the lost replica was replaced and healthy %s after its supplier went", time.Since(lostAt).Round(10*time.Millisecond))
	mu.Lock()
	served = map[string]int{}
	mu.Unlock()
	time.Sleep(hold)
	close(stop)
	wg.Wait()
	total := ok + fail
	t.Logf("%d clients: %d requests, %d failed (%.2f%%); served by %d replicas after the replacement", clients, total, fail, 100*float64(fail)/float64(total), len(served))
	if total < 100 || float64(fail) > 0.01*float64(total) {
		t.Errorf("%d of %d requests failed, want at most 1%%", fail, total)
	}
	if len(served) != 2 {
		t.Errorf("after the replacement connections went to %d replicas, want 2: %v", len(served), served)
	}
	if got := jobView(t, jn.renter, v.JobID).Publish; len(got) != 1 || "http://"+got[0].Listen != addr {
		t.Errorf("the address moved: %v", got)
	}
}

// groupOf is the renter's replicas of the group named group.
func groupOf(renter *Node, group string) []job.View {
	var out []job.View
	for _, r := range renter.Jobs().Jobs() {
		if r.Group == group {
			out = append(out, r)
		}
	}
	return out
}

// envInt is the integer in environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestReplicaLeasedLater: a service of three replicas submitted where only
// two suppliers sell is accepted with two; the third waits for a lease
// ("no lease yet") and is rented, started and healthy once a third
// supplier comes, on it (never on a sibling's supplier).
func TestReplicaLeasedLater(t *testing.T) {
	jn := serviceNet(t)
	if jn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v, err := jn.renter.Jobs().Submit(ctx, echoService(t, func(r *job.Request) {
		r.Replicas, r.Health, r.HealthGrace = 3, "/healthz", time.Minute
	}))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	replicas := func() []job.View { return groupOf(jn.renter, v.JobID) }
	var waiting job.View
	for _, r := range replicas() {
		if r.Attempt == 0 {
			waiting = r
		}
	}
	if len(replicas()) != 3 || waiting.JobID == "" || !strings.HasPrefix(waiting.Message, "no lease yet: ") || waiting.State != job.StateRenting {
		t.Fatalf("after submit: %+v; want three replicas, one renting with no lease yet", replicas())
	}
	third := sellerConfig(t, "unset", "sim:rtx4090:1", "eu-west", "fixed", []string{"rtx4090=0.60"}, bootstrapOf(jn.boot))
	third.DataDir, third.HaltGrace, third.AuditInterval, third.JobNetwork = t.TempDir(), 3*time.Second, 0, true
	spare := startNode(t, third)
	waitAdvertised(t, spare)
	eventually(t, 90*time.Second, "the third replica leased on the new supplier and healthy", func() bool {
		r := jobView(t, jn.renter, waiting.JobID)
		return r.Supplier == spare.ID().String() && r.Health == "healthy" && r.Message == ""
	})
	seen := map[string]bool{}
	for _, r := range replicas() {
		seen[r.Supplier] = true
	}
	if len(seen) != 3 {
		t.Fatalf("replicas on %d suppliers, want 3: %+v", len(seen), replicas())
	}
}
