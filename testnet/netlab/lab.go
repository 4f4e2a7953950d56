package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Lab is a built lab: its namespaces, and the WAN when this process runs it.
type Lab struct {
	spec  Spec
	nodes []Node
	log   *slog.Logger
	wan   *Wan

	closeOnce sync.Once
	closeErr  error
}

// Option configures Up.
type Option func(*options)

type options struct{ wan bool }

// WithoutWAN builds the namespaces but starts no WAN in this process;
// another process starts it with [StartWAN] (the testnet does, so that the
// WAN outlives `testnet up`).
func WithoutWAN() Option { return func(o *options) { o.wan = false } }

// Up builds the lab of spec and, unless WithoutWAN, starts its WAN in this
// process. On any failure it removes what it made. ctx bounds the build
// only; Close ends the lab.
func Up(ctx context.Context, spec Spec, logger *slog.Logger, opts ...Option) (_ *Lab, err error) {
	o := options{wan: true}
	for _, opt := range opts {
		opt(&o)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	spec = spec.WithDefaults()
	nodes, err := spec.Layout()
	if err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	existing, err := namespaces(spec.Prefix)
	if err != nil {
		return nil, err
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("netlab: namespaces with prefix %s exist already (%s); remove them with Cleanup(%q) (`testnet down --netns`)", spec.Prefix, strings.Join(existing, ", "), spec.Prefix)
	}
	l := &Lab{spec: spec, nodes: nodes, log: logger.With("lab", spec.Prefix)}
	var made []string
	defer func() {
		if err != nil {
			l.log.Warn("lab build failed; removing what was made", "err", err)
			_ = removeNamespaces(made)
		}
	}()
	addNS := func(ns string) error {
		if err := ip(ctx, "netns", "add", ns); err != nil {
			return err
		}
		made = append(made, ns)
		return ip(ctx, "-n", ns, "link", "set", "lo", "up")
	}
	for _, n := range nodes {
		if err := addNS(n.NS); err != nil {
			return nil, err
		}
		if n.Router == "" {
			continue
		}
		if err := addNS(n.Router); err != nil {
			return nil, err
		}
		if err := l.buildHome(ctx, n); err != nil {
			return nil, err
		}
	}
	if o.wan {
		if l.wan, err = StartWAN(ctx, spec, l.log); err != nil {
			return nil, err
		}
	}
	l.log.Info("lab up", "hosts", len(nodes), "wan", o.wan)
	return l, nil
}

// buildHome wires n's home network: a veth from its router (lan0) to the
// host (eth0), the host's route to the internet, forwarding and the
// router's nftables ruleset.
func (l *Lab) buildHome(ctx context.Context, n Node) error {
	steps := [][]string{
		{"-n", n.Router, "link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", n.NS},
		{"-n", n.Router, "addr", "add", n.Gateway.String() + "/24", "dev", "lan0"},
		{"-n", n.Router, "link", "set", "lan0", "up"},
		{"-n", n.NS, "addr", "add", n.Private.String() + "/24", "dev", "eth0"},
		{"-n", n.NS, "link", "set", "eth0", "up"},
		{"-n", n.NS, "route", "add", Internet.String(), "via", n.Gateway.String()},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	if err := inNS(n.Router, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
	}); err != nil {
		return fmt.Errorf("netlab: enable forwarding in %s: %w", n.Router, err)
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.Router, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(routerRules(n.Kind))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netlab: nftables in %s: %w: %s", n.Router, err, bytes.TrimSpace(out))
	}
	return nil
}

// routerRules is a home router's nftables ruleset for a NAT of kind k.
func routerRules(k Kind) string {
	masq := "masquerade"
	if k == Symmetric {
		masq = "masquerade fully-random"
	}
	return `table ip netlab {
	chain input {
		type filter hook input priority filter; policy drop;
		iif "lo" accept
		ct state established,related counter accept
		iifname "lan0" counter accept
		counter comment "inbound dropped"
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related counter accept
		iifname "lan0" oifname "wan0" counter accept
		counter comment "forward dropped"
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan0" counter ` + masq + `
	}
}
`
}

// Attach returns the lab of spec that an earlier Up built (perhaps in
// another process), without a WAN of its own. Close removes it.
func Attach(spec Spec, logger *slog.Logger) (*Lab, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	spec = spec.WithDefaults()
	nodes, err := spec.Layout()
	if err != nil {
		return nil, err
	}
	have, err := namespaces(spec.Prefix)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		for _, ns := range []string{n.NS, n.Router} {
			if ns != "" && !contains(have, ns) {
				return nil, fmt.Errorf("netlab: attach: namespace %s is missing; is the lab up?", ns)
			}
		}
	}
	return &Lab{spec: spec, nodes: nodes, log: logger.With("lab", spec.Prefix)}, nil
}

// Spec returns the lab's spec, with defaults filled in.
func (l *Lab) Spec() Spec { return l.spec }

// Nodes returns where each host sits, in the spec's order.
func (l *Lab) Nodes() []Node { return append([]Node(nil), l.nodes...) }

