// Command bench is the network benchmark harness behind `make bench`. It
// measures every figure of bench/RESULTS.md beside a baseline taken in
// the same run on the same machine, and writes that file (and the raw
// figures as JSON):
//
//   - per-message costs: record validation against a raw ed25519 verify,
//     a durable receipt against a raw synced Badger batch (Go benchmarks);
//   - on a testnet of real gpumesh processes on loopback (-nodes, 20 by
//     default), every port chosen by the kernel: a cold search by a fresh
//     in-process light client and as a whole `gpumesh search` process,
//     beside a new bare libp2p host's connect and ping; `gpumesh rent`
//     from a cold CLI; rent to countersigned lease in-process, beside
//     three bare stream round trips; how long an ask takes to reach every
//     node; countersigned lease to running job, beside a fork/exec; an
//     idle node's RSS and CPU share;
//   - the challenge's false alarms and catch rates (verify/audit's
//     TestDetectionRates, -trials challenges per case), each cheat's
//     beside the honest supplier's false alarms;
//   - the same search, lease and ask propagation again on larger testnets
//     (-scale, 50 and 100 nodes by default), to show how each grows with
//     the network's size, and whether 100 node processes come up, search
//     and lease on this machine.
package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/gpumesh/gpumesh/node/light"
	"github.com/gpumesh/gpumesh/testnet"
)

// config is the harness's flags.
type config struct {
	bin                              string
	nodes                            int
	scale                            []int
	runs, cliRuns, rentRuns, jobRuns int
	settle, window, hb               time.Duration
	dir, out, jsonOut                string
	simReport, chaosReport           string
	skipMicro                        bool
	carryOnly, ratesOnly             bool
	clusterOnly                      bool
	gasOnly                          bool
	trials                           int
}

