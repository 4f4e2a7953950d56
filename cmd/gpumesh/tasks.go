package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
)

// stdoutTerminal reports whether stdout is a terminal (progress bars).
func (a *app) stdoutTerminal() bool {
	f, ok := a.stdout.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// taskProgress is a group's "done/running/failed of N", with a bar in
// front when bar is set.
func taskProgress(v job.View, bar bool) string {
	s := fmt.Sprintf("%d/%d/%d of %d", v.Done, v.Running, v.Failed, v.TaskCount)
	if !bar || v.TaskCount == 0 {
		return s
	}
	const width = 20
	done := v.Done * width / v.TaskCount
	failed := min(width-done, (v.Failed*width+v.TaskCount-1)/v.TaskCount)
	return "[" + strings.Repeat("#", done) + strings.Repeat("x", failed) + strings.Repeat(".", width-done-failed) + "] " + s
}

// printGroup shows a task group and its tasks.
func (a *app) printGroup(v job.View) {
	fmt.Fprintf(a.stdout, "group     %s\nstate     %s", v.JobID, v.State)
	if v.Message != "" {
		fmt.Fprintf(a.stdout, " (%s)", v.Message)
	}
	fmt.Fprintf(a.stdout, "\ncommand   %s\ntasks     %d done, %d running, %d failed, %d pending of %d (at most %d at once)\npaid      %s\n",
		strings.Join(v.Argv, " "), v.Done, v.Running, v.Failed, v.Pending, v.TaskCount, v.Parallel, v.PaidMicros.String())
	if v.Outputs != "" {
		fmt.Fprintf(a.stdout, "outputs   %s\n", v.Outputs)
	}
	var rows [][]string
	for _, t := range v.Tasks {
		rows = append(rows, []string{strconv.Itoa(t.Index), short(t.JobID), t.State.String(), shortID(t.Supplier), t.PaidMicros.String()})
	}
	a.table([]string{"TASK", "JOB", "STATE", "SUPPLIER", "PAID"}, rows)
}

// followGroup prints a task group's ID and, unless detach, its progress
// until it ends; the command fails when the group does.
func (a *app) followGroup(ctx context.Context, c *api.Client, v job.View, detach bool) error {
	if a.json && detach {
		return a.printJSON(v)
	}
	fmt.Fprintf(a.stdout, "task group %s: %d tasks, at most %d at once\n", v.JobID, v.TaskCount, v.Parallel)
	if detach {
		fmt.Fprintf(a.stdout, "follow it: gpumesh jobs %s\n", v.JobID[:12])
		return nil
	}
	tty := false
	if f, ok := a.stderr.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	last := ""
	for v.State != job.StateSucceeded && v.State != job.StateFailed && v.State != job.StateStopped {
		select {
		case <-ctx.Done():
			fmt.Fprintf(a.stderr, "\ngpumesh: detached; the group goes on (gpumesh jobs %s)\n", v.JobID[:12])
			return nil
		case <-time.After(time.Second):
		}
		nv, err := c.Job(ctx, v.JobID)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return jobHint(err)
		}
		v = nv
		if p := taskProgress(v, tty); tty {
			fmt.Fprintf(a.stderr, "\r\033[K%s", p)
		} else if p != last {
			fmt.Fprintln(a.stderr, p)
			last = p
		}
	}
	if tty {
		fmt.Fprintln(a.stderr)
	}
	if a.json {
		if err := a.printJSON(v); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stderr, "gpumesh: task group %s %s: %s, paid %s\n", v.JobID[:12], v.State, taskProgress(v, false), v.PaidMicros.String())
		if v.Outputs != "" {
			fmt.Fprintf(a.stderr, "gpumesh: outputs in %s\n", v.Outputs)
		}
	}
	if v.State != job.StateSucceeded {
		return exitError{1, fmt.Errorf("task group %s %s: %s", v.JobID[:12], v.State, v.Message)}
	}
	return nil
}
