package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node/api"
)

func newForwardCmd(a *app) *cobra.Command {
	var list, stop bool
	cmd := &cobra.Command{
		Use:   "forward JOB [[HOST:]LOCALPORT:]PORT | --list [JOB] | --stop JOB [HOST:LOCALPORT]",
		Short: "Reach a port your job serves from a local address, on whichever supplier runs it",
		Long: `Forward has your node listen on a local address and carry every connection it accepts to
PORT of the job, through the mesh: nothing is opened on your machine or the supplier's, and the
supplier may be behind NAT. The job must declare PORT (gpumesh run --port PORT). When the job
fails over to another supplier, the address stays the same and new connections go to the new
one. The forward lasts as long as the job (a restarted node listens again on the same address).

HOST is 127.0.0.1 when left out; LOCALPORT 0, or left out, picks a free port.`,
		Example: `  gpumesh forward 3f2a9c 8000            # 127.0.0.1:<free port> -> port 8000 of the job
  gpumesh forward 3f2a9c 8080:8000       # 127.0.0.1:8080 -> 8000
  gpumesh forward --list
  gpumesh forward --stop 3f2a9c 127.0.0.1:8080`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			switch {
			case list:
				if len(args) > 1 {
					return usageError{errors.New("--list takes at most a job")}
				}
				id := ""
				if len(args) == 1 {
					id = args[0]
				}
				fs, err := c.Forwards(cmd.Context(), id)
				if err != nil {
					return jobHint(err)
				}
				if a.json {
					return a.printJSON(orEmpty(fs))
				}
				if len(fs) == 0 {
					fmt.Fprintln(a.stdout, "no forwards")
					return nil
				}
				var rows [][]string
				for _, f := range fs {
					rows = append(rows, []string{short(f.JobID), f.Listen, strconv.Itoa(int(f.Port)), strconv.FormatInt(f.Open, 10), strconv.FormatInt(f.Accepted, 10), strconv.FormatInt(f.Failed, 10), orDash(f.LastError)})
				}
				a.table([]string{"JOB", "LOCAL", "PORT", "OPEN", "ACCEPTED", "FAILED", "LAST FAILURE"}, rows)
				return nil
			case stop:
				if len(args) == 0 {
					return usageError{errors.New("--stop needs a job, and optionally the local address")}
				}
				listen := ""
				if len(args) == 2 {
					listen = args[1]
				}
				if err := c.Unforward(cmd.Context(), args[0], listen); err != nil {
					return jobHint(err)
				}
				fmt.Fprintln(a.stdout, "forward closed")
				return nil
			}
			if len(args) != 2 {
				return usageError{errors.New("give the job and its port, e.g. gpumesh forward 3f2a9c 8080:8000")}
			}
			p, err := api.ParsePublish(args[1])
			if err != nil {
				return usageError{err}
			}
			v, err := c.Forward(cmd.Context(), args[0], p.Listen, p.Port)
			if err != nil {
				return jobHint(err)
			}
			if a.json {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.stdout, "%s -> port %d of job %s\n", v.Listen, v.Port, short(v.JobID))
			return nil
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "list the forwards (of one job, or all)")
	cmd.Flags().BoolVar(&stop, "stop", false, "close a job's forward on the local address (all its forwards when none is given)")
	addKeyFlags(cmd.Flags(), namedKeys("api"))
	return cmd
}
