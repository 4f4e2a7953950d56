package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MeasureDisk returns the free space of the file system of dir, or of its
// nearest existing parent when dir does not exist yet.
func MeasureDisk(dir string) DiskSpace {
	path := filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(path, &st)
		if err == nil {
			return DiskSpace{Path: path, Free: st.Bavail * uint64(st.Bsize)}
		}
		parent := filepath.Dir(path)
		if !errors.Is(err, fs.ErrNotExist) || parent == path {
			return DiskSpace{Path: path, Err: fmt.Errorf("statfs %s: %w", path, err)}
		}
		path = parent
	}
}

// KernelClockSynced asks the kernel (adjtimex, read-only) whether an NTP
// daemon keeps the clock synchronised; nil when it cannot tell.
func KernelClockSynced() *bool {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return nil
	}
	synced := state != unix.TIME_ERROR && tx.Status&unix.STA_UNSYNC == 0
	return &synced
}

// HasUVM reports whether /dev/nvidia-uvm, which CUDA jobs need, exists.
func HasUVM() bool {
	_, err := os.Stat("/dev/nvidia-uvm")
	return err == nil
}
