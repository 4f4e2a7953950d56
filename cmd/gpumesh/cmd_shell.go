package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/shell"
)

// Exit statuses of gpumesh shell besides the remote command's own.
const (
	// exitShellEnded: the lease ended (or the supplier stopped the job)
	// before the command exited.
	exitShellEnded = 254
	// exitShellLost: the stream to the supplier broke.
	exitShellLost = 255
)

func newShellCmd(a *app) *cobra.Command {
	var lease string
	var noTTY bool
	var rr api.RentRequest
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "shell (--lease ID | FILTER --max-price P) [-- CMD...]",
		Short: "Open a shell (or run a command) inside a job sandbox on a lease you rented",
		Long: `Shell runs a command on a lease your node rented (gpumesh rent) as a job like any other: in the
supplier's job sandbox, on the leased GPUs, in the job's network, metered and billed on the
lease. Without CMD it runs sh.

On a terminal (stdin and stdout both) the command gets a terminal too: keys go through as they
are (Ctrl-C interrupts the remote command, Ctrl-D ends the remote shell), window resizes follow,
and your terminal is restored at the end. Otherwise (-T, or stdin not a terminal) stdin, stdout
and stderr are passed through as they are. Either way the exit status is the remote command's.
When the lease ends first, shell says so and exits 254; a broken connection exits 255. The
lease stays yours afterwards: run, shell or release it.

With FILTER instead of --lease, shell first rents a lease as gpumesh rent does (--count, --hours,
--max-price ...) through your node, says which on stderr, and opens the shell on it; the lease is
released as idle within its claim window of the shell's end unless you start another job on it.`,
		Example: `  gpumesh shell --lease 3f9c2a71
  echo hi | gpumesh shell --lease 3f9c2a71 -- sh -c 'cat; exit 3'
  gpumesh shell model=h100-sxm --max-price 2.50 -- nvidia-smi`,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.quiet = true
			argv, filter := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				argv, filter = args[dash:], args[:dash]
			} else if lease == "" {
				argv, filter = nil, args
			}
			switch {
			case lease != "" && len(filter) > 0:
				return usageError{fmt.Errorf("--lease or a filter, not both (got %q before --)", filter)}
			case lease == "" && len(filter) == 0:
				return usageError{errors.New("give the lease to open the shell on, --lease ID (gpumesh rent makes one, gpumesh leases lists them), or a filter to rent one")}
			}
			rr.Filter, rr.Wait = strings.Join(filter, " "), wait.String()
			if lease == "" {
				if _, err := rr.ToRequest(); err != nil {
					return termsError(err, "")
				}
			}
			in, _ := cmd.InOrStdin().(*os.File)
			out, _ := a.stdout.(*os.File)
			tty := !noTTY && in != nil && out != nil && term.IsTerminal(int(in.Fd())) && term.IsTerminal(int(out.Fd()))
			req := api.ShellRequest{Argv: argv}
			if tty {
				cols, rows, err := term.GetSize(int(out.Fd()))
				if err != nil || rows < 1 || cols < 1 {
					rows, cols = 24, 80
				}
				req.TTY, req.Rows, req.Cols = true, rows, cols
				if t := os.Getenv("TERM"); t != "" {
					req.Env = []string{"TERM=" + t}
				}
			}
			if _, err := req.ToRequest(cmp.Or(lease, "new")); err != nil {
				return usageError{err}
			}
			c, err := a.nodeClient(cmd)
			if err != nil {
				return err
			}
			if lease == "" {
				sp := a.spin("renting through the node")
				v, err := c.Rent(cmd.Context(), rr)
				sp.Stop()
				var nm *market.NoMatch
				if errors.As(err, &nm) {
					return a.printNoMatch(nm)
				}
				if err != nil {
					return jobHint(err)
				}
				lease = v.LeaseID
				fmt.Fprintf(a.stderr, "gpumesh: rented lease %s (%d × %s from %s); gpumesh release %s ends it\n", short(v.LeaseID), v.Count, v.Model, shortID(v.Supplier), short(v.LeaseID))
			}
			sc, err := c.Shell(cmd.Context(), lease, req)
			if err != nil {
				return jobHint(err)
			}
			defer sc.Close()
			var x shell.Exit
			if tty {
				x, err = runTerminal(sc, in, out)
			} else {
				x, err = shell.Run(sc, shell.Streams{Stdin: cmd.InOrStdin(), Stdout: a.stdout, Stderr: a.stderr})
			}
			return shellExit(a.stderr, x, err)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&lease, "lease", "", "the lease to run on (an ID or unique prefix, as gpumesh leases lists it)")
	fl.BoolVarP(&noTTY, "no-tty", "T", false, "pass stdin, stdout and stderr through as they are, even on a terminal")
	fl.IntVar(&rr.Count, "count", 1, "with FILTER: GPUs to rent, all from one supplier")
	fl.Float64Var(&rr.Hours, "hours", 1, "with FILTER: lease length in hours")
	fl.StringVar(&rr.MaxPrice, "max-price", "", "with FILTER: highest price per GPU-hour you accept, e.g. 2.50")
	fl.DurationVar(&wait, "wait", 2*time.Second, "with FILTER: the longest to collect quotes")
	fl.BoolVar(&rr.AllowUnproven, "allow-unproven", false, "with FILTER: also lease from suppliers no trusted challenger has passed")
	fl.BoolVar(&rr.AllowSimulated, "allow-simulated", false, "with FILTER: "+allowSimulatedUsage)
	return cmd
}

// shellExit is the command's end for the remote command's exit x or a
// shell's error, which it writes to stderr (after the terminal was
// restored).
func shellExit(stderr io.Writer, x shell.Exit, err error) error {
	var ended *shell.EndedError
	switch {
	case errors.As(err, &ended):
		fmt.Fprintf(stderr, "gpumesh: %v; the command did not finish (gpumesh leases shows the lease)\n", err)
		return exitError{code: exitShellEnded, err: err}
	case err != nil:
		fmt.Fprintf(stderr, "gpumesh: %v\n", err)
		return exitError{code: exitShellLost, err: err}
	case x.Status() != 0:
		return exitError{code: x.Status() & 0xff, err: fmt.Errorf("exit status %d", x.Status())}
	}
	return nil
}

// runTerminal runs the shell on the local terminal in and out: raw mode
// (restored on every way out), every SIGWINCH sent as the new size.
func runTerminal(c io.ReadWriter, in, out *os.File) (shell.Exit, error) {
	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return shell.Exit{}, fmt.Errorf("terminal raw mode: %w", err)
	}
	defer func() { _ = term.Restore(int(in.Fd()), old) }()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	sizes := make(chan shell.Size, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-winch:
				if cols, rows, err := term.GetSize(int(out.Fd())); err == nil {
					select {
					case sizes <- shell.Size{Rows: uint16(rows), Cols: uint16(cols)}:
					case <-done:
						return
					}
				}
			case <-done:
				return
			}
		}
	}()
	return shell.Run(c, shell.Streams{Stdin: in, Stdout: out, Stderr: out, Resize: sizes})
}
