package runtime

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Names the node gives what it makes for job networks. Only what carries
// them is ever removed as a leftover.
const (
	linkPrefix = "gmj"          // host end of a job's veth pair: gmj + 8 hex digits
	jobLink    = "eth0"         // the job's end, inside its namespace
	nftFamily  = "inet"         // of the node's one nftables table,
	nftTable   = "gpumesh_jobs" // "inet gpumesh_jobs"
)

// netCmdTime bounds one run of ip or nft.
const netCmdTime = 30 * time.Second

// privateNets are what NetConfig.AllowLAN opens.
const (
	privateNets4 = "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10"
	privateNets6 = "fc00::/7"
)

// netns enters network namespaces from a locked OS thread and comes back
// to the node's own (home, opened at New).
type netns struct{ home *os.File }

func openHomeNetns() (*netns, error) {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open the node's network namespace: %w", err)
	}
	return &netns{home: f}, nil
}

// do runs fn on an OS thread that is in the network namespace of target
// meanwhile; what fn creates there (sockets, processes) stays there. If
// the thread cannot return home it is not unlocked, so it ends with its
// goroutine instead of running other goroutines in the wrong namespace.
func (n *netns) do(target int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("enter the job's network namespace: %w", err)
			return
		}
		err := fn()
		if berr := unix.Setns(int(n.home.Fd()), unix.CLONE_NEWNET); berr != nil {
			errc <- errors.Join(err, fmt.Errorf("return to the node's network namespace: %w", berr))
			return // still locked: the thread exits with this goroutine
		}
		goruntime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// probe checks that this node can make a network namespace: it makes one
// on a locked thread and comes back home.
func (n *netns) probe() error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("cannot make a network namespace: %w", err)
			return
		}
		if err := unix.Setns(int(n.home.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("return to the node's network namespace: %w", err)
			return // still locked: the thread exits with this goroutine
		}
		goruntime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}

// openJobNet prepares job networks from c: the node's own namespace to
// come back to and, on a root node, the pool and rules (removing
// leftovers); resolv is the jobs' resolv.conf ("": the host's).
func openJobNet(c NetConfig, root bool, log *slog.Logger) (ns *netns, jnet *jobNetwork, resolv string, err error) {
	c = c.withDefaults()
	if err := c.check(); err != nil {
		return nil, nil, "", err
	}
	if ns, err = openHomeNetns(); err != nil {
		return nil, nil, "", err
	}
	if root {
		if jnet, err = newJobNetwork(c, ns, log); err != nil {
			ns.home.Close()
			return nil, nil, "", err
		}
		log.Info("jobs get a network namespace of their own, with a veth link and NAT", "pool", c.Pool, "allow_lan", c.AllowLAN)
	}
	return ns, jnet, resolvConf(c, log), nil
}

// newNamespace creates a network namespace with loopback up, on a locked
// thread that then comes home, and returns the file that holds it: the
// namespace lives as long as the file is open or a process is in it.
func (n *netns) newNamespace() (*os.File, error) {
	type made struct {
		f   *os.File
		err error
	}
	c := make(chan made, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			c <- made{err: fmt.Errorf("make a network namespace: %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			if err = loopbackUp(); err != nil {
				f.Close()
				f = nil
			}
		}
		if berr := unix.Setns(int(n.home.Fd()), unix.CLONE_NEWNET); berr != nil {
			if f != nil {
				f.Close()
			}
			c <- made{err: errors.Join(err, fmt.Errorf("return to the node's network namespace: %w", berr))}
			return // still locked: the thread exits with this goroutine
		}
		goruntime.UnlockOSThread()
		c <- made{f, err}
	}()
	m := <-c
	return m.f, m.err
}

// jobNetwork is what the jobs of the process and container runtimes
// share in the node's namespace: the address pool, the veth pairs and
// the nftables table. Several runtimes may share one namespace (several
// nodes on one machine, or in one test process): every change to links
// and the table happens under a machine-wide lock (lockPath), a job's
// addresses are chosen among those no link of the namespace holds, and
// the table goes only when no job link is left.
type jobNetwork struct {
	log *slog.Logger
	cfg NetConfig
	ns  *netns
}

// link is one job's veth pair and addresses.
type link struct {
	name      string // host end
	host, job netip.Addr
}

// lockPath is the machine-wide lock of job links and the table.
var lockPath = filepath.Join(cmp.Or(os.Getenv("XDG_RUNTIME_DIR"), "/run"), "gpumesh-jobnet.lock")