func main() {
	var c config
	var scale string
	flag.StringVar(&c.bin, "bin", "bin/gpumesh", "gpumesh binary")
	flag.IntVar(&c.nodes, "nodes", 20, "size of the testnet every figure is measured on")
	flag.StringVar(&scale, "scale", "50,100", "larger testnets (comma-separated sizes, e.g. 50,100, or none) to measure search, lease and ask propagation on again")
	flag.IntVar(&c.runs, "runs", 40, "cold searches (and baseline round trips) to time")
	flag.IntVar(&c.cliRuns, "cli-runs", 10, "searches, and rents, to time as whole CLI processes")
	flag.IntVar(&c.rentRuns, "rent-runs", 12, "leases to time in-process, each way (first quote, and every expected answer)")
	flag.IntVar(&c.jobRuns, "job-runs", 15, "jobs to start from node 0, timing countersigned lease to running process")
	flag.DurationVar(&c.settle, "settle", 60*time.Second, "idle time before measuring a node's footprint")
	flag.DurationVar(&c.window, "window", 30*time.Second, "CPU measurement window")
	flag.DurationVar(&c.hb, "heartbeat", 10*time.Second, "heartbeat interval of the testnet's nodes")
	flag.StringVar(&c.dir, "dir", ".bench/testnet", "testnet state dir")
	flag.StringVar(&c.out, "out", "bench/RESULTS.md", "where to write the results table")
	flag.StringVar(&c.simReport, "sim-report", "bench/SIM.md", "the market simulation's report (make sim), whose figures are carried into the table")
	flag.StringVar(&c.chaosReport, "chaos-report", "bench/CHAOS.md", "the chaos run's report (make chaos), whose verdict is carried into the table")
	flag.StringVar(&c.jsonOut, "json", ".bench/network.json", "where to write the raw figures")
	flag.BoolVar(&c.skipMicro, "skip-micro", false, "leave out the Go micro-benchmarks")
	flag.IntVar(&c.trials, "trials", 20, "challenges per case (honest, each cheat) of the detection rates; 0 leaves them out")
	flag.BoolVar(&c.gasOnly, "gas-only", false, "measure only the chain settlement's gas (the chain module's TestGasPerOperation), and put its rows, dated, into the table already at -out")
	flag.BoolVar(&c.ratesOnly, "rates-only", false, "measure only the detection rates, and put their rows, dated, into the table already at -out")
	flag.BoolVar(&c.clusterOnly, "cluster-only", false, "measure only the cluster figures (run --nodes: all-reduce over the mesh and plain veths, formation, a member's loss; root), and put their rows, dated, into the table already at -out")
	flag.BoolVar(&c.carryOnly, "carry-only", false, "measure nothing: only carry the sim and chaos reports' rows into the table already at -out (make sim and make chaos do, after their runs)")
	flag.Parse()
	for _, f := range strings.Split(scale, ",") {
		if f = strings.TrimSpace(f); f == "" || f == "none" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "bench: -scale %q: want sizes of at least 2\n", scale)
			os.Exit(2)
		}
		c.scale = append(c.scale, n)
	}
	run := run
	switch {
	case c.carryOnly:
		run = func(c config) error { return carryInto(c.out, c.simReport, c.chaosReport) }
	case c.clusterOnly:
		run = func(c config) error {
			m := newMachine()
			rows, err := clusterRows(context.Background(), c, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
			if err != nil {
				return err
			}
			m.LoadAfter = testnet.LoadAvg()
			return datedInto(c.out, m, rows, "-cluster-only", "| cluster ")
		}
	case c.gasOnly:
		run = func(c config) error {
			m := newMachine()
			rows, err := gasRows()
			if err != nil {
				return err
			}
			m.LoadAfter = testnet.LoadAvg()
			return datedInto(c.out, m, rows, "-gas-only", "| chain gas: ")
		}
	case c.ratesOnly:
		run = func(c config) error {
			m := newMachine()
			rows, err := detectionRows(c.trials)
			if err != nil {
				return err
			}
			m.LoadAfter = testnet.LoadAvg()
			return ratesInto(c.out, m, rows)
		}
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Results is what one run of the harness measured.
type Results struct {
	Machine Machine  `json:"machine"`
	Rows    []Row    `json:"rows"`
	Notes   []string `json:"notes"`
	Sizes   []Size   `json:"sizes"`
}

// Size is what one testnet size measured.
type Size struct {
	Nodes        int     `json:"nodes"`
	UpSeconds    float64 `json:"up_s"`
	SearchP50Ms  float64 `json:"search_p50_ms"`
	SearchP99Ms  float64 `json:"search_p99_ms"`
	PingP50Ms    float64 `json:"baseline_connect_ping_p50_ms"`
	PingP99Ms    float64 `json:"baseline_connect_ping_p99_ms"`
	Offers       int     `json:"offers_found"`
	RentP50Ms    float64 `json:"rent_first_quote_p50_ms"`
	RentAllP50Ms float64 `json:"rent_every_answer_p50_ms"`
	StreamRTP50  float64 `json:"baseline_3_stream_round_trips_p50_ms"`
	AskP50Ms     float64 `json:"ask_propagation_p50_ms"`
	AskP99Ms     float64 `json:"ask_propagation_p99_ms"`
	AskCoverage  float64 `json:"ask_coverage_pct"`
	IdleRSSMiB   float64 `json:"idle_rss_mean_mib"`
	IdleCPUPct   float64 `json:"idle_cpu_mean_pct_of_core"`
	// The Explorer's load (explorer.go).
	ExplorerSuppliers   int     `json:"explorer_suppliers,omitempty"`
	ExplorerPaintMs     float64 `json:"explorer_first_paint_ms,omitempty"`
	ExplorerAllMs       float64 `json:"explorer_all_suppliers_ms,omitempty"`
	ExplorerBasePaintMs float64 `json:"baseline_minimal_page_first_paint_ms,omitempty"`

	explorer    explorerFigures
	explorerErr error
}

func run(c config) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res := Results{Machine: newMachine()}
	began := time.Now()
	if !c.skipMicro {
		fmt.Fprintln(os.Stderr, "per-message benchmarks...")
		rows, err := microRows()
		if err != nil {
			return err
		}
		res.Rows = append(res.Rows, rows...)
	}
	if c.trials > 0 {
		fmt.Fprintf(os.Stderr, "detection rates, %d challenges per case...\n", c.trials)
		rows, err := detectionRows(c.trials)
		if err != nil {
			return err
		}
		res.Rows = append(res.Rows, rows...)
	}
	full, rows, notes, err := measureFull(ctx, c, log)
	if err != nil {
		return err
	}
	res.Rows, res.Notes, res.Sizes = append(res.Rows, rows...), append(res.Notes, notes...), append(res.Sizes, full)
	for _, n := range c.scale {
		sz, err := measureScale(ctx, c, n, log)
		if err != nil {
			res.Rows = append(res.Rows, Row{Figure: fmt.Sprintf("%d node processes up, searching and leasing", n), Value: "failed: " + err.Error(), Goal: "all of it", Met: met(false)})
			continue
		}
		res.Sizes = append(res.Sizes, sz)
		res.Rows = append(res.Rows, propagationRow(n, time.Duration(sz.AskP99Ms*float64(time.Millisecond)), sz.AskCoverage))
		res.Rows = append(res.Rows, explorerRow(n, sz.explorer, sz.explorerErr))
		if n == 100 {
			res.Rows = append(res.Rows, Row{Figure: "100 node processes up, searching and leasing", Value: fmt.Sprintf("up in %.0f s; %d offers found; leases made", sz.UpSeconds, sz.Offers), Goal: "all of it", Met: met(true)})
		}
	}
	crows, err := clusterRows(ctx, c, log)
	if err != nil {
		crows = []Row{{Figure: "cluster figures (run --nodes)", Value: "failed: " + err.Error(), Goal: "all of them", Met: met(false)}}
	}
	res.Rows = append(res.Rows, crows...)
	grows, err := gasRows()
	if err != nil {
		grows = []Row{{Figure: "chain gas: every operation (chain module TestGasPerOperation)", Value: "failed: " + err.Error(), Goal: "all of them", Met: met(false)}}
	}
	res.Rows = append(res.Rows, grows...)
	res.Rows = append(res.Rows, growthRows(res.Sizes)...)
	res.Rows = append(res.Rows, carriedRows(c.simReport, c.chaosReport)...)
	res.Notes = append(res.Notes, carriedNote(c.simReport, c.chaosReport))
	res.Machine.LoadAfter, res.Machine.TookSeconds = testnet.LoadAvg(), int(time.Since(began).Seconds())
	if err := writeMarkdown(c.out, res.Machine, res.Rows, res.Notes); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.jsonOut), 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(c.jsonOut, append(b, '\n'), 0o644); err != nil {
		return err
	}
	md, _ := os.ReadFile(c.out)
	fmt.Printf("%s\nwritten to %s and %s\n", md, c.out, c.jsonOut)
	return nil
}

