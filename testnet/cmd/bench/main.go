// Command bench is the network benchmark harness behind `make bench`. It
// starts a 20-node testnet of real gpumesh processes on loopback and
// measures, each beside a baseline taken in the same run on the same
// machine:
//
//   - cold search: a fresh light client (new identity, new host) joins
//     through one node and searches everything, p50/p99, beside a bare
//     libp2p host that connects to one node and pings it once;
//   - the same search as a whole `gpumesh search --json` process;
//   - an idle node's RSS and CPU share, measured over a window after the
//     network has been idle for a while.
//
// Results are printed as a table and written as JSON to -out.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet"
)

func main() {
	bin := flag.String("bin", "bin/gpumesh", "gpumesh binary")
	nodes := flag.Int("nodes", 20, "testnet size")
	runs := flag.Int("runs", 40, "cold searches (and baseline round trips) to time")
	cliRuns := flag.Int("cli-runs", 10, "searches to time as whole CLI processes")
	rentRuns := flag.Int("rent-runs", 25, "leases to time, each way (with the quote wait, and taking the first quote)")
	jobRuns := flag.Int("job-runs", 15, "jobs to start from node 0, timing countersigned lease to running process")
	settle := flag.Duration("settle", 60*time.Second, "idle time before measuring a node's footprint")
	window := flag.Duration("window", 30*time.Second, "CPU measurement window")
	dir := flag.String("dir", ".bench/testnet", "testnet state dir")
	basePort := flag.Int("base-port", 42100, "testnet base port")
	out := flag.String("out", ".bench/network.json", "where to write the results")
	hb := flag.Duration("heartbeat", 10*time.Second, "heartbeat interval of the testnet's nodes")
	flag.Parse()
	if err := run(*bin, *nodes, *runs, *cliRuns, *rentRuns, *jobRuns, *settle, *window, *dir, *basePort, *out, *hb); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Results is what one run of the harness measured.
type Results struct {
	When          time.Time `json:"when"`
	Nodes         int       `json:"nodes"`
	Heartbeat     string    `json:"heartbeat_interval"`
	SearchP50Ms   float64   `json:"search_p50_ms"`
	SearchP99Ms   float64   `json:"search_p99_ms"`
	PingP50Ms     float64   `json:"baseline_connect_ping_p50_ms"`
	PingP99Ms     float64   `json:"baseline_connect_ping_p99_ms"`
	RatioP50      float64   `json:"search_over_baseline_p50"`
	RatioP99      float64   `json:"search_over_baseline_p99"`
	CLIP50Ms      float64   `json:"cli_search_p50_ms"`
	CLIP99Ms      float64   `json:"cli_search_p99_ms"`
	OffersFound   int       `json:"offers_found"`
	IdleRSSMeanMB float64   `json:"idle_rss_mean_mib"`
	IdleRSSMaxMB  float64   `json:"idle_rss_max_mib"`
	IdleCPUMean   float64   `json:"idle_cpu_mean_pct_of_core"`
	IdleCPUMax    float64   `json:"idle_cpu_max_pct_of_core"`
	IdleAfter     string    `json:"idle_measured_after"`
	RentRuns      int       `json:"rent_runs"`
	RentWaitP50   float64   `json:"rent_with_quote_wait_p50_ms"`
	RentWaitP99   float64   `json:"rent_with_quote_wait_p99_ms"`
	RentFirstP50  float64   `json:"rent_first_quote_p50_ms"`
	RentFirstP99  float64   `json:"rent_first_quote_p99_ms"`
	StreamRTP50   float64   `json:"baseline_3_stream_round_trips_p50_ms"`
	StreamRTP99   float64   `json:"baseline_3_stream_round_trips_p99_ms"`
	RentRatioP50  float64   `json:"rent_first_over_baseline_p50"`
	RentRatioP99  float64   `json:"rent_first_over_baseline_p99"`
	JobRuns       int       `json:"job_runs"`
	JobStartP50   float64   `json:"lease_to_running_p50_ms"`
	JobStartP99   float64   `json:"lease_to_running_p99_ms"`
	ExecP50       float64   `json:"baseline_exec_p50_ms"`
	ExecP99       float64   `json:"baseline_exec_p99_ms"`
	JobRatioP50   float64   `json:"lease_to_running_over_exec_p50"`
	JobRatioP99   float64   `json:"lease_to_running_over_exec_p99"`
}

func run(bin string, n, runs, cliRuns, rentRuns, jobRuns int, settle, window time.Duration, dir string, basePort int, out string, heartbeat time.Duration) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fmt.Fprintf(os.Stderr, "starting a %d-node testnet...\n", n)
	_ = testnet.Down(dir) // a previous run that was interrupted
	// Start from empty data dirs: leases left by an earlier run would
	// still hold capacity.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	// Production defaults (10 s heartbeats), not the testnet's faster demo pace.
	st, err := testnet.Up(ctx, testnet.Options{Binary: bin, Dir: dir, Nodes: n, BasePort: basePort, Logger: log, HeartbeatInterval: heartbeat, AuditInterval: 10 * time.Minute})
	if err != nil {
		return err
	}
	defer testnet.Down(dir)
	res := Results{When: time.Now().UTC(), Nodes: n, Heartbeat: heartbeat.String()}
	var addrs []peer.AddrInfo
	for _, nd := range st.Nodes {
		ai, err := node.ParseBootstrap([]string{nd.Addr})
		if err != nil {
			return err
		}
		addrs = append(addrs, ai[0])
	}
	quiet := slog.New(slog.DiscardHandler)

	// Interleave the baseline and the search so that load changes hit both.
	var search, base []time.Duration
	for i := range runs {
		target := addrs[rand.IntN(len(addrs))]
		d, err := bareConnectPing(ctx, target)
		if err != nil {
			return fmt.Errorf("baseline run %d: %w", i, err)
		}
		base = append(base, d)
		d, found, err := coldSearch(ctx, target, quiet)
		if err != nil {
			return fmt.Errorf("search run %d: %w", i, err)
		}
		search = append(search, d)
		res.OffersFound = found
	}
	res.SearchP50Ms, res.SearchP99Ms = ms(pct(search, 50)), ms(pct(search, 99))
	res.PingP50Ms, res.PingP99Ms = ms(pct(base, 50)), ms(pct(base, 99))
	res.RatioP50, res.RatioP99 = res.SearchP50Ms/res.PingP50Ms, res.SearchP99Ms/res.PingP99Ms

	var cli []time.Duration
	for range cliRuns {
		nd := st.Nodes[rand.IntN(len(st.Nodes))]
		start := time.Now()
		cmd := exec.CommandContext(ctx, bin, "search", "--json", "--bootstrap", nd.Addr)
		if b, err := cmd.Output(); err != nil {
			return fmt.Errorf("cli search: %w: %s", err, b)
		}
		cli = append(cli, time.Since(start))
	}
	res.CLIP50Ms, res.CLIP99Ms = ms(pct(cli, 50)), ms(pct(cli, 99))

	if err := benchRent(ctx, &res, addrs, rentRuns, quiet); err != nil {
		return err
	}
	if err := benchJobStart(ctx, &res, st.Nodes[0], jobRuns); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "letting the network idle for %s, then measuring for %s...\n", settle, window)
	time.Sleep(settle)
	res.IdleAfter = (settle + window).String()
	before := map[int]uint64{}
	for _, nd := range st.Nodes {
		before[nd.PID], _ = cpuTicks(nd.PID)
	}
	time.Sleep(window)
	var rss, cpu []float64
	for _, nd := range st.Nodes {
		after, err := cpuTicks(nd.PID)
		if err != nil {
			return fmt.Errorf("node %d: %w", nd.Index, err)
		}
		cpu = append(cpu, 100*float64(after-before[nd.PID])/100/window.Seconds()) // USER_HZ is 100
		r, err := rssMiB(nd.PID)
		if err != nil {
			return fmt.Errorf("node %d: %w", nd.Index, err)
		}
		rss = append(rss, r)
	}
	res.IdleRSSMeanMB, res.IdleRSSMaxMB = mean(rss), slices.Max(rss)
	res.IdleCPUMean, res.IdleCPUMax = mean(cpu), slices.Max(cpu)

	report(res)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// benchRent times leases from one joined renter: with the quote wait (up