// locked runs fn holding the machine-wide lock (flock on lockPath).
func locked(fn func() error) error {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("job network: lock: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("job network: lock: %w", err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}

// newJobNetwork checks the tools and that namespaces can be made, and
// removes a table left by a node that died when no job link is left.
// Links are never leftovers: a job's veth pair goes with its namespace,
// which goes with the job, which dies with its node.
func newJobNetwork(cfg NetConfig, ns *netns, log *slog.Logger) (*jobNetwork, error) {
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			pkg := map[string]string{"ip": "iproute2", "nft": "nftables"}[tool]
			return nil, fmt.Errorf("job network: %s not found: install %s", tool, pkg)
		}
	}
	if err := ns.probe(); err != nil {
		return nil, fmt.Errorf("job network: %w", err)
	}
	n := &jobNetwork{log: log, cfg: cfg, ns: ns}
	if err := locked(n.dropTableIfUnused); err != nil {
		log.Warn("job network: leftover table", "err", err)
	}
	return n, nil
}

// dropTableIfUnused removes the table when no job link is left in the
// namespace. Called under the lock.
func (n *jobNetwork) dropTableIfUnused() error {
	ctx, cancel := context.WithTimeout(context.Background(), netCmdTime)
	defer cancel()
	links, err := hostLinks(ctx)
	if err != nil || len(links) > 0 || !tableExists(ctx) {
		return err
	}
	return runNft(ctx, fmt.Sprintf("delete table %s %s\n", nftFamily, nftTable))
}

// hostLinks lists the links of the node's namespace named gmj*.
func hostLinks(context.Context) ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var names []string
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, linkPrefix) {
			names = append(names, i.Name)
		}
	}
	return names, nil
}

// hostAddrs lists the IPv4 addresses of the node's namespace.
func hostAddrs(context.Context) (map[netip.Addr]bool, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	addrs := map[netip.Addr]bool{}
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			addrs[p.Addr()] = true
		}
	}
	return addrs, nil
}

func tableExists(ctx context.Context) bool {
	return exec.CommandContext(ctx, "nft", "list", "table", nftFamily, nftTable).Run() == nil
}

// attach gives the job whose network namespace is target (what ip's
// "netns" takes: a process ID in it, or a path to it) and is held by nsFD
// a veth pair: eth0 inside with the job's address and a default
// route via the host end, which gets the host address. The first /30 of
// the pool that no address of the namespace lies in is taken, under the
// lock, and the table is installed first when it is missing. On failure
// it undoes what it did.
func (n *jobNetwork) attach(ctx context.Context, target string, nsFD int) (*link, error) {
	ctx, cancel := context.WithTimeout(ctx, netCmdTime)
	defer cancel()
	var l *link
	err := locked(func() error {
		if !tableExists(ctx) {
			if err := n.setUp(ctx); err != nil {
				return err
			}
		}
		var err error
		if l, err = n.free(ctx); err != nil {
			return err
		}
		if err := runIP(ctx, "link", "add", l.name, "type", "veth", "peer", "name", jobLink, "netns", target); err != nil {
			l = nil
			return err
		}
		noIPv6(l.name)
		return runIPBatch(ctx, fmt.Sprintf("addr add %s/30 dev %s\nlink set %s up\n", l.host, l.name, l.name))
	})
	if err == nil {
		// Inside: no IPv6 on eth0 (no route out that the rules do not
		// see), the job's address, the default route.
		err = n.ns.do(nsFD, func() error {
			noIPv6(jobLink)
			return runIPBatch(ctx, fmt.Sprintf("addr add %s/30 dev %s\nlink set %s up\nroute add default via %s\n", l.job, jobLink, jobLink, l.host))
		})
	}
	if err != nil {
		if l != nil {
			n.detach(l)
		} else if derr := locked(n.dropTableIfUnused); derr != nil {
			// The table set up for this link (the target's process
			// ended before its link was made, say) goes with it.
			n.log.Warn("job network: drop the unused table", "err", derr)
		}
		return nil, err
	}
	return l, nil
}

// free picks a link name and the first /30 of the pool whose addresses
// no interface of the namespace holds. Called under the lock.
func (n *jobNetwork) free(ctx context.Context) (*link, error) {
	used, err := hostAddrs(ctx)
	if err != nil {
		return nil, err
	}
	size := uint32(1) << (32 - n.cfg.Pool.Bits() - 2)
	base := binary.BigEndian.Uint32(n.cfg.Pool.Addr().AsSlice())
	for slot := range size {
		host, job := addr4(base+slot*4+1), addr4(base+slot*4+2)
		if used[host] || used[job] {
			continue
		}
		var rnd [4]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, fmt.Errorf("job network: link name: %w", err)
		}
		return &link{name: fmt.Sprintf("%s%x", linkPrefix, rnd), host: host, job: job}, nil
	}
	return nil, fmt.Errorf("job network: pool %s exhausted (%d jobs)", n.cfg.Pool, size)
}