// up starts an n-node testnet in c.dir from empty data dirs (leases left
// by an earlier run would still hold capacity), at production pace.
func up(ctx context.Context, c config, n int, log *slog.Logger) (*testnet.State, []peer.AddrInfo, time.Duration, error) {
	fmt.Fprintf(os.Stderr, "starting a %d-node testnet...\n", n)
	_ = testnet.Down(c.dir) // a previous run that was interrupted
	if err := os.RemoveAll(c.dir); err != nil {
		return nil, nil, 0, err
	}
	t0 := time.Now()
	st, err := testnet.Up(ctx, testnet.Options{Binary: c.bin, Dir: c.dir, Nodes: n, Logger: log, HeartbeatInterval: c.hb, AuditInterval: 10 * time.Minute})
	if err != nil {
		return nil, nil, 0, err
	}
	took := time.Since(t0)
	var addrs []peer.AddrInfo
	for _, nd := range st.Nodes {
		ai, err := node.ParseBootstrap([]string{nd.Addr})
		if err != nil {
			testnet.Down(c.dir)
			return nil, nil, 0, err
		}
		addrs = append(addrs, ai[0])
	}
	return st, addrs, took, nil
}

// measureFull measures every figure on a c.nodes testnet.
func measureFull(ctx context.Context, c config, log *slog.Logger) (Size, []Row, []string, error) {
	st, addrs, took, err := up(ctx, c, c.nodes, log)
	if err != nil {
		return Size{}, nil, nil, err
	}
	defer testnet.Down(c.dir)
	sz := Size{Nodes: c.nodes, UpSeconds: took.Seconds()}
	var rows []Row
	var notes []string
	label := fmt.Sprintf(" (%d nodes)", c.nodes)

	search, base, offers, err := searches(ctx, addrs, c.runs)
	if err != nil {
		return sz, nil, nil, err
	}
	sz.fillSearch(search, base, offers)
	rows = append(rows,
		ratioRow("cold search p50, in-process light client"+label, pct(search, 50), pct(base, 50), "new bare host: connect + 1 ping", 5),
		ratioRow("cold search p99, in-process light client"+label, pct(search, 99), pct(base, 99), "new bare host: connect + 1 ping", 8))
	notes = append(notes, fmt.Sprintf("Each cold search found %d offers.", offers))

	cli, err := cliSearches(ctx, c.bin, st, c.cliRuns)
	if err != nil {
		return sz, nil, nil, err
	}
	r := ratioRow("cold search p50, a whole `gpumesh search --json` process"+label, pct(cli, 50), pct(base, 50), "new bare host: connect + 1 ping", 0)
	r.Goal, r.Met = "—", nil
	rows = append(rows, r)

	// Jobs first: they end and free their GPUs, where the rents below
	// leave leases held with no job until their claim windows pass.
	since := time.Now()
	starts, execs, err := jobStarts(ctx, st.Nodes[0], c.jobRuns)
	if err != nil {
		return sz, nil, nil, err
	}
	r = ratioRow("countersigned lease → job process running p50 (spec over libp2p, lease check, sandbox with job network and PID namespace where root, exec)", pct(starts, 50), pct(execs, 50), "fork/exec of the same command", 10)
	rows = append(rows, r)

	cliRent, suppliers, err := cliRents(ctx, c.bin, st, c.cliRuns)
	if err != nil {
		return sz, nil, nil, err
	}
	r = ratioRow(fmt.Sprintf("`gpumesh rent` from a cold CLI p50 (each model's %d–%d suppliers)", suppliers[0], suppliers[1])+label, pct(cliRent, 50), pct(base, 50), "new bare host: connect + 1 ping", 0)
	r.Goal, r.Met = "p50 < 500 ms", met(pct(cliRent, 50) < 500*time.Millisecond)
	rows = append(rows, r)

	first, every, rt, err := rents(ctx, addrs, c.rentRuns)
	if err != nil {
		return sz, nil, nil, err
	}
	sz.RentP50Ms, sz.RentAllP50Ms, sz.StreamRTP50 = ms(pct(first, 50)), ms(pct(every, 50)), ms(pct(rt, 50))
	rows = append(rows,
		ratioRow("rent → countersigned lease p50, in-process, first acceptable quote"+label, pct(first, 50), pct(rt, 50), "3 bare stream round trips", 3))
	r = ratioRow("rent → countersigned lease p50, in-process, every expected answer (default Enough 3)"+label, pct(every, 50), pct(rt, 50), "3 bare stream round trips", 0)
	r.Goal, r.Met = "—", nil
	rows = append(rows, r)

	p50, p99, cov, err := askPropagation(ctx, st, since)
	if err != nil {
		return sz, nil, nil, err
	}
	sz.AskP50Ms, sz.AskP99Ms, sz.AskCoverage = ms(p50), ms(p99), cov
	rows = append(rows, propagationRow(c.nodes, p99, cov))

	fmt.Fprintf(os.Stderr, "letting the network idle for %s, then measuring for %s...\n", c.settle, c.window)
	time.Sleep(c.settle)
	rss, cpu, pss, err := idleMem(st, c.window)
	if err != nil {
		return sz, nil, nil, err
	}
	sz.IdleRSSMiB, sz.IdleCPUPct = mean(rss), mean(cpu)
	rows = append(rows,
		Row{Figure: fmt.Sprintf("idle node RSS, mean of %d (%s heartbeats, after %s)", c.nodes, c.hb, c.settle+c.window), Value: fmt.Sprintf("%.1f MiB (max %.1f)", mean(rss), slices.Max(rss)), Goal: "≤ 48 MiB", Met: met(mean(rss) <= 48)},
		Row{Figure: fmt.Sprintf("idle node PSS (its own pages and its share of the gpumesh binary's, which all %d map), mean", c.nodes), Value: fmt.Sprintf("%.1f MiB (max %.1f)", mean(pss), slices.Max(pss)), Goal: "≤ 32 MiB", Met: met(mean(pss) <= 32)},
		Row{Figure: fmt.Sprintf("idle node CPU, mean of %d over %s", c.nodes, c.window), Value: fmt.Sprintf("%.2f%% of a core (max %.2f%%)", mean(cpu), slices.Max(cpu)), Goal: "≤ 0.5% of a core", Met: met(mean(cpu) <= 0.5)})
	return sz, rows, notes, nil
}

