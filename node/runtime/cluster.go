package runtime

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ClusterIfName is the interface a cluster job's address is on; the
// runtime exports GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and
// TP_SOCKET_IFNAME naming it.
const ClusterIfName = "gm0"

// ClusterNet gives a job an address in its renter's cluster
// (Spec.Cluster; nil: none). See "The job's cluster network" in the
// package comment.
type ClusterNet struct {
	// Addr is this member's address, in Prefix (e.g. 100.64.0.2).
	Addr netip.Addr
	// Prefix is the cluster's prefix (e.g. 100.64.0.0/24): IPv4, /16 to
	// /30, masked.
	Prefix netip.Prefix
	// Hostname is the job's hostname (e.g. "rank1"), in a UTS namespace
	// of its own.
	Hostname string
	// Hosts are the /etc/hosts lines added to localhost's and the job's
	// own: every member's name and address (addresses of Prefix).
	Hosts []HostEntry
	// Connect is called, in a goroutine of its own, for every TCP
	// connection the job opens to an address of Prefix other than Addr:
	// dst is the address and port the job dialled (SO_ORIGINAL_DST).
	// Connect owns conn (closes it). The runtime closes conn when the
	// job ends: Connect must then return.
	Connect func(conn net.Conn, dst netip.AddrPort)
}

// HostEntry is one line of a cluster job's /etc/hosts.
type HostEntry struct {
	Addr netip.Addr
	Name string
}

// ClusterDialer is implemented by a Process started with Spec.Cluster:
// DialCluster connects, from inside the job's network namespace, to the
// job's own cluster address Addr:port (where a job listening on gm0's
// address or 0.0.0.0 is reached).
type ClusterDialer interface {
	DialCluster(ctx context.Context, port uint16) (net.Conn, error)
}

// ClusterSupport returns nil when rt can give jobs a cluster network,
// else an error saying why (a non-root node, a runtime without job
// networks, docker/podman for now).
func ClusterSupport(rt Runtime) error {
	if cs, ok := rt.(interface{ clusterSupport() error }); ok {
		return cs.clusterSupport()
	}
	return fmt.Errorf("runtime %s: %s", rt.Name(), clusterProcessOnly)
}

// clusterProcessOnly is why docker and podman refuse cluster jobs.
const clusterProcessOnly = "cluster networks need the process runtime"

// Bounds of a ClusterNet.
const (
	minClusterBits  = 16
	maxClusterBits  = 30
	maxClusterHosts = 256
	maxHostname     = 64 // sethostname's limit
)

// checkCluster checks Spec.Cluster, when set: an IPv4 prefix of /16 to
// /30, masked; Addr a host address of it; a hostname; Hosts names and
// addresses of the prefix; Connect.
func checkCluster(s *Spec) error {
	c := s.Cluster
	if c == nil {
		return nil
	}
	p := c.Prefix
	switch {
	case !p.IsValid() || !p.Addr().Is4() || p.Bits() < minClusterBits || p.Bits() > maxClusterBits:
		return invalid("cluster prefix %s: want IPv4, /%d to /%d", p, minClusterBits, maxClusterBits)
	case p.Masked() != p:
		return invalid("cluster prefix %s: host bits set (want %s)", p, p.Masked())
	case !clusterHost(p, c.Addr):
		return invalid("cluster address %s: want a host address of %s", c.Addr, p)
	case !validHostname(c.Hostname):
		return invalid("cluster hostname %q: want letters, digits, '-' and '.', at most %d bytes", c.Hostname, maxHostname)
	case len(c.Hosts) > maxClusterHosts:
		return invalid("cluster hosts: %d entries, at most %d", len(c.Hosts), maxClusterHosts)
	case c.Connect == nil:
		return invalid("cluster: no Connect")
	}
	for i, h := range c.Hosts {
		if !clusterHost(p, h.Addr) || !validHostname(h.Name) {
			return invalid("cluster hosts[%d] %s %q: want a host address of %s and a hostname", i, h.Addr, h.Name, p)
		}
	}
	return nil
}

// clusterHost reports whether a is an IPv4 address of p other than its
// network and broadcast addresses.
func clusterHost(p netip.Prefix, a netip.Addr) bool {
	if !a.Is4() || !p.Contains(a) || a == p.Addr() {
		return false
	}
	b := a.As4()
	host := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	mask := uint32(1)<<(32-p.Bits()) - 1
	return host&mask != mask
}

// validHostname wants dot-separated labels of letters, digits and '-'
// (not at a label's ends), at most maxHostname bytes in all.
func validHostname(h string) bool {
	if h == "" || len(h) > maxHostname {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// hostsFile is the /etc/hosts of a cluster job: localhost, its own name
// and the cluster's.
func hostsFile(c *ClusterNet) string {
	var b strings.Builder
	b.WriteString("# written by gpumesh for this job's cluster\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	seen := map[HostEntry]bool{}
	for _, h := range append([]HostEntry{{Addr: c.Addr, Name: c.Hostname}}, c.Hosts...) {
		if !seen[h] {
			seen[h] = true
			fmt.Fprintf(&b, "%s\t%s\n", h.Addr, h.Name)
		}
	}
	return b.String()
}

// clusterEnv are the variables a cluster job gets last, over the
// renter's: the collective libraries' interface.
func clusterEnv() [][2]string {
	return [][2]string{{"GLOO_SOCKET_IFNAME", ClusterIfName}, {"NCCL_SOCKET_IFNAME", ClusterIfName}, {"TP_SOCKET_IFNAME", ClusterIfName}}
}

// overrideEnv sets each of kv in env (KEY=VALUE entries), replacing a
// value already there.
func overrideEnv(env []string, kv [][2]string) []string {
	return jobEnv(nil, env, kv)
}