// to 2 s, or until 3 acceptable quotes are in) and taking the first
// acceptable quote, beside three bare stream round trips to a node, as
// many as a lease needs after the bid is gossiped (quote, proposal and
// countersignature, confirmation).
func benchRent(ctx context.Context, res *Results, addrs []peer.AddrInfo, runs int, log *slog.Logger) error {
	rc, err := node.NewRentClient(ctx, node.LightOptions{Bootstrap: addrs[:2], Logger: log}, nil)
	if err != nil {
		return fmt.Errorf("rent client: %w", err)
	}
	defer rc.Close()
	f, _ := market.ParseFilter("")
	var wait, first, base []time.Duration
	for i := range runs * 2 {
		req := market.RentRequest{Filter: f, Count: 1, Duration: time.Hour, MaxPrice: 10_000_000, Wait: 2 * time.Second, AllowUnproven: true}
		if i%2 == 1 {
			req.Enough = 1
		}
		start := time.Now()
		if _, err := rc.Rent(ctx, req); err != nil {
			return fmt.Errorf("rent run %d: %w", i, err)
		}
		if i%2 == 1 {
			first = append(first, time.Since(start))
		} else {
			wait = append(wait, time.Since(start))
		}
		d, err := streamRoundTrips(ctx, rc, addrs[rand.IntN(len(addrs))], 3)
		if err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		base = append(base, d)
	}
	res.RentRuns = runs
	res.RentWaitP50, res.RentWaitP99 = ms(pct(wait, 50)), ms(pct(wait, 99))
	res.RentFirstP50, res.RentFirstP99 = ms(pct(first, 50)), ms(pct(first, 99))
	res.StreamRTP50, res.StreamRTP99 = ms(pct(base, 50)), ms(pct(base, 99))
	res.RentRatioP50, res.RentRatioP99 = res.RentFirstP50/res.StreamRTP50, res.RentFirstP99/res.StreamRTP99
	return nil
}

