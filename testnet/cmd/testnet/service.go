package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/doctor"
	"github.com/gpumesh/gpumesh/testnet"
)

// demoServer is the service of the demo: an HTTP server that answers
// which replica (job) and attempt served the request.
const demoServer = `import os, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = ("replica %s attempt %s\n" % (os.environ["GPUMESH_JOB_ID"][:8], os.environ["JOB_ATTEMPT"])).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// demoClient sends N requests to a URL, each on a new connection, and
// tallies them by the replica that answered.
const demoClient = `import collections, sys, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
ok, fail, by = 0, 0, collections.Counter()
for _ in range(n):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            by[r.read().decode().split()[1]] += 1
            ok += 1
    except Exception:
        fail += 1
print("%d requests: %d answered, %d failed; by replica: %s" % (n, ok, fail, ", ".join("%s %d" % kv for kv in sorted(by.items()))))
`

// noServices is why the testnet's suppliers refuse jobs that serve
// ports, as node 1's doctor says, or "" when they take them. In a
// namespace lab, whose nodes' APIs this process cannot reach, they do.
func (c *cli) noServices(ctx context.Context, st *testnet.State) string {
	if st.Netns != nil || len(st.Nodes) < 2 {
		return ""
	}
	cl, err := api.ClientForDataDir(st.Nodes[1].API, st.Nodes[1].DataDir)
	if err != nil {
		return err.Error()
	}
	rep, err := cl.Doctor(ctx)
	if err != nil {
		return err.Error()
	}
	if chk, ok := rep.Check(doctor.CheckServices); ok && chk.Status != api.StatusOK {
		return chk.Detail
	}
	return ""
}

// serviceDemo serves an HTTP endpoint from two replicas on leased GPUs
// behind one local address of node 0, kills one replica's supplier with
// SIGKILL under requests, and shows the replica replaced elsewhere while
// the address keeps answering. It needs job networks (up --job-network,
// or --netns) and python3 for the service.
func (c *cli) serviceDemo(ctx context.Context, st *testnet.State, bin string) error {
	if !st.JobNetwork {
		fmt.Fprintf(c.stdout, "# services (an HTTP endpoint from two replicas on leased GPUs) need suppliers that give jobs networks of their own: run the testnet as root on Linux with iproute2 and nftables, or see them with `make testnet-netns`\n\n")
		return nil
	}
	if why := c.noServices(ctx, st); why != "" {
		fmt.Fprintf(c.stdout, "# services (an HTTP endpoint from two replicas on leased GPUs) need suppliers that give jobs networks of their own; node 1 says: %s\n\n", why)
		return nil
	}
	if _, err := exec.LookPath("python3"); err != nil {
		fmt.Fprintf(c.stdout, "# services: the demo's HTTP server needs python3, which this machine lacks\n\n")
		return nil
	}
	data := []string{"--data", st.Nodes[0].DataDir, "--api", st.Nodes[0].API}
	server, client := filepath.Join(st.Dir, "demo-server.py"), filepath.Join(st.Dir, "demo-client.py")
	if err := os.WriteFile(server, []byte(demoServer), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(client, []byte(demoClient), 0o644); err != nil {
		return err
	}
	gm := func(args ...string) ([]byte, error) { return c.demoOutput(ctx, st, bin, args...) }
	show := func(title, name string, args ...string) error {
		return c.demoShow(ctx, st, title, false, name, args...)
	}
	runArgs := append([]string{"run", "vram>=24", "--count", "1", "--max-price", "1.50", "--hours", "1",
		"--replicas", "2", "--port", "8000", "--publish", "127.0.0.1:0:8000", "--health", "/", "--health-grace", "2m",
		"--receipt-interval", "2s", "--credit-limit", "0.10", "--file", server + ":server.py",
		"--allow-unproven", "--allow-simulated", "--detach", "--json"}, data...)
	runArgs = append(runArgs, "--", "python3", "server.py", "8000")
	var started struct {
		JobID   string `json:"job_id"`
		Publish []struct {
			Listen string `json:"listen"`
		} `json:"publish"`
	}
	if err := c.demoRun(ctx, st, "node 0 serves an HTTP endpoint from two replicas on two suppliers' GPUs, behind one local address of its own: each connection goes through the mesh to a healthy replica, in the job's own network on the supplier", bin, runArgs, &started); err != nil {
		return err
	}
	if len(started.Publish) != 1 {
		return fmt.Errorf("testnet: demo: run --replicas published %d addresses, want 1", len(started.Publish))
	}
	url := "http://" + started.Publish[0].Listen + "/"
	type replica struct {
		JobID    string `json:"job_id"`
		Group    string `json:"group"`
		Attempt  int    `json:"attempt"`
		Supplier string `json:"supplier"`
		Health   string `json:"health"`
	}
	replicas := func() []replica {
		var all, mine []replica
		if b, err := gm(append([]string{"jobs", "--json"}, data...)...); err == nil && json.Unmarshal(b, &all) == nil {
			for _, r := range all {
				if r.Group == started.JobID {
					mine = append(mine, r)
				}
			}
		}
		return mine
	}
	waitFor := func(what string, ok func([]replica) bool) error {
		deadline := time.Now().Add(2 * time.Minute)
		for !ok(replicas()) {
			if time.Now().After(deadline) {
				return fmt.Errorf("testnet: demo: %s: not within 2 minutes", what)
			}
			time.Sleep(500 * time.Millisecond)
		}
		return nil
	}
	healthy := func(rs []replica) bool {
		return len(rs) == 2 && rs[0].Health == "healthy" && rs[1].Health == "healthy"
	}
	if err := waitFor("two healthy replicas", healthy); err != nil {
		return err
	}
	if err := show("the replicas: each its own job, lease and bill; both healthy", bin, append([]string{"jobs"}, data...)...); err != nil {
		return err
	}
	if err := show("20 requests to node 0's local address, each on a new connection: both replicas answer", "python3", client, url, "20"); err != nil {
		return err
	}
	victimJob := replicas()[0]
	// The demo restarted nodes before this (the batch job's supplier):
	// their PIDs are in the state as it is now, not as it was loaded.
	if now, err := testnet.Load(st.Dir); err == nil {
		st = now
	}
	victim := nodeOf(st, victimJob.Supplier)
	if victim < 0 {
		return errors.New("testnet: demo: the replica's supplier is not a testnet node")
	}
	fmt.Fprintf(c.stdout, "# replica %s's supplier, node %d, dies: kill -9 %d; requests go on meanwhile\n\n", victimJob.JobID[:8], victim, st.Nodes[victim].PID)
	if err := syscall.Kill(st.Nodes[victim].PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testnet: demo: kill node %d: %w", victim, err)
	}
	if err := show("100 requests while node 0 notices, gives the replica up and rents a replacement elsewhere", "python3", client, url, "100"); err != nil {
		return err
	}
	if err := waitFor("the replacement healthy", func(rs []replica) bool {
		return healthy(rs) && (rs[0].JobID != victimJob.JobID || rs[0].Attempt > victimJob.Attempt) && (rs[1].JobID != victimJob.JobID || rs[1].Attempt > victimJob.Attempt)
	}); err != nil {
		return err
	}
	if err := show("the replica runs again on another supplier (attempt 2); the address never moved", bin, append([]string{"jobs"}, data...)...); err != nil {
		return err
	}
	if err := show("20 more requests: both replicas answer again", "python3", client, url, "20"); err != nil {
		return err
	}
	for _, r := range replicas() {
		if _, err := gm(append([]string{"stop", r.JobID}, data...)...); err != nil {
			return fmt.Errorf("testnet: demo: stop replica %s: %w", r.JobID[:8], err)
		}
	}
	fmt.Fprintf(c.stdout, "# node 0 stopped both replicas; node %d comes back\n", victim)
	info, err := testnet.Restart(ctx, st.Dir, victim)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "node %d restarted as pid %d\n\n", victim, info.PID)
	return nil
}
