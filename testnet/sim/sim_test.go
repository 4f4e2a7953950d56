package sim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/testnet"
)

// The large run of TestMarket, and where its table goes, are chosen by
// flags or the environment (make sim sets them).
var (
	simNodes = flag.Int("sim.nodes", envInt("SIM_NODES", 100), "nodes of TestMarket's large run, beside the 100-node one (SIM_NODES)")
	simSlots = flag.Int("sim.slots", envInt("SIM_SLOTS", 0), "slots of the large run (SIM_SLOTS; 0: 6)")
	simSeed  = flag.Uint64("sim.seed", uint64(envInt("SIM_SEED", 1)), "seed of the order flow (SIM_SEED)")
	simSeeds = flag.Int("sim.seeds", envInt("SIM_SEEDS", 1), "how many seeds (from -sim.seed on) the 100-node run takes, one run each (SIM_SEEDS)")
	simLoad  = flag.Float64("sim.load", envFloat("SIM_LOAD", 0), "offered load, mean GPUs asked for over the honest GPUs (SIM_LOAD; 0: Config's 0.9)")
	simWarm  = flag.Float64("sim.warm", envFloat("SIM_WARM", 0), "share of the honest GPUs leased before the first slot (SIM_WARM; 0: a cold start)")
	simOut   = flag.String("sim.report", os.Getenv("SIM_REPORT"), "write the table of figures to this Markdown file (SIM_REPORT)")
	simDebug = flag.Bool("sim.debug", false, "log the nodes' debug logs to stderr")
)

// minFillRatio is what TestMarket requires of every run: a floor
// against regressions, below GoalFillRatio (which the table reports,
// pass or short).
const minFillRatio = 0.85

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestMarket runs the market with 100 nodes (and, when asked, a larger
// network) and checks what it did: leases only from honest suppliers,
// each countersigned and kept by both sides, no GPU booked twice,
// gossip reaching nearly every node, and fills near the central
// matcher's. It logs the figures as a table.
func TestMarket(t *testing.T) {
	if testing.Short() {
		t.Skip("a 100-node simulation takes about two minutes")
	}
	load := testnet.LoadAvg()
	var runs []*Result
	for k := range max(1, *simSeeds) {
		runs = append(runs, runSim(t, Config{Nodes: 100, Seed: *simSeed + uint64(k), Load: *simLoad, Warm: *simWarm}))
	}
	if *simNodes > 100 {
		slots := *simSlots
		if slots == 0 {
			slots = 6
		}
		cfg := largeRun(*simNodes, slots, *simSeed)
		cfg.Load, cfg.Warm = *simLoad, *simWarm
		runs = append(runs, runSim(t, cfg))
	}
	for _, r := range runs {
		checkRun(t, r)
	}
	table := Table(runs...)
	t.Log("\n" + table)
	if *simOut != "" {
		machine := fmt.Sprintf("Machine: %d cores, %s, %s; load average %s before, %s after; %s.\n\n"+
			"Node code: commit %s. Every node's market is built by market/assembly, the code a gpumesh node runs (node/market.go); the simulation swaps only the network (an in-process fabric) and the clock.\n\n",
			runtime.NumCPU(), runtime.GOOS, runtime.Version(), load, testnet.LoadAvg(), time.Now().UTC().Format("2006-01-02"), testnet.Commit())
		if t.Failed() {
			machine += "**The run failed a check** (the test log says which): the figures below are what it measured.\n\n"
		}
		if err := writeReport(*simOut, machine+table); err != nil {
			t.Fatal(err)
		}
	}
}

// largeRun is the configuration of a run of n nodes: the same arrivals
// per node per simulated minute as the 100-node run, each slot spread
// over more real time in proportion to the CPU work it takes, which
// grows with the square of the nodes (n times the orders, each checked
// by every node), times 0.6. Scaled linearly instead, a 1000-node run
// took 1882 s of CPU for 6 slots of 30 s on a 2-core machine: its nodes'
// validation queues backed up to pubsub's 30 s limit, gossip reached
// 62% of the nodes, and renters timed out. At 1000 nodes a slot is 2 min
// of renting and 1 min of settling. In simulated time a slot is twice
// that and a rent's time limit, in whole minutes (7 min at 1000 nodes),
// so that its renting ends well before the next boundary, on which its
// leases are sized to end (Sim.Run).
func largeRun(n, slots int, seed uint64) Config {
	sq := time.Duration(n * n)
	c := Config{Nodes: n, Slots: slots, Seed: seed,
		RealSlot: 2 * time.Second * sq * 6 / (100 * 100 * 10),
		Settle:   time.Second * sq * 6 / (100 * 100 * 10)}
	c.Slot = max(2*time.Minute, (2 * (c.RealSlot + c.Settle + leaseMargin)).Round(time.Minute))
	return c
}

func checkRun(t *testing.T, r *Result) {
	t.Helper()
	for i, f := range r.Faults {
		if i == 5 {
			t.Errorf("%d nodes: and %d more faults", r.Nodes, len(r.Faults)-5)
			break
		}
		t.Errorf("%d nodes: %s", r.Nodes, f)
	}
	if r.ImpostorLeases != 0 {
		t.Errorf("%d nodes: %d leases from impostors; reputation screening should leave them out", r.Nodes, r.ImpostorLeases)
	}
	if r.OffGrid != 0 {
		t.Errorf("%d nodes: %d slots or leases off the slot grid; leases may have held their GPUs for other slots than the central matcher's", r.Nodes, r.OffGrid)
	}
	if r.DoubleBooked != 0 {
		t.Errorf("%d nodes: %d GPUs leased twice at once", r.Nodes, r.DoubleBooked)
	}
	if r.Central == 0 || r.Filled == 0 {
		t.Fatalf("%d nodes: market filled %d, central %d of %d requests", r.Nodes, r.Filled, r.Central, r.Requests)
	}
	if got := r.FillRatio(); got < minFillRatio {
		t.Errorf("%d nodes: the market filled %d, %.3f of the central matcher's %d; want at least %.2f", r.Nodes, r.Filled, got, r.Central, minFillRatio)
	}
	if r.Reach < 0.9 {
		t.Errorf("%d nodes: gossip reached %.3f of the nodes on average; want at least 0.9", r.Nodes, r.Reach)
	}
	for i, m := range r.Missed {
		if i == 10 {
			break
		}
		t.Logf("%d nodes: missed %s", r.Nodes, m)
	}
}

func runSim(t *testing.T, cfg Config) *Result {
	t.Helper()
	if *simDebug {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	start := time.Now()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("%d nodes started in %s; seed %d", cfg.Nodes, time.Since(start).Round(time.Millisecond), cfg.Seed)
	r, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes: %d requests, market filled %d, central %d (%.3f), in %s", r.Nodes, r.Requests, r.Filled, r.Central, r.FillRatio(), r.Wall.Round(time.Second))
	return r
}

// writeReport writes the table under a heading to path (relative paths
// from the module root, where make runs).
func writeReport(path, table string) error {
	if !filepath.IsAbs(path) {
		path = filepath.Join("..", "..", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	body := "# Market simulation\n\nWritten by `make sim` (testnet/sim, TestMarket). " +
		"See testnet/sim/doc.go for the model: what runs, the order flow, the central matcher and what each figure measures.\n\n" + table
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