// measureScale measures search, lease and ask propagation on an n-node
// testnet, and its idle footprint over a short window.
func measureScale(ctx context.Context, c config, n int, log *slog.Logger) (Size, error) {
	st, addrs, took, err := up(ctx, c, n, log)
	if err != nil {
		return Size{}, err
	}
	defer testnet.Down(c.dir)
	sz := Size{Nodes: n, UpSeconds: took.Seconds()}
	search, base, offers, err := searches(ctx, addrs, max(c.runs/2, 5))
	if err != nil {
		return sz, err
	}
	sz.fillSearch(search, base, offers)
	since := time.Now()
	first, every, rt, err := rents(ctx, addrs, max(c.rentRuns/2, 3))
	if err != nil {
		return sz, err
	}
	sz.RentP50Ms, sz.RentAllP50Ms, sz.StreamRTP50 = ms(pct(first, 50)), ms(pct(every, 50)), ms(pct(rt, 50))
	p50, p99, cov, err := askPropagation(ctx, st, since)
	if err != nil {
		return sz, err
	}
	sz.AskP50Ms, sz.AskP99Ms, sz.AskCoverage = ms(p50), ms(p99), cov
	time.Sleep(10 * time.Second)
	rss, cpu, _, err := idleMem(st, 10*time.Second)
	if err != nil {
		return sz, err
	}
	sz.IdleRSSMiB, sz.IdleCPUPct = mean(rss), mean(cpu)
	// The Explorer is opened on the settled network, as a user would
	// open it, not in the storm of its start-up.
	sz.explorer, sz.explorerErr = measureExplorer(ctx, st)
	if sz.explorerErr == nil {
		f := sz.explorer
		sz.ExplorerSuppliers, sz.ExplorerPaintMs, sz.ExplorerAllMs, sz.ExplorerBasePaintMs = f.Suppliers, ms(f.FirstPaint), ms(f.AllSuppliers), ms(f.BasePaint)
	}
	return sz, nil
}

