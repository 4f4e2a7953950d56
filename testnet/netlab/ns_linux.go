//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Check says what this machine lacks to run a lab: root, `ip`, `nft`,
// /dev/net/tun or network namespaces. Callers skip or fail with its message.
func Check() error {
	var missing []error
	if os.Geteuid() != 0 {
		missing = append(missing, errors.New("not root (namespaces, nftables and TUN devices need root)"))
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			pkg := map[string]string{"ip": "iproute2", "nft": "nftables"}[tool]
			missing = append(missing, fmt.Errorf("no `%s` in PATH (install %s)", tool, pkg))
		}
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		missing = append(missing, fmt.Errorf("network namespaces unsupported: %w", err))
	}
	if f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0); err != nil {
		missing = append(missing, fmt.Errorf("no usable /dev/net/tun: %w", err))
	} else {
		f.Close()
	}
	if len(missing) > 0 {
		return fmt.Errorf("netlab: cannot build a namespace lab here: %w", errors.Join(missing...))
	}
	return nil
}

// inNS runs fn on an OS thread switched into namespace ns, then switches
// the thread back. If switching back fails, the thread stays locked and
// dies with its goroutine, so no goroutine ever runs in the wrong namespace.
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: open own netns: %w", err)
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: open netns %s: %w", ns, err)
			return
		}
		err = unix.Setns(target, unix.CLONE_NEWNET)
		unix.Close(target)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: enter netns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it exits with this goroutine.
			errc <- fmt.Errorf("netlab: leave netns %s: %w", ns, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// openTUN creates the TUN device wan0 inside namespace ns and returns it,
// non-blocking and wrapped so that Close unblocks a Read.
func openTUN(ns string) (*os.File, error) {
	var f *os.File
	err := inNS(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("netlab: open /dev/net/tun in %s: %w", ns, err)
		}
		ifr, err := unix.NewIfreq("wan0")
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("netlab: tun in %s: %w", ns, err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netlab: create wan0 in %s: %w", ns, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netlab: wan0 in %s: set non-blocking: %w", ns, err)
		}
		f = os.NewFile(uintptr(fd), "wan0@"+ns)
		return nil
	})
	return f, err
}