// streamRoundTrips opens a ping stream to target and times n round
// trips on it, opening included, over the renter's host. (One stream: the
// ping service limits streams per peer, and a fresh one per round trip
// trips that limit while the last is still being torn down.)
func streamRoundTrips(ctx context.Context, rc *node.RentClient, target peer.AddrInfo, n int) (time.Duration, error) {
	h := rc.Network().Host
	if err := h.Connect(ctx, target); err != nil {
		return 0, err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	results := ping.Ping(pctx, h, target.ID)
	for range n {
		r := <-results
		if r.Error != nil {
			return 0, r.Error
		}
	}
	return time.Since(start), nil
}

// bareConnectPing is the baseline: a new libp2p host dials one node and
// completes one ping round trip.
func bareConnectPing(ctx context.Context, target peer.AddrInfo) (time.Duration, error) {
	start := time.Now()
	h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.DisableMetrics())
	if err != nil {
		return 0, err
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, target); err != nil {
		return 0, err
	}
	r := <-ping.Ping(ctx, h, target.ID)
	if r.Error != nil {
		return 0, r.Error
	}
	return time.Since(start), nil
}

// coldSearch is what `gpumesh search` does, in-process: a new identity and
// host join through target and search for every model.
func coldSearch(ctx context.Context, target peer.AddrInfo, log *slog.Logger) (time.Duration, int, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lc, err := node.NewLightClient(ctx, node.LightOptions{Bootstrap: []peer.AddrInfo{target}, Logger: log})
	if err != nil {
		return 0, 0, err
	}
	defer lc.Close()
	offers, err := lc.Search(ctx, market.Filter{})
	if err != nil {
		return 0, 0, err
	}
	return time.Since(start), len(offers), nil
}

func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return utime + stime, nil
}

