//go:build !linux

package runtime

import (
	"context"
	"fmt"
	"log/slog"
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

// Job networks need Linux network namespaces.
type (
	containerNet struct{}
	jobNet       struct{}
)

func newContainerNet(NetConfig, *slog.Logger) (*containerNet, error) {
	return nil, fmt.Errorf("%w: job networks need Linux", ErrNotIsolated)
}

func (*containerNet) args(string, *jobNet) []string { return nil }

func (*containerNet) prepare(context.Context) (*jobNet, error) {
	return nil, fmt.Errorf("%w: job networks need Linux", ErrNotIsolated)
}

func (*jobNet) release() {}

func (p *containerProc) adoptNet(context.Context) error {
	return fmt.Errorf("%w: job networks need Linux", ErrNotIsolated)
}
