// Command chaos is the chaos run behind `make chaos` (package
// testnet/chaos): a 20-node testnet of real gpumesh processes, some with
// clocks 30 s off, through a calm phase, a flood of valid-signed asks and
// random kills and restarts, under rents and jobs; it writes what held and
// what it measured to bench/CHAOS.md (and JSON beside it) and exits 1
// when a check failed.
//
//	chaos [-bin bin/gpumesh] [-nodes 20] [-calm 1m] [-flood 1m] [-kills 2m] [-out bench/CHAOS.md]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/testnet"
	"github.com/gpumesh/gpumesh/testnet/chaos"
)

func main() {
	if chaos.FloodMain() { // started again by the run as its flooder
		return
	}
	var o chaos.Options
	var out, jsonOut string
	var keep bool
	flag.StringVar(&o.Binary, "bin", "bin/gpumesh", "the gpumesh binary")
	flag.IntVar(&o.Nodes, "nodes", 20, "node processes")
	flag.DurationVar(&o.Calm, "calm", time.Minute, "length of the calm phase")
	flag.DurationVar(&o.Flood, "flood", time.Minute, "length of the flood phase")
	flag.DurationVar(&o.Kills, "kills", 2*time.Minute, "length of the kills phase")
	flag.DurationVar(&o.KillEvery, "kill-every", 10*time.Second, "a kill this often")
	flag.DurationVar(&o.Downtime, "downtime", 5*time.Second, "how long a killed node stays down")
	flag.Float64Var(&o.FloodRate, "flood-rate", 200, "the flooder's asks per second")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the kills and the models rented")
	flag.StringVar(&o.Dir, "dir", "", "the testnet's state directory (default: a temporary one, removed after)")
	flag.BoolVar(&keep, "keep", false, "keep the state directory (node logs and stores) after the run")
	flag.StringVar(&out, "out", "bench/CHAOS.md", "where to write the report")
	flag.StringVar(&jsonOut, "json", ".bench/chaos.json", "where to write the raw report")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o, out, jsonOut, keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, o chaos.Options, out, jsonOut string, keep bool) (int, error) {
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "gpumesh-chaos-")
		if err != nil {
			return 1, err
		}
		o.Dir = dir
	}
	if !keep {
		defer os.RemoveAll(o.Dir)
	} else {
		fmt.Fprintln(os.Stderr, "chaos: keeping", o.Dir)
	}
	load := testnet.LoadAvg()
	rep, err := chaos.Run(ctx, o)
	if err != nil {
		return 1, err
	}
	machine := fmt.Sprintf("Machine: %d cores, %s; load average %s before, %s after; commit %s; %s.",
		runtime.NumCPU(), runtime.Version(), load, testnet.LoadAvg(), testnet.Commit(), time.Now().UTC().Format(time.RFC3339))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return 1, err
	}
	if err := os.WriteFile(out, []byte(rep.Markdown(machine)), 0o644); err != nil {
		return 1, err
	}
	if jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return 1, err
		}
		if err := os.MkdirAll(filepath.Dir(jsonOut), 0o755); err != nil {
			return 1, err
		}
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return 1, err
		}
	}
	fmt.Printf("chaos: wrote %s\n", out)
	if len(rep.Failures) > 0 {
		for _, f := range rep.Failures {
			fmt.Fprintln(os.Stderr, "chaos: FAILED:", f)
		}
		return 1, nil
	}
	return 0, nil
}
