//go:build !linux

package netlab

import (
	"errors"
	"os"
)

var errNotLinux = errors.New("netlab: network namespaces need Linux")

// Check reports that labs need Linux.
func Check() error { return errNotLinux }

func inNS(string, func() error) error { return errNotLinux }

func openTUN(string) (*os.File, error) { return nil, errNotLinux }