func (sz *Size) fillSearch(search, base []time.Duration, offers int) {
	sz.SearchP50Ms, sz.SearchP99Ms = ms(pct(search, 50)), ms(pct(search, 99))
	sz.PingP50Ms, sz.PingP99Ms = ms(pct(base, 50)), ms(pct(base, 99))
	sz.Offers = offers
}

// propagationRow judges ask propagation: every node reached within
// 200 ms at 50 nodes; at 100 node processes on the same machine, 99% of
// node–ask pairs reached and p99 under 500 ms (issue 33); at other sizes
// the figure is reported.
func propagationRow(n int, p99 time.Duration, coverage float64) Row {
	r := Row{Figure: fmt.Sprintf("ask reaches every node p99 (%d nodes; %.1f%% of node–ask pairs reached)", n, coverage), Value: msStr(p99), Goal: "—"}
	switch n {
	case 50:
		r.Goal, r.Met = "< 200 ms, all reached", met(p99 < 200*time.Millisecond && coverage >= 100)
	case 100:
		r.Goal, r.Met = "< 500 ms, ≥ 99% reached", met(p99 < 500*time.Millisecond && coverage >= 99)
	}
	return r
}

// growthRows show how search, lease and ask propagation grow with the
// network's size, each as a multiple of its value on the smallest.
func growthRows(sizes []Size) []Row {
	if len(sizes) < 2 {
		return nil
	}
	slices.SortFunc(sizes, func(a, b Size) int { return a.Nodes - b.Nodes })
	var rows []Row
	type fig struct {
		name string
		get  func(Size) float64
		goal float64 // the largest size over the smallest at most (0: none)
	}
	for _, f := range []fig{
		{"cold search p50 over connect + ping", func(s Size) float64 { return s.SearchP50Ms / s.PingP50Ms }, 0},
		{"rent → lease p50 (first quote) over 3 stream round trips", func(s Size) float64 { return s.RentP50Ms / s.StreamRTP50 }, 0},
		{"ask propagation p99, ms", func(s Size) float64 { return s.AskP99Ms }, 0},
		{"start-up of the whole testnet, s", func(s Size) float64 { return s.UpSeconds }, 0},
		{"idle RSS per node, MiB", func(s Size) float64 { return s.IdleRSSMiB }, 0},
		{"idle CPU per node, % of a core", func(s Size) float64 { return s.IdleCPUPct }, 1.2},
	} {
		var parts []string
		for _, s := range sizes {
			parts = append(parts, fmt.Sprintf("%d nodes: %.2f", s.Nodes, f.get(s)))
		}
		r := Row{Figure: "growth: " + f.name, Value: strings.Join(parts, "; "), Baseline: fmt.Sprintf("%d nodes", sizes[0].Nodes), Goal: "—"}
		if b := f.get(sizes[0]); b > 0 {
			r.Ratio = f.get(sizes[len(sizes)-1]) / b
		}
		if f.goal > 0 {
			r.Goal, r.Met = fmt.Sprintf("≤ %g×", f.goal), met(r.Ratio > 0 && r.Ratio <= f.goal)
		}
		rows = append(rows, r)
	}
	return rows
}

