package testnet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/testnet/netlab"
)

// A small network: the first public node of a new network (a team's one
// VPS) and two home rigs, each behind its own cone NAT. Node 0 rents,
// node 1 is the public bootstrap node, node 2 supplies (the only
// a100-80gb).
const (
	smallRenter   = 0
	smallPublic   = 1
	smallSupplier = 2
	// smallFirstJob is the goal: a job from behind one NAT runs on the
	// supplier behind the other, over a direct connection, within a
	// minute of the supplier's start.
	smallFirstJob = 60 * time.Second
	// smallAttempt bounds one `gpumesh run --detach` of firstJob.
	smallAttempt = 25 * time.Second
)

// startSmallNet starts the small network; the public node is told that
// it is public, as its operator would.
func startSmallNet(t testing.TB) *natNet {
	t.Helper()
	return startLab(t, Options{
		Nodes: 3,
		Kinds: []netlab.Kind{netlab.Cone, netlab.Public, netlab.Cone},
		ExtraArgs: func(i int) []string {
			if i == smallPublic {
				return []string{"--reachability", "public"}
			}
			if i == smallRenter {
				// What a failure leaves to read (firstJob quotes it).
				return []string{"--log-level", "debug"}
			}
			return nil
		},
	})
}

// firstJob runs jobs from the renter on the supplier, one after another
// until one has run over a direct connection, and returns how long after
// the supplier's start that was. It gives up at limit after that start.
func (n *natNet) firstJob(ctx context.Context, limit time.Duration) (time.Duration, error) {
	started := n.st.Nodes[smallSupplier].Started
	ctx, cancel := context.WithDeadline(ctx, started.Add(limit))
	defer cancel()
	var last error
	for ctx.Err() == nil {
		// Each attempt has a bound of its own, so that one stuck attempt
		// (recorded as the last error) leaves time for the next.
		actx, acancel := context.WithTimeout(ctx, smallAttempt)
		id, on, err := n.runJob(actx, "model=a100-80gb", "sh", "-c", "echo hello from behind a NAT")
		acancel()
		switch {
		case err != nil:
			last = fmt.Errorf("%s after the supplier's start: %w", time.Since(started).Round(time.Millisecond), err)
		case on != n.st.Nodes[smallSupplier].PeerID:
			return 0, fmt.Errorf("job %s ran on %s, want the supplier %s", id, on, n.st.Nodes[smallSupplier].PeerID)
		default:
			v, err := n.jobDone(ctx, id)
			if err != nil {
				last = err
				break
			}
			if v.State == job.StateSucceeded && n.conn(ctx, smallSupplier) == "direct" {
				return time.Since(started), nil
			}
			last = fmt.Errorf("job %s: %s (%s), connection %q", id, v.State, v.Message, n.conn(ctx, smallSupplier))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return 0, fmt.Errorf("no job ran on the supplier over a direct connection within %s of its start; last: %v\nthe renter's rent and job log lines:\n%s",
		limit, last, grepLog(n.st.Nodes[smallRenter].Log, 40, "rent", "lease", "job", "quote", "bid", "direct", "relay"))
}

// grepLog is the last n lines of the log at path that hold any of words.
func grepLog(path string, n int, words ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// jobDone waits until the renter's job id ends or ctx does.
func (n *natNet) jobDone(ctx context.Context, id string) (job.View, error) {
	for {
		v, err := n.client(smallRenter).Job(ctx, id)
		if err != nil {
			return v, err
		}
		switch v.State {
		case job.StateSucceeded, job.StateFailed, job.StateStopped:
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("job %s still %s: %w", id, v.State, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// doctor is node i's `gpumesh doctor --json` report, run in its
// namespace.
func (n *natNet) doctor(ctx context.Context, i int) api.DoctorReport {
	n.t.Helper()
	out, _ := n.gmAt(ctx, i, "doctor", "--json")
	var rep api.DoctorReport
	if err := json.Unmarshal(out, &rep); err != nil {
		n.t.Fatalf("node %d: doctor printed %q: %v", i, out, err)
	}
	return rep
}

// TestSmallNetwork: with one public node and two cone NATs, a renter
// behind one NAT runs a job on the supplier behind the other over a
// direct, hole-punched connection within a minute of the supplier's
// start, and doctor on each node says what it is and why.
func TestSmallNetwork(t *testing.T) {
	n := startSmallNet(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	took, err := n.firstJob(ctx, smallFirstJob)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first job across two cone NATs, over a direct connection, %s after the supplier's start", took.Round(time.Millisecond))
	before, bytes, err := n.st.Flow(ctx, n.public(smallSupplier), n.public(smallRenter))
	if err != nil {
		t.Fatal(err)
	}
	if before == 0 {
		t.Errorf("no packet went straight from the supplier's NAT to the renter's (%d bytes): the job did not run over a direct connection", bytes)
	}

	want := map[int]string{smallRenter: "punchable", smallPublic: "public", smallSupplier: "punchable"}
	why := map[int]string{smallRenter: "behind NAT", smallPublic: "reachability = public", smallSupplier: "behind NAT"}
	for i := range n.st.Nodes {
		rep := n.doctor(ctx, i)
		var reach, relays *api.Check
		for k := range rep.Checks {
			switch rep.Checks[k].Name {
			case "reachability":
				reach = &rep.Checks[k]
			case "relay-reservations":
				relays = &rep.Checks[k]
			}
		}
		if reach == nil || relays == nil {
			t.Fatalf("node %d: doctor has no reachability or relays check: %+v", i, rep.Checks)
		}
		t.Logf("node %d (%s): reachability %s: %s; relays %s: %s", i, n.st.Nodes[i].NAT, reach.Status, reach.Detail, relays.Status, relays.Detail)
		if !strings.HasPrefix(reach.Detail, want[i]+":") || !strings.Contains(reach.Detail, why[i]) {
			t.Errorf("node %d (%s): doctor's reachability says %q, want %q because %q", i, n.st.Nodes[i].NAT, reach.Detail, want[i], why[i])
		}
		if relays.Status == "fail" {
			t.Errorf("node %d (%s): doctor's relays check failed: %s", i, n.st.Nodes[i].NAT, relays.Detail)
		}
	}
}

// BenchmarkSmallNetwork reports the time from a supplier's start to the
// first job on it from a renter behind another NAT, over a direct
// connection, in a network with one public node (the lab of
// TestSmallNetwork), against the goal of a minute. It starts a fresh lab,
// so it runs once: `make bench` runs it with -benchtime 1x.
func BenchmarkSmallNetwork(b *testing.B) {
	n := startSmallNet(b)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	took, err := n.firstJob(ctx, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(took.Seconds(), "first-job-s")
	b.ReportMetric(took.Seconds()/smallFirstJob.Seconds(), "first-job/goal")
	b.Logf("first job across two cone NATs with one public node: %s after the supplier's start (goal %s)", took.Round(time.Millisecond), smallFirstJob)
}
