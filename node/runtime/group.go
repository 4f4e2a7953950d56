package runtime

import (
	"errors"
	"fmt"
	"syscall"
)

// KillGroup kills a leftover process group from a previous run of the
// node (the executor records pids durably and calls this at start-up). A
// group that is gone is not an error.
func KillGroup(pgid int) error {
	if pgid <= 1 {
		return fmt.Errorf("kill group %d: not a job's process group", pgid)
	}
	if pgid == syscall.Getpgrp() {
		return fmt.Errorf("kill group %d: that is the node's own group", pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill group %d: %w", pgid, err)
	}
	return nil
}
