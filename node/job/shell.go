package job

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/shell"
)

// Shell admits a renter's shell stream to the attempt that runs on o's
// lease (shell.Resolver; docs/PROTOCOL.md §40.3), in order: an attempt
// with a standard input runs here on that lease, for from, with that
// attempt number (else no-attempt, whichever failed); it is not ending
// (not-running).
func (e *Executor) Shell(from peer.ID, o shell.Open) (shell.Target, *shell.Refusal) {
	e.mu.Lock()
	r := e.runs[market.ID(o.LeaseID)]
	e.mu.Unlock()
	if r == nil || r.lease.Renter != from || r.attempt != o.Attempt || r.stdio == nil {
		return shell.Target{}, shell.Refuse(shell.RefusedNoAttempt, "no attempt %d of yours with a standard input runs on lease %x here", o.Attempt, o.LeaseID[:8])
	}
	// An attempt that ended before its shell came keeps its output and
	// exit for it (shell.Stdio.Attach refuses once they were dropped).
	t := shell.Target{Stdio: r.stdio}
	if term, ok := r.proc.(runtime.Terminal); ok && r.stdio.TTY() {
		t.Resize = func(s shell.Size) error { return term.Resize(runtime.WinSize{Rows: s.Rows, Cols: s.Cols}) }
	}
	return t, nil
}

// watchShell stops a shell's job when no shell stream attached within
// shell.AttachTimeout of its start (and drops what a job that ended left
// for it), or when the attached one hung up.
func (r *run) watchShell() {
	t := r.e.cfg.Clock.NewTimer(shell.AttachTimeout)
	defer t.Stop()
	select {
	case <-r.stdio.Attached():
	case <-t.C():
		r.stop(StateStopped, "no shell attached to the job")
		r.stdio.Drop()
		return
	case <-r.e.quit:
		return
	}
	select {
	case <-r.stdio.Hangup():
		r.stop(StateStopped, "the renter's shell hung up")
	case <-r.done:
	}
}

// endShell sends a shell's last frame once its process is gone (its
// output drained): the job's exit, or, when the attempt was ended (the
// lease ended, a stop), why.
func (r *run) endShell(end State, msg string, res runtime.Result) {
	if r.stdio == nil {
		return
	}
	if end != "" {
		why := string(end)
		switch {
		case end == StateExpired:
			why = "the lease ended" // whatever else was said of it before (a halt for payment)
		case msg != "":
			why += ": " + msg
		}
		r.stdio.Finish(shell.KindEnded, []byte(why))
		return
	}
	x := shell.Exit{Code: int32(res.ExitCode)}
	if res.Signal != "" {
		x.Signal = signalNumber(res.Signal)
	}
	r.stdio.Finish(shell.KindExit, x.Encode())
}

// signalNumber is the number of the signal named as unix.Signal.String
// names it (runtime.Result.Signal), 0 when unknown.
func signalNumber(name string) uint8 {
	for i := 1; i < 65; i++ {
		if unix.Signal(i).String() == name {
			return uint8(i)
		}
	}
	return 0
}