// searches interleaves cold searches with the baseline, each to a random
// node, so that load changes hit both.
func searches(ctx context.Context, addrs []peer.AddrInfo, runs int) (search, base []time.Duration, offers int, err error) {
	quiet := slog.New(slog.DiscardHandler)
	for i := range runs {
		target := addrs[rand.IntN(len(addrs))]
		d, err := bareConnectPing(ctx, target)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("baseline run %d: %w", i, err)
		}
		base = append(base, d)
		d, found, err := coldSearch(ctx, target, quiet)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("search run %d: %w", i, err)
		}
		search = append(search, d)
		offers = found
	}
	return search, base, offers, nil
}

// cliSearches times whole `gpumesh search --json` processes.
func cliSearches(ctx context.Context, bin string, st *testnet.State, runs int) ([]time.Duration, error) {
	var out []time.Duration
	for range runs {
		nd := st.Nodes[rand.IntN(len(st.Nodes))]
		start := time.Now()
		if b, err := exec.CommandContext(ctx, bin, "search", "--network", testnet.Network, "--allow-simulated", "--json", "--bootstrap", nd.Addr).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cli search: %w: %s", err, b)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// cliRents times whole `gpumesh rent` processes, each with a fresh
// identity, for one GPU of each model in turn (so that leases without
// jobs do not pile up on one supplier); it returns the fewest and most
// suppliers of a model.
func cliRents(ctx context.Context, bin string, st *testnet.State, runs int) ([]time.Duration, [2]int, error) {
	perModel := map[string]int{}
	for _, nd := range st.Nodes {
		for _, part := range strings.Split(strings.TrimPrefix(nd.GPUs, "sim:"), ",") {
			perModel[strings.Split(part, ":")[0]]++
		}
	}
	var models []string
	span := [2]int{1 << 30, 0}
	for m, k := range perModel {
		models = append(models, m)
		span[0], span[1] = min(span[0], k), max(span[1], k)
	}
	slices.Sort(models)
	var out []time.Duration
	for i := range runs {
		m := models[i%len(models)]
		nd := st.Nodes[rand.IntN(len(st.Nodes))]
		start := time.Now()
		b, err := exec.CommandContext(ctx, bin, "rent", "--network", testnet.Network, "model="+m, "--json", "--max-price", "10", "--allow-unproven", "--allow-simulated", "--bootstrap", nd.Addr).CombinedOutput()
		if err != nil {
			return nil, span, fmt.Errorf("cli rent of %s: %w: %s", m, err, b)
		}
		out = append(out, time.Since(start))
	}
	return out, span, nil
}

// rents times leases from one joined renter, beside three bare stream
// round trips to a node (as many as a lease needs after the bid is
// gossiped: quote, proposal and countersignature, confirmation): taking
// the first acceptable quote, and waiting for every answer it can expect
// (the default).
func rents(ctx context.Context, addrs []peer.AddrInfo, runs int) (first, every, base []time.Duration, err error) {
	quiet := slog.New(slog.DiscardHandler)
	var rc *light.Client
	defer func() {
		if rc != nil {
			rc.Close()
		}
	}()
	f, _ := market.ParseFilter("")
	for i := range runs * 2 {
		// A renter may hold only a few leases with no job on them at each
		// supplier: a new renter (joined before the clock starts) every
		// two leases.
		if i%2 == 0 {
			if rc != nil {
				rc.Close()
			}
			if rc, err = light.New(ctx, light.WithNetwork(testnet.Network), light.WithBootstrap(addrs[:2]...), light.WithLogger(quiet), light.WithRenting()); err != nil {
				return nil, nil, nil, fmt.Errorf("rent client: %w", err)
			}
		}
		req := market.RentRequest{AllowSimulated: true, Filter: f, Count: 1, Duration: time.Hour, MaxPrice: 10_000_000, Wait: 2 * time.Second, AllowUnproven: true}
		if i%2 == 1 {
			req.Enough = 1
		}
		start := time.Now()
		if _, err := rc.Rent(ctx, req); err != nil {
			return nil, nil, nil, fmt.Errorf("rent run %d: %w", i, err)
		}
		if i%2 == 1 {
			first = append(first, time.Since(start))
		} else {
			every = append(every, time.Since(start))
		}
		d, err := streamRoundTrips(ctx, rc, addrs[rand.IntN(len(addrs))], 3)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("baseline: %w", err)
		}
		base = append(base, d)
	}
	return first, every, base, nil
}

// askPropagation reads every node's order book and times, for each ask
// signed since then by another node, how long it took to reach the node
// (received − created, one clock), and which share of node–ask pairs it
// reached: an ask counts as reached where the node holds it or a newer
// ask of the same supplier and model.
func askPropagation(ctx context.Context, st *testnet.State, since time.Time) (p50, p99 time.Duration, coverage float64, err error) {
	time.Sleep(3 * time.Second) // let the last reposts arrive
	type key struct{ peer, model string }
	books := make([][]api.OrderView, len(st.Nodes))
	for i, nd := range st.Nodes {
		c, err := api.ClientForDataDir(nd.API, nd.DataDir)
		if err != nil {
			return 0, 0, 0, err
		}
		o, err := c.Orders(ctx, "")
		c.Close()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("node %d: orders: %w", i, err)
		}
		books[i] = o.Asks
	}
	newest := map[key]api.OrderView{}
	var delays []time.Duration
	for i, asks := range books {
		for _, a := range asks {
			k := key{a.Peer, a.Model}
			if cur, ok := newest[k]; !ok || a.Created.After(cur.Created) {
				newest[k] = a
			}
			if a.Peer == st.Nodes[i].PeerID || a.Received == nil || a.Created.Before(since) {
				continue
			}
			delays = append(delays, max(a.Received.Sub(a.Created), 0))
		}
	}
	if len(delays) == 0 {
		return 0, 0, 0, errors.New("ask propagation: no ask signed during the run reached another node")
	}
	pairs, reached := 0, 0
	for _, a := range newest {
		if a.Created.Before(since) {
			continue
		}
		for i, asks := range books {
			if st.Nodes[i].PeerID == a.Peer {
				continue
			}
			pairs++
			if slices.ContainsFunc(asks, func(b api.OrderView) bool {
				return b.Peer == a.Peer && b.Model == a.Model && !b.Created.Before(a.Created)
			}) {
				reached++
			}
		}
	}
	return pct(delays, 50), pct(delays, 99), 100 * float64(reached) / float64(max(pairs, 1)), nil
}

