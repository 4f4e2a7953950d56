package testnet

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/job"
)

// BenchmarkNAT measures, in the 12-node namespace testnet with WAN latency
// (startNATNet), what a renter behind a cone NAT waits for, each figure
// also as a multiple of the round trip between the two peers measured in
// the same run (libp2p's ping, the peers API's latency), so that it reads
// the same on any machine:
//
//   - search: a cold `gpumesh search --json` process in node 0's namespace
//     through the first public node, over the round trip to that node;
//   - rent: `gpumesh rent` as a fresh light client in node 0's namespace,
//     from a supplier behind another cone NAT (reach=punchable), to the
//     countersigned lease, over the round trip to that supplier;
//   - punch: from a relayed connection to the direct one hole punching
//     made, by a fresh host behind node 0's cone NAT (punchProbe) to each
//     other node behind a cone NAT, over the round trip to it;
//   - job: `gpumesh run --detach` from node 0 to the job running on a
//     supplier behind NAT, over the round trip to it.
//
// Each iteration measures each once (b.Loop: the testnet starts once for
// all of them); the figures are medians. It needs
// root and network namespaces, as the NAT tests do: `make bench` runs it
// with -benchtime 3x.
func BenchmarkNAT(b *testing.B) {
	n := startNATNet(b)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	n.waitReach(ctx, 3, "punchable")
	var search, searchRTT, rent, rentRTT, punch, punchRTT, start, startRTT []float64
	bootstrap := n.st.Bootstrap[0]
	boot, err := peer.AddrInfoFromString(bootstrap)
	if err != nil {
		b.Fatal(err)
	}
	bootID := boot.ID.String()
	for b.Loop() {
		t0 := time.Now()
		if out, err := n.nsCommand(ctx, "search", "--allow-simulated", "--bootstrap", bootstrap, "--json"); err != nil {
			b.Fatalf("search: %v: %s", err, out)
		}
		search = append(search, ms(time.Since(t0)))
		searchRTT = append(searchRTT, n.rtt(ctx, bootID))

		t0 = time.Now()
		out, err := n.nsCommand(ctx, "rent", "reach=punchable", "--count", "1", "--hours", "1", "--max-price", "5",
			"--allow-unproven", "--allow-simulated", "--bootstrap", bootstrap, "--data", b.TempDir(), "--json")
		if err != nil {
			b.Fatalf("rent: %v: %s", err, out)
		}
		rent = append(rent, ms(time.Since(t0)))
		var lease struct {
			Supplier string `json:"supplier"`
		}
		if err := json.Unmarshal(out, &lease); err != nil || lease.Supplier == "" {
			b.Fatalf("rent printed %q: %v", out, err)
		}
		rentRTT = append(rentRTT, n.rtt(ctx, lease.Supplier))

		t0 = time.Now()
		id, on, err := n.runJob(ctx, "reach=punchable", "sleep", "5")
		if err != nil {
			b.Fatal(err)
		}
		for {
			v, err := n.client(0).Job(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if v.State == job.StateRunning || v.State == job.StateSucceeded {
				break
			}
			if v.State == job.StateFailed || time.Since(t0) > time.Minute {
				b.Fatalf("job %s on %s: %s (%s)", id, on, v.State, v.Message)
			}
			time.Sleep(20 * time.Millisecond)
		}
		start = append(start, ms(time.Since(t0)))
		startRTT = append(startRTT, n.rtt(ctx, on))
	}
	// Hole punching, timed by a fresh host in node 0's namespace (behind
	// its cone NAT) that reaches each other cone-NAT node at its relay
	// addresses: node 0 itself is already directly connected to most of
	// them (peers behind cone NATs often dial each other at once over
	// QUIC and get a direct connection before any relayed one).
	for i, nd := range n.st.Nodes {
		if i == 0 || nd.NAT != "cone" {
			continue
		}
		task := probeTask{Bootstrap: n.st.Bootstrap, Target: nd.PeerID}
		for _, o := range n.offers(ctx, "") {
			if o.PeerID == nd.PeerID && len(task.Addrs) == 0 {
				for _, a := range o.Addrs {
					if strings.Contains(a, "/p2p-circuit") {
						task.Addrs = append(task.Addrs, a)
					}
				}
			}
		}
		if len(task.Addrs) == 0 {
			b.Logf("node %d: its profile lists no relay address", i)
			continue
		}
		r, err := punchProbe(ctx, n.st.Nodes[0].NS, task)
		if err != nil {
			b.Logf("node %d: %v", i, err)
			continue
		}
		b.Logf("node %d (%s): relayed connection in %.0f ms, direct %.0f ms later, round trip %.0f ms", i, nd.Region, r.RelayedMs, r.DirectMs, r.RTTMs)
		punch, punchRTT = append(punch, r.DirectMs), append(punchRTT, r.RTTMs)
	}
	report := func(name string, v, rtt []float64) {
		if len(v) == 0 {
			b.Logf("%s: not measured", name)
			return
		}
		m, r := median(v), median(rtt)
		b.ReportMetric(m, name+"-ms")
		b.ReportMetric(m/r, name+"/rtt")
		b.Logf("%s: p50 %.0f ms = %.1f × the %.0f ms round trip (%d runs)", name, m, m/r, r, len(v))
	}
	report("search", search, searchRTT)
	report("rent", rent, rentRTT)
	report("punch", punch, punchRTT)
	report("job-start", start, startRTT)
}

// nsCommand runs the gpumesh CLI in node 0's namespace with args as they
// are (no node API: a light client).
func (n *natNet) nsCommand(ctx context.Context, args ...string) ([]byte, error) {
	cmd := n.st.Command(ctx, n.bin, args...)
	cmd.WaitDelay = 2 * time.Second
	return cmd.Output()
}

// rtt is node 0's round trip to peer id in ms, as libp2p's pings measure
// it (the peers API's latency); it waits a little for a first ping.
func (n *natNet) rtt(ctx context.Context, id string) float64 {
	n.t.Helper()
	want, err := peer.Decode(id)
	if err != nil {
		n.t.Fatalf("peer %q: %v", id, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		peers, err := n.client(0).Peers(ctx)
		if err != nil {
			n.t.Fatal(err)
		}
		for _, p := range peers {
			if p.ID == want && p.LatencyMs > 0 {
				return p.LatencyMs
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.t.Fatalf("node 0 has no round-trip time to %s", id)
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
