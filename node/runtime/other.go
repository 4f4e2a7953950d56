//go:build !linux

package runtime

import (
	"fmt"
	"syscall"
)

// The process runtime needs Linux namespaces; elsewhere only docker and
// podman work.
func newProcessRuntime(Options) (Runtime, error) {
	return nil, fmt.Errorf("runtime process: %w: it needs Linux", ErrUnavailable)
}

// MaybeShim returns at once: there are no job shims off Linux.
func MaybeShim() {}

func containerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