// idleMem measures every node's RSS and CPU share over window, and its
// proportional set size: its own pages, plus its share of those it shares
// with the other nodes (the gpumesh binary's, mapped by every one).
func idleMem(st *testnet.State, window time.Duration) (rss, cpu, pss []float64, err error) {
	before := map[int]uint64{}
	for _, nd := range st.Nodes {
		before[nd.PID], _ = testnet.CPUTicks(nd.PID)
	}
	time.Sleep(window)
	for _, nd := range st.Nodes {
		after, err := testnet.CPUTicks(nd.PID)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("node %d: %w", nd.Index, err)
		}
		cpu = append(cpu, 100*float64(after-before[nd.PID])/100/window.Seconds()) // USER_HZ is 100
		r, err := rssMiB(nd.PID)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("node %d: %w", nd.Index, err)
		}
		rss = append(rss, r)
		p, err := kiBField(fmt.Sprintf("/proc/%d/smaps_rollup", nd.PID), "Pss:")
		if err != nil {
			return nil, nil, nil, fmt.Errorf("node %d: %w", nd.Index, err)
		}
		pss = append(pss, p/1024)
	}
	return rss, cpu, pss, nil
}

// kiBField reads the kB value of field (e.g. "Pss:") from a /proc file.
func kiBField(path, field string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			return strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}

