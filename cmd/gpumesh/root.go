package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/node"
)

// app carries the global flags and output streams to every command.
type app struct {
	stdout, stderr io.Writer
	json           bool
	data, config   string
	quiet          bool // a client command: default log level warn
	journal        bool // stderr is journald's ($JOURNAL_STREAM): log with priorities, without time=
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr, journal: journalStream(os.Getenv("JOURNAL_STREAM"), stderr)}
	root := &cobra.Command{
		Use:   "gpumesh",
		Short: "A peer-to-peer GPU compute marketplace",
		Long: `gpumesh turns scattered GPUs into capacity anyone can rent, with no central operator.
Run "gpumesh node" on a machine with GPUs to supply them; run "gpumesh search" anywhere to find them.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nrun '%s --help' for usage", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.data, "data", "", "data directory (default $GPUMESH_HOME, else ~/.gpumesh, else the service's "+node.ServiceDataDir+" where it may be opened)")
	pf.StringVar(&a.config, "config", "", "TOML config file (default DATA/config.toml if present; "+node.ServiceConfigFile+" with the service's data dir)")
	pf.BoolVar(&a.json, "json", false, "print machine-readable JSON")
	addKeyFlags(pf, globalKeys())

	root.AddCommand(
		newNodeCmd(a), newIDCmd(a), newGPUsCmd(a), newConfigCmd(a),
		newSearchCmd(a), newPeersCmd(a), newVersionCmd(a),
		newRentCmd(a), newOrdersCmd(a), newLeasesCmd(a), newReleaseCmd(a), newPricesCmd(a), newChallengeCmd(a),
		newRunCmd(a), newShellCmd(a), newJobsCmd(a), newLogsCmd(a), newStopCmd(a), newForwardCmd(a), newReceiptsCmd(a),
		newSettleCmd(a), newDoctorCmd(a), newGenDocsCmd(a),
	)
	root.InitDefaultCompletionCmd()
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every group of commands (completion,
// config ...) fail with a usage error on a subcommand it does not have;
// cobra would print the help and exit 0.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		refuseUnknownSubcommands(c)
		if c.Runnable() || !c.HasSubCommands() {
			continue
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return usageError{fmt.Errorf("%s: unknown subcommand %q (want one of %s)", c.CommandPath(), args[0], strings.Join(names, ", "))}
		}
	}
}

func isFlagError(err error) bool {
	return strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), " arg(s), received ")
}

// loadConfig builds the effective configuration from defaults, the config
// file, the environment and the flags the user set on cmd.
func (a *app) loadConfig(cmd *cobra.Command) (node.Config, error) {
	home, _ := os.UserHomeDir()
	in := node.Input{
		DataFlag: a.data, ConfigFlag: a.config, Env: os.LookupEnv, Home: home, ServiceDir: node.ServiceDataDir,
		ServiceConfig: node.ServiceConfigFile,
		Flags:         keyFlagValues(cmd.Flags()),
	}
	cfg, err := node.LoadConfig(in)
	if err != nil {
		return cfg, usageError{err}
	}
	if cmd.Name() != "node" {
		node.RunningAPI(&cfg)
	}
	return cfg, nil
}

// logger logs to stderr at the configured level. Commands other than node
// are quieter by default (warn) so that their output stays readable.
// Under systemd ($JOURNAL_STREAM names stderr: it goes to the journal) lines
// carry their syslog priority and no time (journalHandler).
func (a *app) logger(cfg node.Config) *slog.Logger {
	level := cfg.LogLevel
	if a.quiet && cfg.Sources["log_level"] == "default" {
		level = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: level}
	if a.journal {
		return slog.New(newJournalHandler(a.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, opts))
}

// orEmpty makes a nil list print as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns: a header row, then rows.
func (a *app) table(header []string, rows [][]string) {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

// defaultDataDir reports whether the data dir is a default one
// (~/.gpumesh, or the service's), not one the user named: a command
// that would open its store (which a running node holds) leaves it be.
func defaultDataDir(cfg node.Config) bool {
	return strings.HasPrefix(cfg.Sources["data"], "default")
}
