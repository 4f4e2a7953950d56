// Command gpumesh is the one binary of the gpumesh GPU marketplace: run it
// as a supplier daemon (`gpumesh node`) or as a light client (`gpumesh
// search`). This package only parses flags and prints results; the work is
// done in package node, or, for the commands that run without a node
// (search, rent, challenge), on its light client, node/light (joined in
// light.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	jobruntime "github.com/gpumesh/gpumesh/node/runtime"
)

func main() {
	// A job's sandbox shim is this binary re-executed: it sets the
	// sandbox up and execs the job, never returning.
	jobruntime.MaybeShim()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a mistake in what the user typed: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes the CLI and returns the process exit status: 0 on success,
// 2 for usage errors (bad flags, a malformed filter), 78 when `gpumesh
// node` cannot load its configuration, 1 otherwise.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var se silentError
	if !errors.As(err, &se) {
		fmt.Fprintln(stderr, "gpumesh:", err)
	}
	var ce configError
	if errors.As(err, &ce) {
		return exitConfig
	}
	var ue usageError
	if errors.As(err, &ue) || isFlagError(err) {
		return 2
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// exitConfig is EX_CONFIG (sysexits.h): `gpumesh node` found its
// configuration wrong. The systemd unit does not restart the node on it
// (RestartPreventExitStatus=78): a restart would fail the same way.
const exitConfig = 78

// configError is a configuration the node cannot start with: exit
// status exitConfig.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// exitError ends the command with a status of its own, silently (e.g. a
// followed job's exit code).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return silentError{e.err} }
