package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Names and bounds of a job's cluster network.
const (
	clusterTable = "gpumesh_cluster" // "ip gpumesh_cluster", in the job's namespace
	// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h), which
	// x/sys lacks: the destination a redirected connection was dialled
	// to, from conntrack.
	soOriginalDst = 80
	// maxClusterConns bounds the Connect calls in flight for one job;
	// a connection beyond it is closed at once.
	maxClusterConns = 1024
)

// clusterRules is the nftables table of a cluster job's namespace: TCP
// to another address of the prefix goes to the node's listener on port;
// anything else to another address of the prefix is refused.
func clusterRules(c *ClusterNet, port int) string {
	return fmt.Sprintf(`table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain output_nat {
		type nat hook output priority -100; policy accept;
		ip daddr %[2]s ip daddr != %[3]s meta l4proto tcp counter redirect to :%[4]d
	}
	chain output_filter {
		type filter hook output priority 0; policy accept;
		ip daddr %[2]s ip daddr != %[3]s meta l4proto != tcp counter reject
	}
}
`, clusterTable, c.Prefix, c.Addr, port)
}

// clusterLink is the node's side of one job's cluster network: the
// listener every redirected connection arrives on, inside the job's
// namespace, and the connections handed to Connect.
type clusterLink struct {
	cfg  *ClusterNet
	ln   net.Listener
	log  *slog.Logger
	sem  chan struct{}
	done chan struct{} // closed by close
	loop sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// setUpCluster gives the namespace held by nsFD the cluster interface
// with c's address, the node's listener and the table, and starts
// accepting. On failure nothing of it is left in the node (the rest goes
// with the namespace).
func (n *netns) setUpCluster(ctx context.Context, nsFD int, c *ClusterNet, log *slog.Logger) (*clusterLink, error) {
	ctx, cancel := context.WithTimeout(ctx, netCmdTime)
	defer cancel()
	var ln net.Listener
	err := n.do(nsFD, func() error {
		if err := addClusterLink(ctx); err != nil {
			return err
		}
		if err := runIPBatch(ctx, fmt.Sprintf("addr add %[2]s/%[3]d dev %[1]s\nlink set %[1]s up\nlink set lo up\n", ClusterIfName, c.Addr, c.Prefix.Bits())); err != nil {
			return err
		}
		noIPv6(ClusterIfName)
		// The listener is on loopback, which the shim brings up only
		// once it has its config: up now.
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		ln = l
		return runNft(ctx, clusterRules(c, l.Addr().(*net.TCPAddr).Port))
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("cluster network: %w", err)
	}
	cl := &clusterLink{cfg: c, ln: ln, log: log, sem: make(chan struct{}, maxClusterConns), done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	cl.loop.Add(1)
	go cl.accept()
	return cl, nil
}

// clusterLinkKinds are the kinds of link gm0 may be, best first: each
// carries no traffic (NOARP, and every packet sent on it is dropped), so
// the address is only the job's own. Some kernels have no dummy driver
// but ifb.
var clusterLinkKinds = []string{"dummy", "ifb"}

// addClusterLink adds gm0 to the calling thread's namespace, of the
// first kind of clusterLinkKinds the kernel has.
func addClusterLink(ctx context.Context) error {
	var errs []error
	for _, kind := range clusterLinkKinds {
		err := runIP(ctx, "link", "add", ClusterIfName, "type", kind)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// accept hands each connection redirected to the listener to Connect
// until close.
func (cl *clusterLink) accept() {
	defer cl.loop.Done()
	var backoff time.Duration
	for {
		c, err := cl.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: wait a little, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			cl.log.Warn("cluster network: accept", "err", err)
			select {
			case <-cl.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		cl.handle(c)
	}
}

// handle passes c to Connect when the job dialled another address of the
// prefix; a connection to the listener itself (the job dialled
// 127.0.0.1:port) or elsewhere is closed at once, and so is one beyond
// maxClusterConns.
func (cl *clusterLink) handle(c net.Conn) {
	dst, err := originalDst(c)
	if err != nil || !cl.forMember(dst) {
		cl.log.Debug("cluster network: connection refused", "dst", dst, "err", err)
		c.Close()
		return
	}
	select {
	case cl.sem <- struct{}{}:
	default:
		cl.log.Warn("cluster network: too many connections", "max", maxClusterConns, "dst", dst)
		c.Close()
		return
	}
	if !cl.track(c) {
		<-cl.sem
		c.Close()
		return
	}
	go func() {
		defer func() { <-cl.sem }()
		defer cl.untrack(c)
		cl.cfg.Connect(c, dst)
	}()
}

// forMember reports whether dst is a port of another address of the
// cluster's prefix.
func (cl *clusterLink) forMember(dst netip.AddrPort) bool {
	a := dst.Addr().Unmap()
	return dst.Port() != 0 && a.Is4() && cl.cfg.Prefix.Contains(a) && a != cl.cfg.Addr
}

func (cl *clusterLink) track(c net.Conn) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed {
		return false
	}
	cl.conns[c] = struct{}{}
	return true
}

func (cl *clusterLink) untrack(c net.Conn) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	delete(cl.conns, c)
}

// close stops accepting, waits for the accept loop and closes every
// connection still handed to Connect (which then returns). Safe to call
// twice.
func (cl *clusterLink) close() {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return
	}
	cl.closed = true
	close(cl.done)
	conns := cl.conns
	cl.conns = nil
	cl.mu.Unlock()
	cl.ln.Close()
	cl.loop.Wait()
	for c := range conns {
		c.Close()
	}
}

// originalDst is where the job dialled c to before the redirect
// (SO_ORIGINAL_DST, a struct sockaddr_in).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var sa *unix.IPv6Mreq // 20 bytes: room for the 16 of a sockaddr_in
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		sa, gerr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, soOriginalDst)
	}); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if gerr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", gerr)
	}
	return parseSockaddrIn(sa.Multiaddr[:])
}

