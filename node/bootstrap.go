package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	madns "github.com/multiformats/go-multiaddr-dns"

	"github.com/gpumesh/gpumesh/p2p"
)

// DefaultBootstrap is the built-in bootstrap list of the mainnet, used
// only when the network is p2p.DefaultNetwork and neither the config
// file, the environment nor a flag names any bootstrap peer (and
// no_default_bootstrap is off). Testnets, labs, simulations and tests
// never use it: they run networks of their own names.
//
// The project runs no public bootstrap nodes yet. Until it does, the list
// is one /dnsaddr entry under the reserved top-level domain .invalid (RFC
// 6761), which ResolveBootstrap refuses without a lookup: a mainnet node
// with no bootstrap configured says so and starts alone, and a light
// client asks for --bootstrap. When the project runs bootstrap nodes,
// this is the place to list them as kubo does: /dnsaddr/bootstrap.<its
// domain>/p2p/<peer ID> entries, whose TXT records (_dnsaddr.<name>,
// "dnsaddr=<multiaddr>") can move without a release, plus one or two raw
// /ip4 and /ip6 addresses as a fallback for when DNS fails. Bootstrap
// peers are pre-trusted (trust.go): this list is the default trust root.
var DefaultBootstrap = []string{
	"/dnsaddr/bootstrap.gpumesh.invalid",
}

// Resolver resolves /dnsaddr multiaddrs: *madns.Resolver (DNS TXT
// records), or a fake in tests, which must never reach real DNS.
type Resolver interface {
	Resolve(ctx context.Context, a ma.Multiaddr) ([]ma.Multiaddr, error)
}

// DefaultResolver resolves through the system's DNS.
var DefaultResolver Resolver = madns.DefaultResolver

// ErrDefaultBootstrapUnavailable means the built-in mainnet bootstrap
// list resolved to no peer.
var ErrDefaultBootstrapUnavailable = errors.New("the built-in mainnet bootstrap list names no reachable peer yet (no public bootstrap nodes run): pass --bootstrap MULTIADDR, or --no-default-bootstrap to start a network's first node")

// Bounds of resolving /dnsaddr entries: how deep a TXT record may point
// at another /dnsaddr, and how many addresses all entries may yield.
const (
	maxDNSAddrDepth = 4
	maxDNSAddrs     = 64
)

// isDNSAddr reports whether a is a /dnsaddr entry, which must be resolved
// before it is dialled.
func isDNSAddr(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_DNSADDR)
	return err == nil
}

// ParseBootstrapList parses bootstrap multiaddrs into peers (addresses
// ending in /p2p/PEERID, those of one peer merged) and /dnsaddr entries
// (with or without /p2p/PEERID), which ResolveBootstrap resolves when the
// node starts.
func ParseBootstrapList(addrs []string) (peers []peer.AddrInfo, dns []ma.Multiaddr, err error) {
	var plain []string
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, nil, fmt.Errorf("bootstrap address %q: %w", s, err)
		}
		if isDNSAddr(a) {
			dns = append(dns, a)
			continue
		}
		plain = append(plain, s)
	}
	peers, err = ParseBootstrap(plain)
	if err != nil {
		return nil, nil, err
	}
	if peers == nil {
		peers = []peer.AddrInfo{}
	}
	return peers, dns, nil
}

// ResolveBootstrap resolves dns, the /dnsaddr bootstrap entries, through
// r (recursively, at most 4 deep and 64 addresses in all), and merges the
// peers they name, each address ending in /p2p/PEERID, into peers. Names
// under the reserved .invalid domain fail without a lookup. It fails when
// an entry resolves to no peer.
func ResolveBootstrap(ctx context.Context, r Resolver, peers []peer.AddrInfo, dns []ma.Multiaddr) ([]peer.AddrInfo, error) {
	out := append([]peer.AddrInfo(nil), peers...)
	var errs []error
	budget := maxDNSAddrs
	for _, d := range dns {
		var found []string
		err := resolveDNSAddr(ctx, r, d, 0, &budget, func(a ma.Multiaddr) { found = append(found, a.String()) })
		if err == nil && len(found) == 0 {
			err = errors.New("no address ending in /p2p/PEERID")
		}
		var ais []peer.AddrInfo
		if err == nil {
			ais, err = ParseBootstrap(found)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bootstrap %s: %w", d, err))
			continue
		}
		out = mergeBootstrap(out, ais)
	}
	return out, errors.Join(errs...)
}

