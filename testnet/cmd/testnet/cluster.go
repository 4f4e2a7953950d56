package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/testnet"
)

// clusterDemo runs ringcheck.py (testnet/workloads: a stdlib-only
// stand-in for a distributed training job) as a cluster of two members
// on two suppliers: each member's job reaches the other's at its cluster
// address on kernel-chosen ports, and rank 0 prints the all-reduce
// results. It needs job networks (up --job-network, or --netns) and
// python3.
func (c *cli) clusterDemo(ctx context.Context, st *testnet.State, bin string) error {
	const title = "clusters (one job across two suppliers, its members connected at cluster addresses)"
	if !st.JobNetwork {
		fmt.Fprintf(c.stdout, "# %s need suppliers that give jobs networks of their own: run the testnet as root on Linux with iproute2 and nftables, or see them with `make testnet-netns`\n\n", title)
		return nil
	}
	if why := c.noServices(ctx, st); why != "" {
		fmt.Fprintf(c.stdout, "# %s need suppliers that give jobs networks of their own; node 1 says: %s\n\n", title, why)
		return nil
	}
	script, err := filepath.Abs("testnet/workloads/ringcheck.py")
	if err != nil {
		return err
	}
	if _, err := os.Stat(script); err != nil {
		fmt.Fprintf(c.stdout, "# %s: run the demo from the repository root, where testnet/workloads/ringcheck.py is\n\n", title)
		return nil
	}
	data := []string{"--data", st.Nodes[0].DataDir, "--api", st.Nodes[0].API}
	runArgs := append([]string{"run", "vram>=24", "--nodes", "2", "--count", "1", "--max-price", "1.50", "--hours", "1",
		"--receipt-interval", "1s", "--checkpoint-every", "1s", "--file", script + ":ringcheck.py",
		"--allow-unproven", "--allow-simulated", "--detach", "--json"}, data...)
	runArgs = append(runArgs, "--", "python3", "ringcheck.py", "--mib", "2", "--steps", "5")
	var started struct {
		JobID string `json:"job_id"`
	}
	if err := c.demoRun(ctx, st, "node 0 runs one job as a cluster of two members on two suppliers, leased all or nothing: each member's job gets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a cluster address (100.64.0.1, 100.64.0.2) that the other reaches on any TCP port, through the mesh; ringcheck.py meets at rank 0's store, connects every rank to every other on kernel-chosen ports and all-reduces 2 MiB five times", bin, runArgs, &started); err != nil {
		return err
	}
	show := func(title string, args ...string) error {
		return c.demoShow(ctx, st, title, false, bin, append(args, data...)...)
	}
	if err := show("rank 0's output to the end: each all-reduce checked, then the bus bandwidth and round trip between the members", "logs", "-f", started.JobID); err != nil {
		return err
	}
	if err := show("rank 1's output", "logs", "--rank", "1", started.JobID); err != nil {
		return err
	}
	return show("the cluster: its members, their suppliers, leases and bills", "jobs", started.JobID)
}

// tasksDemo runs a task group: one command six times, three at once,
// each task a job of its own with TASK_INDEX and TASK_COUNT, its
// $OUTPUT_DIR brought back to node 0 under one folder per task.
func (c *cli) tasksDemo(ctx context.Context, st *testnet.State, bin string) error {
	data := []string{"--data", st.Nodes[0].DataDir, "--api", st.Nodes[0].API}
	const task = `echo "task $TASK_INDEX of $TASK_COUNT, attempt $JOB_ATTEMPT, on GPU $CUDA_VISIBLE_DEVICES" | tee "$OUTPUT_DIR/result.txt"; sleep 1`
	runArgs := append([]string{"run", "vram>=24", "--tasks", "6", "--parallel", "3", "--count", "1", "--max-price", "1.50", "--hours", "1",
		"--receipt-interval", "1s", "--allow-unproven", "--allow-simulated", "--detach", "--json"}, data...)
	runArgs = append(runArgs, "--", "sh", "-c", task)
	var group struct {
		JobID string `json:"job_id"`
	}
	if err := c.demoRun(ctx, st, "node 0 runs a task group: the same command six times, at most three at once, each task a job of its own (its own lease, bill and failover) with TASK_INDEX and TASK_COUNT, its $OUTPUT_DIR brought back to node 0", bin, runArgs, &group); err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var v struct {
			State string `json:"state"`
		}
		if b, err := c.demoOutput(ctx, st, bin, append([]string{"jobs", group.JobID, "--json"}, data...)...); err == nil && json.Unmarshal(b, &v) == nil &&
			(v.State == "succeeded" || v.State == "failed" || v.State == "stopped") {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("testnet: demo: the task group did not end within 3 minutes")
		}
		time.Sleep(time.Second)
	}
	if err := c.demoShow(ctx, st, "the group: each task, its supplier and what it cost", false, bin, append([]string{"jobs", group.JobID}, data...)...); err != nil {
		return err
	}
	dir := filepath.Join(st.Nodes[0].DataDir, "outputs", group.JobID)
	fmt.Fprintf(c.stdout, "# each task's outputs, in node 0's data dir: %s/INDEX/\n", dir)
	for i := range 6 {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i), "result.txt"))
		if err != nil {
			return fmt.Errorf("testnet: demo: task %d's outputs: %w", i, err)
		}
		fmt.Fprintf(c.stdout, "%d/result.txt: %s", i, b)
	}
	fmt.Fprintln(c.stdout)
	return nil
}