func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func report(r Results) {
	fmt.Printf("gpumesh network benchmarks (%d-node testnet on loopback, %s heartbeats)\n\n", r.Nodes, r.Heartbeat)
	fmt.Printf("%-44s %10s %10s\n", "", "p50 (ms)", "p99 (ms)")
	fmt.Printf("%-44s %10.1f %10.1f\n", "cold search, in-process light client", r.SearchP50Ms, r.SearchP99Ms)
	fmt.Printf("%-44s %10.1f %10.1f\n", "baseline: new libp2p host, connect + 1 ping", r.PingP50Ms, r.PingP99Ms)
	fmt.Printf("%-44s %9.2fx %9.2fx\n", "ratio search / baseline", r.RatioP50, r.RatioP99)
	fmt.Printf("%-44s %10.1f %10.1f\n", "cold search, whole CLI process", r.CLIP50Ms, r.CLIP99Ms)
	fmt.Printf("offers found per search: %d\n\n", r.OffersFound)
	fmt.Printf("%-44s %10.1f %10.1f\n", "rent -> countersigned lease, first quote", r.RentFirstP50, r.RentFirstP99)
	fmt.Printf("%-44s %10.1f %10.1f\n", "rent -> countersigned lease, quote wait", r.RentWaitP50, r.RentWaitP99)
	fmt.Printf("%-44s %10.1f %10.1f\n", "baseline: 3 bare stream round trips", r.StreamRTP50, r.StreamRTP99)
	fmt.Printf("%-44s %9.2fx %9.2fx\n", "ratio first-quote rent / baseline", r.RentRatioP50, r.RentRatioP99)
	fmt.Printf("leases made: %d each way\n\n", r.RentRuns)
	fmt.Printf("%-44s %10.1f %10.1f\n", "countersigned lease -> job process running", r.JobStartP50, r.JobStartP99)
	fmt.Printf("%-44s %10.1f %10.1f\n", "baseline: fork/exec of the same command", r.ExecP50, r.ExecP99)
	fmt.Printf("%-44s %9.2fx %9.2fx\n", "ratio job start / baseline", r.JobRatioP50, r.JobRatioP99)
	fmt.Printf("jobs started: %d (each: spec over libp2p, lease check, sandbox, exec)\n\n", r.JobRuns)
	fmt.Printf("idle node after %s: RSS mean %.1f MiB, max %.1f MiB; CPU mean %.2f%%, max %.2f%% of one core\n",
		r.IdleAfter, r.IdleRSSMeanMB, r.IdleRSSMaxMB, r.IdleCPUMean, r.IdleCPUMax)
}

// benchJobStart runs jobs from node 0 through its API and reads, for each,
// the time from the countersigned lease to the supplier's word that the
// process runs (spec sent and checked, working dir, sandbox shim, exec),
// beside a plain fork/exec of the same command in this process.
func benchJobStart(ctx context.Context, res *Results, renter testnet.NodeInfo, runs int) error {
	c, err := api.ClientForDataDir(renter.API, renter.DataDir)
	if err != nil {
		return err
	}
	defer c.Close()
	var starts, execs []time.Duration
	for i := range runs {
		t0 := time.Now()
		if err := exec.CommandContext(ctx, "true").Run(); err != nil {
			return fmt.Errorf("baseline exec: %w", err)
		}
		execs = append(execs, time.Since(t0))
		v, err := c.SubmitJob(ctx, api.JobRequest{Filter: "vram>=24", Count: 1, MaxPrice: "3.00", Argv: []string{"true"}})
		if err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		if len(v.Attempts) == 0 || v.Attempts[0].StartMs <= 0 {
			return fmt.Errorf("job %d: no start time in %+v", i, v)
		}
		starts = append(starts, time.Duration(v.Attempts[0].StartMs*float64(time.Millisecond)))
	}
	res.JobRuns = runs
	res.JobStartP50, res.JobStartP99 = ms(pct(starts, 50)), ms(pct(starts, 99))
	res.ExecP50, res.ExecP99 = ms(pct(execs, 50)), ms(pct(execs, 99))
	res.JobRatioP50, res.JobRatioP99 = res.JobStartP50/res.ExecP50, res.JobStartP99/res.ExecP99
	return nil
}