// resolveDNSAddr resolves a, calling found with each address that ends in
// /p2p/PEERID and is not itself a /dnsaddr.
func resolveDNSAddr(ctx context.Context, r Resolver, a ma.Multiaddr, depth int, budget *int, found func(ma.Multiaddr)) error {
	if !isDNSAddr(a) {
		if _, err := a.ValueForProtocol(ma.P_P2P); err == nil && *budget > 0 {
			*budget--
			found(a)
		}
		return nil
	}
	if depth >= maxDNSAddrDepth {
		return fmt.Errorf("%s: /dnsaddr records nested deeper than %d", a, maxDNSAddrDepth)
	}
	name, _ := a.ValueForProtocol(ma.P_DNSADDR)
	if n := strings.TrimSuffix(strings.ToLower(name), "."); n == "invalid" || strings.HasSuffix(n, ".invalid") {
		return fmt.Errorf("%s: under the reserved domain .invalid: a placeholder, never looked up", name)
	}
	res, err := r.Resolve(ctx, a)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", a, err)
	}
	for _, x := range res {
		if *budget <= 0 {
			break
		}
		if err := resolveDNSAddr(ctx, r, x, depth+1, budget, found); err != nil {
			return err
		}
	}
	return nil
}

// mergeBootstrap adds add's peers to peers, merging the addresses of a
// peer already there.
func mergeBootstrap(peers, add []peer.AddrInfo) []peer.AddrInfo {
	for _, ai := range add {
		merged := false
		for i := range peers {
			if peers[i].ID == ai.ID {
				peers[i].Addrs = append(peers[i].Addrs, ai.Addrs...)
				merged = true
				break
			}
		}
		if !merged {
			peers = append(peers, ai)
		}
	}
	return peers
}

// BootstrapList says which bootstrap list c uses, for `gpumesh doctor`
// and logs: "built-in mainnet list", "configured (N entries)" or "none
// (first node of the network)".
func (c Config) BootstrapList() string {
	n := len(c.Bootstrap) + len(c.BootstrapDNS)
	switch {
	case c.DefaultBootstrap:
		return "built-in mainnet list (" + strings.Join(DefaultBootstrap, ", ") + ")"
	case n == 0:
		return "none (the first node of network " + c.networkID() + ")"
	}
	return fmt.Sprintf("configured (%d %s)", n, map[bool]string{true: "entry", false: "entries"}[n == 1])
}

// networkID is c's network, p2p.DefaultNetwork when unset (a Config
// built in code rather than loaded).
func (c Config) networkID() string {
	if c.Network == "" {
		return p2p.DefaultNetwork
	}
	return c.Network
}

// applyDefaultBootstrap keeps the built-in mainnet list, the bootstrap
// key's default, only when c is on the mainnet, names no bootstrap peer
// anywhere, and does not opt out; otherwise a default list is emptied.
func (c *Config) applyDefaultBootstrap() {
	if c.Sources["bootstrap"] != "default" {
		c.DefaultBootstrap = false
		return
	}
	if c.networkID() != p2p.DefaultNetwork || c.NoDefaultBootstrap {
		c.Bootstrap, c.BootstrapDNS, c.DefaultBootstrap = []peer.AddrInfo{}, nil, false
		return
	}
	c.DefaultBootstrap = true
}

// resolveBootstrap is c's bootstrap peers, its /dnsaddr entries resolved
// through r. The built-in list failing to resolve is no error for a node
// (warn says so; it starts alone), only for a light client (strict).
func (c Config) resolveBootstrap(ctx context.Context, r Resolver, strict bool, warn func(error)) ([]peer.AddrInfo, error) {
	if len(c.BootstrapDNS) == 0 {
		return c.Bootstrap, nil
	}
	if r == nil {
		r = DefaultResolver
	}
	peers, err := ResolveBootstrap(ctx, r, c.Bootstrap, c.BootstrapDNS)
	switch {
	case err == nil:
		return peers, nil
	case c.DefaultBootstrap && len(peers) == 0 && strict:
		return nil, fmt.Errorf("%w (%w)", ErrDefaultBootstrapUnavailable, err)
	case c.DefaultBootstrap && len(peers) == 0:
		warn(fmt.Errorf("%w (%w)", ErrDefaultBootstrapUnavailable, err))
		return peers, nil
	case len(peers) == 0:
		return nil, err
	}
	// Some entries resolved: join through those.
	warn(err)
	return peers, nil
}

// LightBootstrap is the bootstrap peers a light client of c joins
// through, /dnsaddr entries resolved through r (DefaultResolver when
// nil). It fails when the built-in list names no peer.
func LightBootstrap(ctx context.Context, c Config, r Resolver) ([]peer.AddrInfo, error) {
	return c.resolveBootstrap(ctx, r, true, func(error) {})
}