// noIPv6 disables IPv6 on dev of the calling thread's namespace, where
// the kernel has IPv6.
func noIPv6(dev string) {
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0)
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// detach removes l's link (its addresses go with it) and, when it was the
// namespace's last job link, the table.
func (n *jobNetwork) detach(l *link) {
	err := locked(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), netCmdTime)
		defer cancel()
		if err := runIP(ctx, "link", "del", l.name); err != nil && linkExists(l.name) {
			return fmt.Errorf("remove link %s: %w", l.name, err)
		}
		return n.dropTableIfUnused()
	})
	if err != nil {
		n.log.Warn("job network: detach", "link", l.name, "err", err)
	}
}

// ipForward is the sysctl the job network needs at 1.
const ipForward = "/proc/sys/net/ipv4/ip_forward"

// enableForwarding sets the sysctl at path to 1 unless it is already:
// the package sets it at boot (sysctl.d), and a unit with
// ProtectKernelTunables= may read /proc/sys but not write it.
func enableForwarding(path string) error {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	return nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// setUp enables forwarding and installs the table. Called under the
// lock.
func (n *jobNetwork) setUp(ctx context.Context) error {
	if err := enableForwarding(ipForward); err != nil {
		return fmt.Errorf("job network: %w", err)
	}
	if err := runNft(ctx, nftRules(n.cfg)); err != nil {
		return fmt.Errorf("job network: %w", err)
	}
	n.log.Info("job network: nft table installed", "table", nftFamily+" "+nftTable, "pool", n.cfg.Pool, "allow_lan", n.cfg.AllowLAN)
	return nil
}

// nftRules is the table that confines jobs (see the package comment). It
// replaces any table of the same name in one transaction.
func nftRules(c NetConfig) string {
	var lan string
	if !c.AllowLAN {
		lan = fmt.Sprintf(`		iifname "%[1]s*" ip daddr { %[2]s } drop
		iifname "%[1]s*" ip6 daddr { %[3]s } drop
`, linkPrefix, privateNets4, privateNets6)
	}
	return fmt.Sprintf(`table %[1]s %[2]s
delete table %[1]s %[2]s
table %[1]s %[2]s {
	chain input {
		type filter hook input priority filter - 10; policy accept;
		iifname "%[3]s*" ct state established,related accept
		iifname "%[3]s*" drop
	}
	chain forward {
		type filter hook forward priority filter - 10; policy accept;
		iifname "%[3]s*" oifname "%[3]s*" drop
		iifname "%[3]s*" ip daddr { 127.0.0.0/8, 169.254.0.0/16 } drop
		iifname "%[3]s*" ip6 daddr { ::1, fe80::/10 } drop
%[4]s	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[5]s oifname != "%[3]s*" masquerade
	}
}
`, nftFamily, nftTable, linkPrefix, lan, c.Pool)
}

func runIP(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func runIPBatch(ctx context.Context, batch string) error {
	cmd := exec.CommandContext(ctx, "ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -batch %q: %w: %s", batch, err, bytes.TrimSpace(out))
	}
	return nil
}

func runNft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// resolvConf is the /etc/resolv.conf jobs get: one naming dns, or "" to
// keep the host's (with a warning when jobs cannot reach its resolvers).
func resolvConf(c NetConfig, log *slog.Logger) string {
	if len(c.DNS) > 0 {
		var b strings.Builder
		b.WriteString("# written by gpumesh for this job\n")
		for _, a := range c.DNS {
			fmt.Fprintf(&b, "nameserver %s\n", a)
		}
		return b.String()
	}
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		a = a.Unmap()
		if a.IsLoopback() || a.IsLinkLocalUnicast() || (a.IsPrivate() || inPrefix(a, "100.64.0.0/10")) && !c.AllowLAN {
			log.Warn("job network: jobs cannot reach the host's resolver, so their names will not resolve; set one they can (NetConfig.DNS, the node's job_dns)", "resolver", a)
			return ""
		}
	}
	return ""
}

func inPrefix(a netip.Addr, p string) bool { return netip.MustParsePrefix(p).Contains(a) }