// Node returns host name's place in the lab.
func (l *Lab) Node(name string) (Node, bool) {
	for _, n := range l.nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// WAN returns the WAN this process runs for the lab (nil with WithoutWAN
// or Attach).
func (l *Lab) WAN() *Wan { return l.wan }

func (l *Lab) ns(host string) (string, error) {
	n, ok := l.Node(host)
	if !ok {
		return "", fmt.Errorf("netlab: no host %q in lab %s", host, l.spec.Prefix)
	}
	return n.NS, nil
}

// DialFunc dials like net.Dialer.DialContext (http.Transport.DialContext).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dialer returns a dial function whose sockets are made inside host's
// namespace. Addresses must be IP literals (or localhost, taken as
// 127.0.0.1): no name is resolved.
func (l *Lab) Dialer(host string) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ns, err := l.ns(host)
		if err != nil {
			return nil, err
		}
		h, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("netlab: dial %s in %s: %w", addr, ns, err)
		}
		if h == "localhost" {
			addr = net.JoinHostPort("127.0.0.1", port)
		} else if _, err := netip.ParseAddr(h); err != nil {
			return nil, fmt.Errorf("netlab: dial %s in %s: want an IP address: %w", addr, ns, err)
		}
		var c net.Conn
		err = inNS(ns, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("netlab: dial %s %s in %s: %w", network, addr, ns, err)
		}
		return c, nil
	}
}

// Listen listens (net.Listen) inside host's namespace.
func (l *Lab) Listen(host, network, addr string) (net.Listener, error) {
	ns, err := l.ns(host)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	err = inNS(ns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: listen %s %s in %s: %w", network, addr, ns, err)
	}
	return ln, nil
}

// ListenPacket listens (net.ListenPacket) inside host's namespace.
func (l *Lab) ListenPacket(host, network, addr string) (net.PacketConn, error) {
	ns, err := l.ns(host)
	if err != nil {
		return nil, err
	}
	var pc net.PacketConn
	err = inNS(ns, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: listen %s %s in %s: %w", network, addr, ns, err)
	}
	return pc, nil
}

// Command returns `ip netns exec NS name args...` for host's namespace.
// `ip netns exec` execs the program, so the process's PID is the
// program's. An unknown host gives a command whose Start fails.
func (l *Lab) Command(ctx context.Context, host, name string, args ...string) *exec.Cmd {
	ns, err := l.ns(host)
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	if err != nil {
		cmd.Err = err
	}
	return cmd
}

// Close stops the lab's WAN (if this process runs it), kills every process
// inside the lab's namespaces and deletes them. It is safe to call twice.
func (l *Lab) Close() error {
	l.closeOnce.Do(func() {
		var errs []error
		if l.wan != nil {
			errs = append(errs, l.wan.Close())
		}
		var all []string
		for _, n := range l.nodes {
			all = append(all, n.NS)
			if n.Router != "" {
				all = append(all, n.Router)
			}
		}
		errs = append(errs, removeNamespaces(all))
		l.closeErr = errors.Join(errs...)
		l.log.Info("lab closed", "err", l.closeErr)
	})
	return l.closeErr
}

// StartWAN starts the WAN of a lab that Up built (perhaps in another
// process, WithoutWAN): a TUN wan0 in each public host's and router's
// namespace, with its public address and a route for the internet, and the
// forwarder between them. ctx bounds the start only.
func StartWAN(ctx context.Context, spec Spec, logger *slog.Logger) (_ *Wan, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	spec = spec.WithDefaults()
	nodes, err := spec.Layout()
	if err != nil {
		return nil, err
	}
	var eps []*endpoint
	defer func() {
		if err != nil {
			for _, ep := range eps {
				ep.dev.Close()
			}
		}
	}()
	for _, n := range nodes {
		ns := n.wanNS()
		f, err := openTUN(ns)
		if err != nil {
			return nil, err
		}
		eps = append(eps, &endpoint{addr: n.Public, region: n.Region, ns: ns, dev: f})
		for _, s := range [][]string{
			{"-n", ns, "addr", "add", n.Public.String() + "/32", "dev", "wan0"},
			{"-n", ns, "link", "set", "wan0", "up"},
			{"-n", ns, "route", "add", Internet.String(), "dev", "wan0", "src", n.Public.String()},
		} {
			if err := ip(ctx, s...); err != nil {
				return nil, err
			}
		}
	}
	return newWan(spec, eps, logger), nil
}

// Cleanup removes what a killed run left of the lab with this prefix: it
// kills the processes in every namespace named <prefix>-..., and deletes
// those namespaces. Nothing else is touched.
func Cleanup(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("netlab: cleanup: prefix %q: %w", prefix, ErrBadPrefix)
	}
	nss, err := namespaces(prefix)
	if err != nil {
		return err
	}
	return removeNamespaces(nss)
}

// namespaces lists the namespaces whose names start with prefix + "-".
func namespaces(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("netlab: ip netns list: %w", err)
	}
	var nss []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			nss = append(nss, f[0])
		}
	}
	return nss, nil
}

// removeNamespaces kills the processes in each namespace and deletes it.
func removeNamespaces(nss []string) error {
	var errs []error
	for _, ns := range nss {
		if err := killIn(ns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range nss {
		if err := ip(context.Background(), "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killIn sends SIGKILL to every process in namespace ns and waits up to 5
// s for them to go.
func killIn(ns string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return fmt.Errorf("netlab: ip netns pids %s: %w", ns, err)
		}
		var pids []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netlab: processes %v in %s survived SIGKILL", pids, ns)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ip runs the ip command with args.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
