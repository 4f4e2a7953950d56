package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market"

	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// nodeClient is a client of the local node's API with its token: jobs
// are run, paid for and followed by the renter's own node, never by the
// CLI.
func (a *app) nodeClient(cmd *cobra.Command) (*api.Client, error) {
	cfg, err := a.loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	if cfg.API == "off" {
		return nil, usageError{errors.New("the node's API is off; jobs are driven through it")}
	}
	c, err := api.ClientForDataDir(cfg.API, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("no node token in %s: %w; start `gpumesh node` with this --data first: it runs, pays for and follows your jobs", cfg.DataDir, err)
	}
	return c, nil
}

// jobHint adds to an error of the node's job API what to do about it.
func jobHint(err error) error {
	switch {
	case errors.Is(err, api.ErrUnauthorized):
		return fmt.Errorf("%w; pass the --data of the node whose --api you ask", err)
	case errors.Is(err, api.ErrNotFound):
		return fmt.Errorf("%w; `gpumesh jobs` lists your node's jobs", err)
	case errors.Is(err, api.ErrUnavailable):
		return fmt.Errorf("%w; the node is still starting: try again in a moment", err)
	}
	return err
}

func newRunCmd(a *app) *cobra.Command {
	var (
		jr       api.JobRequest
		minRep   float64
		every    time.Duration
		interval time.Duration
		files    []string
		detach   bool
	)
	cmd := &cobra.Command{
		Use:   "run [FILTER...] --count N --max-price P [--hours H] [--checkpoint-every DUR] [--detach] -- CMD [ARGS...]",
		Short: "Rent GPUs and run a job on them, followed and paid for by your local node",
		Long: `Run rents COUNT GPUs matching FILTER (as rent does), sends the job to the supplier and
follows its output until it ends, exiting with the job's exit code.

The job belongs to your local node (gpumesh node with the same --data), not to this terminal:
the node checks and pays each usage receipt, pulls the job's checkpoints (files the job writes
in $CHECKPOINT_DIR), and, when the supplier is lost, rents again elsewhere and restarts the job
from its last checkpoint with $JOB_ATTEMPT one higher. With --detach it returns at once;
follow later with "gpumesh logs -f JOB".

With --tasks N it runs the command N times as a task group: each task is a job of its own
(its own lease, bill, restarts and failovers) with $TASK_INDEX (0..N-1) and $TASK_COUNT in its
environment, at most --parallel at once. Files a job writes in $OUTPUT_DIR come back to your
node when it succeeds: DATA/outputs/JOB, or DATA/outputs/GROUP/I for a task.

With --lease it rents nothing: the job runs on a lease your node rented already with
"gpumesh rent --data" (its GPUs, supplier and remaining time), and has no other attempt.`,
		Example: `  gpumesh run model=h100-sxm --count 1 --max-price 2.50 -- python train.py --epochs 3
  gpumesh run model=l40s --count 1 --max-price 1.20 --publish 8080:8000 --detach -- vllm serve my-model --port 8000
  gpumesh run --count 2 --max-price 3 --checkpoint-every 1m --file train.py --detach --json -- python train.py
  gpumesh run --lease 3f9c2a71 -- nvidia-smi
  gpumesh run --tasks 100 --parallel 8 vram>=24 --max-price 1 -- sh -c 'python sweep.py --point $TASK_INDEX --out $OUTPUT_DIR'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.quiet = true
			dash := cmd.ArgsLenAtDash()
			if dash < 0 || dash == len(args) {
				return usageError{errors.New("give the command to run after --, e.g. gpumesh run --count 1 --max-price 2 -- nvidia-smi")}
			}
			jr.Filter, jr.Argv = strings.Join(args[:dash], " "), args[dash:]
			if cmd.Flags().Changed("min-rep") {
				jr.MinRep = &minRep
			}
			if every != 0 {
				jr.CheckpointEvery = every.String()
			}
			if interval != 0 {
				jr.ReceiptInterval = interval.String()
			}
			for _, f := range files {
				local, remote, ok := strings.Cut(f, ":")
				if !ok {
					remote = local[strings.LastIndex(local, "/")+1:]
				}
				data, err := os.ReadFile(local)
				if err != nil {
					return usageError{fmt.Errorf("--file %s: %w", f, err)}
				}
				fi, _ := os.Stat(local)
				jr.Files = append(jr.Files, api.JobFile{Path: remote, Mode: uint32(fi.Mode().Perm()), Data: data})
			}
			if _, err := jr.ToRequest(); err != nil {
				return termsError(err, "")
			}
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			sp := a.spin("renting and starting the job")
			v, err := c.SubmitJob(cmd.Context(), jr)
			sp.Stop()
			var nm *market.NoMatch
			if errors.As(err, &nm) {
				return a.printNoMatch(nm)
			}
			if err != nil {
				return jobHint(err)
			}
			if v.TaskCount > 0 {
				return a.followGroup(cmd.Context(), c, v, detach)
			}
			if detach {
				if a.json {
					return a.printJSON(struct {
						JobID    string        `json:"job_id"`
						LeaseID  string        `json:"lease_id"`
						Supplier string        `json:"supplier"`
						State    job.State     `json:"state"`
						Attempt  uint32        `json:"attempt"`
						Publish  []job.Publish `json:"publish"`
					}{v.JobID, v.LeaseID, v.Supplier, v.State, v.Attempt, orEmpty(v.Publish)})
				}
				fmt.Fprintf(a.stdout, "job %s running on %s (lease %s)\nfollow it: gpumesh logs -f %s\n", v.JobID, v.Supplier, short(v.LeaseID), v.JobID[:12])
				for _, p := range v.Publish {
					fmt.Fprintf(a.stdout, "port %d of the job: %s\n", p.Port, p.Listen)
				}
				return nil
			}
			fmt.Fprintf(a.stderr, "gpumesh: job %s on %s (lease %s); Ctrl-C detaches, the job goes on\n", v.JobID[:12], shortID(v.Supplier), short(v.LeaseID))
			for _, p := range v.Publish {
				fmt.Fprintf(a.stderr, "gpumesh: port %d of the job: %s\n", p.Port, p.Listen)
			}
			return a.followToEnd(cmd.Context(), c, v.JobID)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&jr.Count, "count", 1, "GPUs to rent, all from one supplier")
	fl.Float64Var(&jr.Hours, "hours", 1, "lease length in hours (the job is stopped when it ends)")
	fl.StringVar(&jr.MaxPrice, "max-price", "", "highest price per GPU-hour you accept, e.g. 2.50")
	fl.Float64Var(&minRep, "min-rep", reputation.DefaultFloor, "never lease from a supplier whose reputation is below this")
	fl.BoolVar(&jr.AllowUnproven, "allow-unproven", false, "also lease from suppliers no trusted challenger has passed (any fresh key), after every proven one")
	fl.BoolVar(&jr.AllowSimulated, "allow-simulated", false, allowSimulatedUsage)
	fl.DurationVar(&every, "checkpoint-every", 0, "how often your node pulls the job's checkpoint (default 30s)")
	fl.StringVar(&jr.CheckpointDir, "checkpoint-dir", "", "where in its working dir the job keeps checkpoints (default: a folder of its own); the job finds it in $CHECKPOINT_DIR")
	fl.DurationVar(&interval, "receipt-interval", 0, "how often the supplier bills (default 10s)")
	fl.StringVar(&jr.CreditLimit, "credit-limit", "", "how far the supplier may run ahead of your payments (default two intervals' worth)")
	fl.StringVar(&jr.Restart, "restart", "never", "restart the job after its own failures: never, on-failure or on-failure:N")
	fl.StringArrayVar(&jr.Env, "env", nil, "environment variable NAME=VALUE for the job (repeatable)")
	fl.StringArrayVar(&files, "file", nil, "input file LOCAL[:PATH] copied into the job's working dir (repeatable)")
	fl.StringVar(&jr.Runtime, "runtime", "", "process (default), docker or podman (with --image)")
	fl.StringVar(&jr.Image, "image", "", "container image, with --runtime docker|podman")
	fl.BoolVar(&detach, "detach", false, "return once the job runs; your node goes on following it")
	fl.StringArrayVar(&jr.Ports, "port", nil, "a TCP port the job serves, as 8000 or 8000/tcp (repeatable): only declared ports can be reached, through gpumesh forward or --publish")
	fl.IntVar(&jr.Nodes, "nodes", 0, "run the job as a cluster of this many members, each on a supplier of its own with --count GPUs, leased all or nothing; each member's job gets RANK, WORLD_SIZE, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT and a cluster address every other member reaches on any TCP port (torchrun runs unchanged)")
	fl.IntVar(&jr.MasterPort, "master-port", 0, "with --nodes: MASTER_PORT, the port rank 0 serves the rendezvous on (default 29500)")
	fl.IntVar(&jr.Replicas, "replicas", 1, "run the job on this many distinct suppliers at once, behind the same --publish address (each replica is leased, metered and settled on its own; one that fails its health checks is replaced)")
	fl.StringVar(&jr.Health, "health", "", "HTTP path your node checks each replica at, e.g. /healthz (default: a TCP connect to the first port)")
	fl.StringVar(&jr.HealthGrace, "health-grace", "", "how long a new replica may take to become healthy before it is replaced (default 5m)")
	fl.StringVar(&jr.Lease, "lease", "", "run on this lease you rented already (an ID or unique prefix, as gpumesh leases lists it) instead of renting")
	fl.IntVar(&jr.Tasks, "tasks", 0, "run the command this many times as a task group, each task a job of its own with $TASK_INDEX and $TASK_COUNT")
	fl.IntVar(&jr.Parallel, "parallel", 0, "with --tasks: at most this many tasks at once (default min(tasks, 8))")
	fl.StringArrayVar(&jr.Publish, "publish", nil, "[HOST:]LOCALPORT:PORT: your node listens on HOST:LOCALPORT (HOST 127.0.0.1 by default) and carries each connection to the job's PORT, on whichever supplier runs it (repeatable; declares PORT)")
	addKeyFlags(fl, namedKeys("api"))
	return cmd
}

// followToEnd prints the job's output until it ends and returns its exit
// status as the command's.
func (a *app) followToEnd(ctx context.Context, c *api.Client, id string) error {
	err := c.Logs(ctx, id, 0, true, a.stdout)
	if ctx.Err() != nil {
		fmt.Fprintf(a.stderr, "gpumesh: detached; the job goes on (gpumesh logs -f %s)\n", id[:12])
		return nil
	}
	if err != nil {
		return err
	}
	v, err := c.Job(context.Background(), id)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "gpumesh: job %s %s after %d attempt(s), paid %s\n", id[:12], v.State, len(v.Attempts), v.PaidMicros.String())
	switch v.State {
	case job.StateSucceeded:
		return nil
	case job.StateFailed:
		code := v.ExitCode
		if code == 0 {
			code = 1
		}
		return exitError{code, fmt.Errorf("job %s failed: %s", id[:12], v.Message)}
	}
	return exitError{1, fmt.Errorf("job %s %s: %s", id[:12], v.State, v.Message)}
}

func newJobsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs [JOB]",
		Short: "List your node's jobs (or show one) with their state, attempt and supplier",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				v, err := c.Job(cmd.Context(), args[0])
				if err != nil {
					return jobHint(err)
				}
				if a.json {
					return a.printJSON(v)
				}
				if v.TaskCount > 0 {
					a.printGroup(v)
					return nil
				}
				a.printJob(v)
				return nil
			}
			vs, err := c.Jobs(cmd.Context())
			if err != nil {
				return jobHint(err)
			}
			if a.json {
				return a.printJSON(orEmpty(vs))
			}
			if len(vs) == 0 {
				fmt.Fprintln(a.stdout, "no jobs")
				return nil
			}
			var rows [][]string
			bar := a.stdoutTerminal()
			for _, v := range vs {
				replica := "-"
				if v.Group != "" {
					replica = fmt.Sprintf("%s/%d", short(v.Group)[:8], v.Replica)
				}
				if v.Nodes > 0 {
					replica = fmt.Sprintf("cluster of %d", v.Nodes)
				}
				if v.TaskCount > 0 {
					state := v.State.String() + " " + taskProgress(v, bar)
					rows = append(rows, []string{v.JobID[:12], state, "-", "-", "-", "-", v.PaidMicros.String(), strings.Join(v.Argv, " "), v.Created.Local().Format("01-02 15:04:05")})
					continue
				}
				rows = append(rows, []string{v.JobID[:12], v.State.String(), orDash(v.Health), replica, strconv.Itoa(int(v.Attempt)), shortID(v.Supplier), v.PaidMicros.String(), strings.Join(v.Argv, " "), v.Created.Local().Format("01-02 15:04:05")})
			}
			a.table([]string{"JOB", "STATE", "HEALTH", "REPLICA", "ATTEMPT", "SUPPLIER", "PAID", "COMMAND", "CREATED"}, rows)
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

func (a *app) printJob(v job.View) {
	fmt.Fprintf(a.stdout, "job       %s\nstate     %s", v.JobID, v.State)
	if v.Message != "" {
		fmt.Fprintf(a.stdout, " (%s)", v.Message)
	}
	fmt.Fprintf(a.stdout, "\ncommand   %s\npaid      %s\nfailovers %d, restarts %d\n", strings.Join(v.Argv, " "), v.PaidMicros.String(), v.Failovers, v.Restarts)
	if v.Group != "" {
		fmt.Fprintf(a.stdout, "replica   %d of group %s\n", v.Replica, v.Group)
	}
	if v.Health != "" {
		fmt.Fprintf(a.stdout, "health    %s\n", v.Health)
	}
	for _, p := range v.Publish {
		fmt.Fprintf(a.stdout, "serves    port %d on %s\n", p.Port, p.Listen)
	}
	if len(v.Members) > 0 {
		fmt.Fprintf(a.stdout, "cluster   %d members, attempt %d (gpumesh logs %s --rank R)\n", v.Nodes, v.Attempt, v.JobID[:12])
		var rows [][]string
		for _, m := range v.Members {
			var links []string
			for _, l := range m.Links {
				rtt := "?"
				if l.RTTms > 0 {
					rtt = strconv.FormatFloat(l.RTTms, 'f', 1, 64) + "ms"
				}
				if !l.Direct {
					rtt += "(not direct)"
				}
				links = append(links, fmt.Sprintf("%d:%s", l.To, rtt))
			}
			rows = append(rows, []string{strconv.Itoa(m.Rank), m.State.String(), strconv.Itoa(int(m.Attempt)), shortID(m.Supplier), short(m.LeaseID), m.PaidMicros.String(), orDash(strings.Join(links, " ")), orDash(m.Message)})
		}
		a.table([]string{"RANK", "STATE", "ATTEMPT", "SUPPLIER", "LEASE", "PAID", "RTT TO RANK", "MESSAGE"}, rows)
		fmt.Fprintln(a.stdout, "rank 0's attempts:")
	}
	var rows [][]string
	for _, at := range v.Attempts {
		rows = append(rows, []string{strconv.Itoa(int(at.Attempt)), shortID(at.Supplier), short(at.LeaseID), orDash(at.Outcome.String()), strconv.Itoa(at.Receipts), at.PaidMicros.String(), strconv.FormatBool(at.Settled), short(at.Checkpoint)})
	}
	a.table([]string{"ATTEMPT", "SUPPLIER", "LEASE", "OUTCOME", "RECEIPTS", "PAID", "SETTLED", "RESUMED FROM"}, rows)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return orDash(s)
}

func newLogsCmd(a *app) *cobra.Command {
	var (
		follow bool
		task   int
		rank   int
	)
	cmd := &cobra.Command{
		Use:   "logs JOB [--task I | --rank R]",
		Short: "Print a job's output, all attempts in order; -f follows it until the job ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			id := args[0]
			if rank > 0 {
				v, err := c.Job(cmd.Context(), id)
				if err != nil {
					return jobHint(err)
				}
				if rank >= len(v.Members) {
					return fmt.Errorf("job %s has no rank %d (a cluster of %d members)", v.JobID[:12], rank, len(v.Members))
				}
				id = v.Members[rank].JobID
			}
			err = c.TaskLogs(cmd.Context(), id, task, 0, follow, a.stdout)
			if cmd.Context().Err() != nil {
				return nil // interrupted: the job goes on
			}
			return jobHint(err)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output as it arrives, until the job ends")
	cmd.Flags().IntVar(&task, "task", -1, "of a task group (JOB is the group): the output of its task with this index")
	cmd.Flags().IntVar(&rank, "rank", -1, "a cluster job: the output of this rank's member (default: rank 0's)")
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

func newStopCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a job: its supplier ends the process, then both sides settle the bill",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			v, err := c.StopJob(cmd.Context(), args[0], "")
			if err != nil {
				return jobHint(err)
			}
			if a.json {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.stdout, "asked %s to stop job %s\n", shortID(v.Supplier), v.JobID[:12])
			return nil
		},
	}
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}

func newReceiptsCmd(a *app) *cobra.Command {
	var (
		lease  string
		verify bool
	)
	cmd := &cobra.Command{
		Use:   "receipts [--lease ID] [--verify]",
		Short: "Show the usage receipts your node keeps, per lease; --verify re-checks every signature, the hash chain and the sum",
		Long: `Receipts lists, per lease, the signed usage receipts your node holds (as renter or supplier), the
GPU-seconds and the amount they bill, and what was paid. Every report is verified from the
stored records: each receipt's and voucher's signature, the receipts' hash chain and sequence,
that no receipt bills more than wall-clock time × GPUs, the cumulative amounts, and the
settlement statement. With --verify the command exits 1 when any lease has a problem.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			reps, err := c.Receipts(cmd.Context(), lease)
			if err != nil {
				return jobHint(err)
			}
			bad := 0
			for _, r := range reps {
				if !r.Valid {
					bad++
				}
			}
			if a.json {
				var err error
				if lease != "" && len(reps) == 1 {
					err = a.printJSON(reps[0])
				} else {
					err = a.printJSON(orEmpty(reps))
				}
				if err == nil && verify && bad > 0 {
					err = silentError{fmt.Errorf("%d lease(s) with problems", bad)}
				}
				return err
			}
			if len(reps) == 0 {
				fmt.Fprintln(a.stdout, "no receipts")
				return nil
			}
			var rows [][]string
			for _, r := range reps {
				valid := "valid"
				if !r.Valid {
					valid = "INVALID"
				}
				util := "not measured"
				if r.UtilPct != nil && r.MemUsedBytes != nil {
					util = fmt.Sprintf("%.0f%% %.1f GiB", *r.UtilPct, float64(*r.MemUsedBytes)/(1<<30))
				}
				rows = append(rows, []string{short(r.LeaseID), r.Role.String(), strconv.Itoa(r.Receipts), fmt.Sprintf("%.1f", r.GPUSeconds), util, money.Micros(r.AmountMicros).String(), money.Micros(r.PaidMicros).String(), strconv.FormatBool(r.Settled), valid})
			}
			a.table([]string{"LEASE", "ROLE", "RECEIPTS", "GPU-SECONDS", "GPU USE", "BILLED", "PAID", "SETTLED", "CHECK"}, rows)
			for _, r := range reps {
				for _, p := range r.Problems {
					fmt.Fprintf(a.stdout, "  %s: %s\n", short(r.LeaseID), p)
				}
			}
			if verify && bad > 0 {
				return silentError{fmt.Errorf("%d lease(s) with problems", bad)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&lease, "lease", "", "only the lease with this ID (or ID prefix)")
	cmd.Flags().BoolVar(&verify, "verify", false, "exit 1 when any bill fails verification")
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}