// parseSockaddrIn decodes a struct sockaddr_in: family (host order),
// port and address (network order).
func parseSockaddrIn(b []byte) (netip.AddrPort, error) {
	if len(b) < 8 {
		return netip.AddrPort{}, errors.New("original destination: short sockaddr")
	}
	if fam := binary.NativeEndian.Uint16(b[0:2]); fam != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("original destination: address family %d, want AF_INET", fam)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
}

// clusterSupport says why r cannot give jobs a cluster network (nil when
// it can): one needs the job's namespace, entered by the node, so a root
// node with Options.Net.
func (r *processRuntime) clusterSupport() error {
	switch {
	case r.ns == nil:
		return errors.New("runtime process: cluster networks need job networks (Options.Net is not set)")
	case !r.root || r.jnet == nil:
		return errors.New("runtime process: cluster networks need a node running as root (it enters each job's network namespace and sets nftables rules there)")
	}
	return nil
}

// planCluster adds a cluster job's hostname, /etc/hosts and variables to
// its shim configuration.
func planCluster(cfg *shimConfig, c *ClusterNet) {
	if c == nil {
		return
	}
	cfg.Hostname, cfg.Hosts = c.Hostname, hostsFile(c)
	cfg.Env = overrideEnv(cfg.Env, clusterEnv())
}

// DialCluster connects to the job's own cluster address Addr:port inside
// its network namespace (see ClusterDialer). It fails for a job without
// a cluster network, or once the job has ended.
func (p *process) DialCluster(ctx context.Context, port uint16) (net.Conn, error) {
	if p.clusterAddr == (netip.Addr{}) {
		return nil, fmt.Errorf("job %d: dial cluster port %d: the job has no cluster network", p.pid, port)
	}
	conn, err := p.dialInside(ctx, netip.AddrPortFrom(p.clusterAddr, port))
	if err != nil {
		return nil, fmt.Errorf("job %d: dial cluster port %d: %w", p.pid, port, err)
	}
	return conn, nil
}