// dialIn connects to dst inside the network namespace held by nsFD: the
// socket is made there, on a thread that has entered it, and stays
// there.
func (n *netns) dialIn(ctx context.Context, nsFD int, dst netip.AddrPort) (net.Conn, error) {
	var conn net.Conn
	err := n.do(nsFD, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", dst.String())
		conn = c
		return err
	})
	if err != nil && conn != nil {
		conn.Close()
		conn = nil
	}
	return conn, err
}

// loopbackUp brings lo up in the calling process's network namespace
// (the shim, in the job's new one).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// mountResolvConf puts content over /etc/resolv.conf (see mountEtcFile).
func mountResolvConf(content string, keep []string) error {
	return mountEtcFile("/etc/resolv.conf", content, keep)
}

// mountEtcFile puts content over target (its target, when a link),
// read-only, from a file on a small tmpfs mounted for the moment on a
// staging dir.
func mountEtcFile(target, content string, keep []string) error {
	name := filepath.Base(target)
	if _, err := os.Stat(target); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	stage := stagingDir(nil, keep)
	if stage == "" {
		return fmt.Errorf("%s: no directory to stage it on", name)
	}
	if err := unix.Mount("gpumesh-stage", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=8"); err != nil {
		return fmt.Errorf("%s: stage on %s: %w", name, stage, err)
	}
	defer unix.Unmount(stage, unix.MNT_DETACH)
	src := stage + "/" + name
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("%s: bind: %w", name, err)
	}
	if err := remount(target, true, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
		return fmt.Errorf("%s: read-only: %w", name, err)
	}
	return nil
}

// attachNet finishes the network of p's shim (which waits for its
// config, so nothing of the job runs yet): on a root node the shim
// started in a ready network (launch), which p holds, and with cluster
// it gets its cluster network too; elsewhere p holds the namespace the
// shim made (DialPort fails there without root).
func (r *processRuntime) attachNet(ctx context.Context, p *process, cluster *ClusterNet) error {
	if r.jnet == nil {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.pid))
		if err != nil {
			p.log.Debug("job network namespace not held: DialPort will fail", "err", err)
			return nil
		}
		p.nsFD, p.ns = f, r.ns
		return nil
	}
	if p.nsFD == nil {
		return errors.New("the job's shim started without its network")
	}
	if cluster != nil {
		cl, err := r.ns.setUpCluster(ctx, int(p.nsFD.Fd()), cluster, p.log)
		if err != nil {
			return err
		}
		p.cluster, p.clusterAddr = cl, cluster.Addr
	}
	return nil
}

// releaseNet removes p's link, releases its lease and lets its network
// namespace go. Called once, by wait, after the shim has been reaped.
func (p *process) releaseNet() {
	if p.cluster != nil {
		p.cluster.close()
	}
	if p.link != nil {
		p.jnet.detach(p.link)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nsFD != nil {
		p.nsFD.Close()
		p.nsFD = nil
	}
}

func (p *process) linkName() string {
	if p.link == nil {
		return ""
	}
	return p.link.name
}

// DialPort connects to 127.0.0.1:port inside the job's network namespace
// (see PortDialer). It fails for a job without a namespace of its own, or
// once the job has ended.
func (p *process) DialPort(ctx context.Context, port uint16) (net.Conn, error) {
	conn, err := p.dialInside(ctx, loopbackPort(port))
	if err != nil {
		return nil, fmt.Errorf("job %d: dial port %d: %w", p.pid, port, err)
	}
	return conn, nil
}

// loopbackPort is 127.0.0.1:port.
func loopbackPort(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)
}

// dialInside connects to dst from inside the job's network namespace.
func (p *process) dialInside(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	p.mu.Lock()
	if p.exited || p.nsFD == nil {
		exited := p.exited
		p.mu.Unlock()
		if exited {
			return nil, ErrExited
		}
		return nil, fmt.Errorf("%w: the job has no network namespace that the node holds", ErrNotIsolated)
	}
	// A copy of the descriptor, so that the job's end (which closes
	// nsFD) cannot pull it away during the dial.
	fd, err := unix.FcntlInt(p.nsFD.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return p.ns.dialOwned(ctx, fd, dst)
}

// dialOwned is dialIn through fd, a copy of a job's namespace descriptor
// that it closes.
func (n *netns) dialOwned(ctx context.Context, fd int, dst netip.AddrPort) (net.Conn, error) {
	defer unix.Close(fd)
	conn, err := n.dialIn(ctx, fd, dst)
	if errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("%w (entering a job's network namespace needs a node running as root)", err)
	}
	return conn, err
}