// jobStarts runs jobs from node 0 through its API and reads, for each,
// the time from the countersigned lease to the supplier's word that the
// process runs, beside a plain fork/exec of the same command here.
func jobStarts(ctx context.Context, renter testnet.NodeInfo, runs int) (starts, execs []time.Duration, err error) {
	c, err := api.ClientForDataDir(renter.API, renter.DataDir)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	for i := range runs {
		t0 := time.Now()
		if err := exec.CommandContext(ctx, "true").Run(); err != nil {
			return nil, nil, fmt.Errorf("baseline exec: %w", err)
		}
		execs = append(execs, time.Since(t0))
		v, err := c.SubmitJob(ctx, api.JobRequest{Filter: "vram>=24", Count: 1, MaxPrice: "3.00", Argv: []string{"true"}, AllowUnproven: true, AllowSimulated: true})
		if err != nil {
			return nil, nil, fmt.Errorf("job %d: %w", i, err)
		}
		if len(v.Attempts) == 0 || v.Attempts[0].StartMs <= 0 {
			return nil, nil, fmt.Errorf("job %d: no start time in %+v", i, v)
		}
		starts = append(starts, time.Duration(v.Attempts[0].StartMs*float64(time.Millisecond)))
	}
	return starts, execs, nil
}

// streamRoundTrips opens a ping stream to target and times n round
// trips on it, opening included, over the renter's host. (One stream: the
// ping service limits streams per peer, and a fresh one per round trip
// trips that limit while the last is still being torn down.)
func streamRoundTrips(ctx context.Context, rc *light.Client, target peer.AddrInfo, n int) (time.Duration, error) {
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
	lc, err := light.New(ctx, light.WithNetwork(testnet.Network), light.WithBootstrap(target), light.WithLogger(log))
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
