package sim

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"
)

var (
	simNodes = flag.Int("sim.nodes", envInt("SIM_NODES", 100), "nodes of the large run of TestMarket (SIM_NODES)")
	simSlots = flag.Int("sim.slots", envInt("SIM_SLOTS", 0), "slots of each run (SIM_SLOTS; 0: the default)")
	simSeed  = flag.Uint64("sim.seed", uint64(envInt("SIM_SEED", 1)), "seed of the order flow (SIM_SEED)")
	simDebug = flag.Bool("sim.debug", false, "log the nodes' debug logs")
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func runSim(t *testing.T, cfg Config) *Result {
	t.Helper()
	if *simDebug {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("%d nodes started in %s (seed %d)", cfg.Nodes, time.Since(start).Round(time.Millisecond), cfg.Seed)
	r, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMarketSmall(t *testing.T) {
	r := runSim(t, Config{Nodes: *simNodes, Slots: *simSlots, Seed: *simSeed})
	t.Logf("%+v", *r)
	for _, p := range r.Prices {
		t.Logf("%+v", p)
	}
}
