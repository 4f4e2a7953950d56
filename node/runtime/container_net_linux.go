//go:build linux

package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// containerNet gives containers the job network the process runtime's
// jobs get (see "The job's network" in the package comment): a
// namespace of their own, a veth link with NAT, and the same nftables
// rules. Containers never get the engine's own network.
//
//   - podman joins a namespace the node made, linked and filtered before
//     the container starts (--network ns:PATH), so the job's first packet
//     already goes through the rules;
//   - docker cannot join a namespace by path, so its container starts
//     with --network none (loopback only) and its namespace gets the link
//     as soon as the container's process exists: a job sees eth0 appear
//     within moments of its start, and can reach nothing before.
type containerNet struct {
	ns   *netns
	jnet *jobNetwork
	dns  []netip.Addr
}

// newContainerNet prepares container job networks on a root node.
func newContainerNet(c NetConfig, log *slog.Logger) (*containerNet, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: job networks need a node running as root", ErrNotIsolated)
	}
	// The resolv.conf is the process runtime's; containers take
	// NetConfig.DNS as --dns (openJobNet still warns when jobs cannot
	// reach the host's resolvers).
	ns, jnet, _, err := openJobNet(c, true, log)
	if err != nil {
		return nil, err
	}
	return &containerNet{ns: ns, jnet: jnet, dns: c.DNS}, nil
}

// args are the engine's network flags for a container: podman's joins
// jn's namespace (made by prepare), docker's has none until adopt.
func (cn *containerNet) args(engine string, jn *jobNet) []string {
	a := []string{"--network", "none"}
	if engine == "podman" {
		a = []string{"--network", "ns:" + jn.path}
	}
	for _, d := range cn.dns {
		a = append(a, "--dns", d.String())
	}
	return a
}

// jobNet is one container's network: its namespace, held open by fd,
// and its link.
type jobNet struct {
	cn   *containerNet
	fd   *os.File
	path string // where the engine opens the namespace (podman)
	link *link
}

// prepare makes a namespace for a container that will join it by path,
// and links it.
func (cn *containerNet) prepare(ctx context.Context) (*jobNet, error) {
	rn, err := cn.jnet.prepare(ctx)
	if err != nil {
		return nil, err
	}
	return &jobNet{cn: cn, fd: rn.fd, path: rn.path(), link: rn.link}, nil
}

// adopt links the namespace of a container's process, pid.
func (cn *containerNet) adopt(ctx context.Context, pid int) (*jobNet, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if errors.Is(err, fs.ErrNotExist) {
		// Gone, or a zombie whose namespaces went with its exit.
		return nil, fmt.Errorf("job network: the container's namespace: %w: %w", errProcessGone, err)
	}
	if err != nil {
		return nil, fmt.Errorf("job network: the container's namespace: %w", err)
	}
	l, err := cn.jnet.attach(ctx, strconv.Itoa(pid), int(f.Fd()))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &jobNet{cn: cn, fd: f, link: l}, nil
}

// release removes the link and lets the namespace go. Called once the
// container has ended.
func (jn *jobNet) release() {
	if jn == nil {
		return
	}
	jn.cn.jnet.detach(jn.link)
	jn.fd.Close()
}

// errProcessGone: the container's process ended before its namespace
// could be opened.
var errProcessGone = errors.New("the container's process has ended")

// errEndedEarly: the container ended before the engine reported its
// process.
var errEndedEarly = errors.New("container ended before its network was set up")

// containerPid waits until the engine reports the process of the
// container whose ID the client writes to cidFile (so not another
// container of the same name, left by a node that died): at most a
// minute, and not past the client's exit (errEndedEarly).
func (c *containerRuntime) containerPid(ctx context.Context, name, cidFile string, done <-chan struct{}) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if id, err := os.ReadFile(cidFile); err == nil && len(bytes.TrimSpace(id)) > 0 {
			out, err := exec.CommandContext(ctx, c.bin, "inspect", "--format", "{{.State.Pid}}", string(bytes.TrimSpace(id))).Output()
			if err == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(out))); perr == nil && pid > 0 {
					return pid, nil
				}
			}
		}
		select {
		case <-done:
			return 0, fmt.Errorf("container %s: %w", name, errEndedEarly)
		case <-ctx.Done():
			return 0, fmt.Errorf("container %s: no process after %s: %w", name, time.Minute, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// adoptNet links the network namespace of docker's container, once it
// has a process. A container that ended first (a short job) needs none:
// its result stands.
func (p *containerProc) adoptNet(ctx context.Context) error {
	pid, err := p.rt.containerPid(ctx, p.name, p.cidFile, p.done)
	if errors.Is(err, errEndedEarly) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job network: %w", err)
	}
	jn, err := p.rt.net.adopt(ctx, pid)
	if err != nil {
		// The container ended before its link was made (its process is
		// gone, or a zombie whose namespaces went with its exit): its
		// result stands.
		if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, errProcessGone) || errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	p.mu.Lock()
	ended := p.ended
	if !ended {
		p.net = jn
	}
	p.mu.Unlock()
	if ended {
		jn.release()
	}
	return nil
}

// DialPort connects to 127.0.0.1:port inside the container's network
// namespace (see PortDialer).
func (p *containerProc) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	p.mu.Lock()
	if p.ended || p.net == nil {
		ended := p.ended
		p.mu.Unlock()
		if ended {
			return nil, fmt.Errorf("container %s: dial port %d: %w", p.name, port, ErrExited)
		}
		return nil, fmt.Errorf("container %s: dial port %d: %w: the container has the engine's network", p.name, port, ErrNotIsolated)
	}
	fd, err := unix.FcntlInt(p.net.fd.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	p.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("container %s: dial port %d: %w", p.name, port, err)
	}
	conn, err := p.net.cn.ns.dialOwned(ctx, fd, loopbackPort(port))
	if err != nil {
		return nil, fmt.Errorf("container %s: dial port %d: %w", p.name, port, err)
	}
	return conn, nil
}
