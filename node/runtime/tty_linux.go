package runtime

import (
	"fmt"
	"os"

	"github.com/creack/pty"
)

// openTerminal opens a pseudo-terminal of size ws: its master, which the
// node reads and writes, and its slave, the job's stdin, stdout and
// stderr.
func openTerminal(ws WinSize) (master, slave *os.File, err error) {
	master, slave, err = pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	if err := setTermSize(master, ws); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// setTermSize sets the size of the terminal whose master is f.
func setTermSize(f *os.File, ws WinSize) error {
	if err := pty.Setsize(f, &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols}); err != nil {
		return fmt.Errorf("set the terminal's size: %w", err)
	}
	return nil
}
