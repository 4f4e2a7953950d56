package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bytes the node writes on the control pipe to the init of a job's PID
// namespace. A pipe, not signals: it keeps their order (a Pause followed
// by a Resume never arrives the other way round), and the init acts on
// every process of the namespace, setsid escapees included.
const (
	ctlPause  = 'P' // SIGSTOP to every process of the job
	ctlResume = 'R' // SIGCONT to every process of the job
	ctlStop   = 'T' // SIGTERM, then SIGCONT (a paused job must run to see it)
)

// initReport is what the init writes on the result pipe once the job's
// main process has been reaped: the init cannot die of the job's signal
// (signals an init sends itself are ignored), so the node reads it here.
type initReport struct {
	Exited   bool `json:"exited"`
	Code     int  `json:"code"`
	Signaled bool `json:"signaled"`
	Signal   int  `json:"signal"`
}

// runInit is the shim as the init (pid 1) of the job's PID namespace: it
// mounts that namespace's /proc, starts the exec stage (which becomes the
// job), forwards the node's pause, resume and stop to every process of
// the namespace, reaps orphans, and exits when the job's main process
// has: the kernel then kills whatever is left in the namespace. It
// returns the exit code.
func runInit(cfg *shimConfig, rep reporter) int {
	unix.CloseOnExec(resultFD)
	unix.CloseOnExec(controlFD)
	result := os.NewFile(resultFD, "gpumesh-shim-result")
	control := os.NewFile(controlFD, "gpumesh-shim-control")

	// The job must see its own processes only: a /proc of this namespace
	// over the host's, read-only like every other mount.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		return rep.fatal(stageProc, fmt.Errorf("mount /proc of the job's PID namespace: %w", err))
	}
	pid, err := startExecStage(cfg)
	if err != nil {
		return rep.fatal(stageExec, err)
	}
	// The exec stage has the status pipe now: EOF reaches the node when
	// it has exec'd the job (or failed).
	rep.status.Close()
	go forwardControl(control)

	ws, err := reap(pid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpumesh: job sandbox: %v\n", err)
		return exitSetup
	}
	r := initReport{Exited: ws.Exited(), Code: ws.ExitStatus(), Signaled: ws.Signaled()}
	if r.Signaled {
		r.Signal = int(ws.Signal())
	}
	b, _ := json.Marshal(r)
	_, _ = result.Write(b)
	result.Close()
	if r.Signaled {
		return 128 + r.Signal
	}
	return r.Code
}

// startExecStage re-executes this binary as the exec stage, with cfg on
// its config pipe and the status pipe, and returns its pid.
func startExecStage(cfg *shimConfig) (int, error) {
	next := *cfg
	next.NodePID = os.Getpid() // 1: the exec stage dies if this init has
	b, err := json.Marshal(next)
	if err != nil {
		return 0, fmt.Errorf("encode config: %w", err)
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("config pipe: %w", err)
	}
	defer cfgR.Close()
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cfg.TTY {
		// The job leads a session whose controlling terminal is its
		// stdin, so the terminal's signals (Ctrl-C) reach the job's
		// foreground group, never this init.
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"gpumesh-job-exec"}, &syscall.ProcAttr{
		Env:   []string{shimEnv + "=" + shimExecValue},
		Files: []uintptr{0, 1, 2, cfgR.Fd(), statusFD},
		Sys:   sys,
	})
	if err != nil {
		cfgW.Close()
		return 0, fmt.Errorf("start exec stage: %w", err)
	}
	go func() {
		_, _ = cfgW.Write(b)
		cfgW.Close()
	}()
	return pid, nil
}

// forwardControl acts on the node's control bytes until the pipe closes.
// kill(-1) from an init reaches every process of its namespace but
// itself.
func forwardControl(control *os.File) {
	buf := make([]byte, 64)
	for {
		n, err := control.Read(buf)
		for _, c := range buf[:n] {
			switch c {
			case ctlPause:
				stopAll()
			case ctlResume:
				_ = unix.Kill(-1, unix.SIGCONT)
			case ctlStop:
				_ = unix.Kill(-1, unix.SIGTERM)
				_ = unix.Kill(-1, unix.SIGCONT)
			}
		}
		if err != nil {
			return
		}
	}
}

// pauseRounds and pauseGap: kill(-1) misses a child forked while it runs,
// and that child could then run on, or exit and have the kernel continue
// (and hang up) its stopped, orphaned process group. Each later round
// stops what the one before missed; a child outlives a round only by
// being forked during it, by a parent the round had not yet stopped.
const (
	pauseRounds = 3
	pauseGap    = 10 * time.Millisecond
)

// stopAll stops every process of the job's namespace but the init.
func stopAll() {
	for i := range pauseRounds {
		if i > 0 {
			time.Sleep(pauseGap)
		}
		_ = unix.Kill(-1, unix.SIGSTOP)
	}
}

// reap waits for every child the init inherits, orphans included, and
// returns the wait status of pid, the job's main process.
func reap(pid int) (unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("wait for the job: %w", err)
		case got == pid:
			return ws, nil
		}
	}
}
