package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// NetConfig asks the process runtime for a network namespace per job (see
// "The job's network" in the package comment). The zero value is usable.
type NetConfig struct {
	// Pool is the IPv4 prefix job links are addressed from, a /30 per job:
	// the node's end takes the first host address, the job's eth0 the
	// second. Default 10.213.0.0/16; at most /30.
	Pool netip.Prefix
	// AllowLAN lets jobs reach private networks (10/8, 172.16/12,
	// 192.168/16, 100.64/10, fc00::/7) through the node. The node's own
	// addresses, link-local addresses and other jobs stay unreachable.
	AllowLAN bool
	// DNS, when set, are the resolvers a job's /etc/resolv.conf names
	// instead of the host's. Set it when the host's resolver is on
	// loopback (127.0.0.53 ...) or on the LAN, which jobs cannot reach.
	DNS []netip.Addr
	// Warm is how many job networks a root node's process runtime keeps
	// ready, made in the background before any lease (a namespace with
	// its veth pair, addresses and route), so that a job starts without
	// waiting for its own: 0 means DefaultWarm, a negative number none.
	// Each serves one job and goes with it, never another.
	Warm int
}

// DefaultJobPool is NetConfig.Pool when unset.
var DefaultJobPool = netip.MustParsePrefix("10.213.0.0/16")

// DefaultWarm is NetConfig.Warm when unset, and MaxWarm its most.
const (
	DefaultWarm = 2
	MaxWarm     = 64
)

func (c NetConfig) withDefaults() NetConfig {
	if !c.Pool.IsValid() {
		c.Pool = DefaultJobPool
	}
	c.Pool = c.Pool.Masked()
	switch {
	case c.Warm == 0:
		c.Warm = DefaultWarm
	case c.Warm < 0:
		c.Warm = 0
	}
	return c
}

func (c NetConfig) check() error {
	if !c.Pool.Addr().Is4() || c.Pool.Bits() > 30 {
		return fmt.Errorf("net pool %s: want an IPv4 prefix of /30 or wider", c.Pool)
	}
	if c.Warm > MaxWarm {
		return fmt.Errorf("net warm %d: want at most %d", c.Warm, MaxWarm)
	}
	for _, a := range c.DNS {
		if !a.IsValid() {
			return errors.New("net dns: invalid address")
		}
	}
	return nil
}

// PortDialer is a Process whose job has a network of its own: the node
// reaches the job's ports through it.
type PortDialer interface {
	// DialPort connects to 127.0.0.1:port inside the job's network
	// namespace, so a server that binds only loopback is reachable too.
	DialPort(ctx context.Context, port uint16) (net.Conn, error)
}

// ErrNotIsolated is returned, wrapped, by NetworkIsolation when jobs
// share the node's network or the node cannot reach their ports.
var ErrNotIsolated = errors.New("jobs do not get a network of their own")

// NetworkIsolation returns nil when every job rt starts gets a network
// namespace of its own, filtered as the package comment says, whose ports
// the node reaches with [PortDialer]; otherwise an error wrapping
// ErrNotIsolated that says why. A node should refuse jobs that serve
// ports when it is not nil.
func NetworkIsolation(rt Runtime) error {
	if ni, ok := rt.(interface{ networkIsolation() error }); ok {
		return ni.networkIsolation()
	}
	return fmt.Errorf("runtime %s: %w: it has no network isolation", rt.Name(), ErrNotIsolated)
}

func (c *containerRuntime) networkIsolation() error {
	if c.net == nil {
		return fmt.Errorf("runtime %s: %w: %s", c.name, ErrNotIsolated, c.noNet)
	}
	return nil
}
