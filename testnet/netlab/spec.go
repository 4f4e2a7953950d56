package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

// DefaultPrefix names the namespaces of a lab whose Spec has no Prefix.
const DefaultPrefix = "gmlab"

// Internet is the lab's public range (see the package comment for why a
// public range, and why it is safe).
var Internet = netip.MustParsePrefix("11.0.0.0/8")

// Kind is how a host reaches the lab's internet.
type Kind int

// The kinds of host.
const (
	Public    Kind = iota // a public address of its own, no NAT
	Cone                  // behind a NAT with endpoint-independent mapping
	Symmetric             // behind a NAT with a new random port per destination
)

var kindNames = [...]string{Public: "public", Cone: "cone", Symmetric: "symmetric"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) {
	if k < 0 || int(k) >= len(kindNames) {
		return nil, fmt.Errorf("netlab: unknown host kind %d", int(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if string(b) == n {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("netlab: unknown host kind %q (want public, cone or symmetric)", b)
}

// Link is the one-way condition of the WAN between two regions.
type Link struct {
	Delay  time.Duration `json:"delay"`
	Jitter time.Duration `json:"jitter"` // a uniform random extra of up to Jitter
	Loss   float64       `json:"loss"`   // drop probability, 0 to 1
}

// LinkSpec overrides the default link between regions A and B (both ways).
type LinkSpec struct {
	A    string `json:"a"`
	B    string `json:"b"`
	Link Link   `json:"link"`
}

// Host is one machine of the lab.
type Host struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	Kind   Kind   `json:"kind"`
}

// Spec describes a lab.
type Spec struct {
	// Prefix starts every namespace name (default "gmlab"): lowercase
	// letters and digits, no hyphen, so that one lab's prefix never
	// matches another's namespaces.
	Prefix string `json:"prefix"`
	// Regions, in the order that numbers them (11.<r>.0.0/16). Regions
	// named by hosts but missing here are appended in order of appearance.
	Regions []string `json:"regions,omitempty"`
	// Links override DefaultLink for some pairs of regions.
	Links []LinkSpec `json:"links,omitempty"`
	Hosts []Host     `json:"hosts"`
	// Seed seeds the WAN's jitter and loss (0 means 1).
	Seed uint64 `json:"seed,omitempty"`
}

// DefaultLink is the one-way link between regions a and b when a Spec does
// not override it: 1 ms within a region; 40 ms between eu-west and
// us-east; 120 ms between ap-south and any other region; 80 ms between
// other regions; jitter 10% of the delay; 0.5% loss between regions.
func DefaultLink(a, b string) Link {
	var d time.Duration
	switch {
	case a == b:
		return Link{Delay: time.Millisecond, Jitter: 100 * time.Microsecond}
	case a == "ap-south" || b == "ap-south":
		d = 120 * time.Millisecond
	case (a == "eu-west" && b == "us-east") || (a == "us-east" && b == "eu-west"):
		d = 40 * time.Millisecond
	default:
		d = 80 * time.Millisecond
	}
	return Link{Delay: d, Jitter: d / 10, Loss: 0.005}
}

// Errors of Spec.Validate.
var (
	ErrBadPrefix = errors.New("bad prefix")
	ErrBadHost   = errors.New("bad host")
	ErrBadRegion = errors.New("bad region")
	ErrBadLink   = errors.New("bad link")
	ErrTooMany   = errors.New("too many")
)

var (
	prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	hostRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,14}$`)
	regionRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
)

// WithDefaults returns s with the default prefix and the regions named by
// its hosts filled in.
func (s Spec) WithDefaults() Spec {
	if s.Prefix == "" {
		s.Prefix = DefaultPrefix
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	regions := append([]string(nil), s.Regions...)
	for _, h := range s.Hosts {
		if !contains(regions, h.Region) {
			regions = append(regions, h.Region)
		}
	}
	s.Regions = regions
	return s
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// Validate checks a Spec (after WithDefaults): names that fit namespace and
// interface names, known regions, sane links, and no more hosts than the
// addressing plan holds (254 regions, 254 public addresses a region, 254
// home networks).
func (s Spec) Validate() error {
	if !prefixRE.MatchString(s.Prefix) {
		return fmt.Errorf("netlab: prefix %q: %w: want 1 to 12 lowercase letters and digits, starting with a letter", s.Prefix, ErrBadPrefix)
	}
	if len(s.Hosts) == 0 {
		return fmt.Errorf("netlab: %w: no hosts", ErrBadHost)
	}
	if len(s.Regions) > 254 {
		return fmt.Errorf("netlab: %w: %d regions, at most 254", ErrTooMany, len(s.Regions))
	}
	for i, r := range s.Regions {
		if !regionRE.MatchString(r) {
			return fmt.Errorf("netlab: region %q: %w: want lowercase letters, digits and hyphens", r, ErrBadRegion)
		}
		if contains(s.Regions[:i], r) {
			return fmt.Errorf("netlab: region %q: %w: listed twice", r, ErrBadRegion)
		}
	}
	seen := map[string]bool{}
	perRegion := map[string]int{}
	nat := 0
	for _, h := range s.Hosts {
		switch {
		case !hostRE.MatchString(h.Name):
			return fmt.Errorf("netlab: host %q: %w: want 1 to 15 lowercase letters, digits and hyphens, starting with a letter", h.Name, ErrBadHost)
		case strings.HasSuffix(h.Name, "-nat"):
			return fmt.Errorf("netlab: host %q: %w: a name may not end in -nat (routers' namespaces do)", h.Name, ErrBadHost)
		case seen[h.Name]:
			return fmt.Errorf("netlab: host %q: %w: named twice", h.Name, ErrBadHost)
		case !contains(s.Regions, h.Region):
			return fmt.Errorf("netlab: host %q: region %q: %w: not among the regions", h.Name, h.Region, ErrBadRegion)
		case h.Kind < Public || h.Kind > Symmetric:
			return fmt.Errorf("netlab: host %q: %w: unknown kind %d", h.Name, ErrBadHost, int(h.Kind))
		}
		seen[h.Name] = true
		if perRegion[h.Region]++; perRegion[h.Region] > 254 {
			return fmt.Errorf("netlab: region %q: %w: more than 254 hosts", h.Region, ErrTooMany)
		}
		if h.Kind != Public {
			if nat++; nat > 254 {
				return fmt.Errorf("netlab: %w: more than 254 hosts behind NAT", ErrTooMany)
			}
		}
	}
	for _, l := range s.Links {
		switch {
		case !contains(s.Regions, l.A) || !contains(s.Regions, l.B):
			return fmt.Errorf("netlab: link %s-%s: %w: unknown region", l.A, l.B, ErrBadLink)
		case l.Link.Delay < 0 || l.Link.Jitter < 0:
			return fmt.Errorf("netlab: link %s-%s: %w: negative delay or jitter", l.A, l.B, ErrBadLink)
		case !(l.Link.Loss >= 0 && l.Link.Loss <= 1):
			return fmt.Errorf("netlab: link %s-%s: %w: loss %v not in [0, 1]", l.A, l.B, ErrBadLink, l.Link.Loss)
		}
	}
	return nil
}

// linkOf returns the link between regions a and b under s.
func (s Spec) linkOf(a, b string) Link {
	for _, l := range s.Links {
		if (l.A == a && l.B == b) || (l.A == b && l.B == a) {
			return l.Link
		}
	}
	return DefaultLink(a, b)
}

// Node is where a host sits in a lab: its namespaces and addresses.
type Node struct {
	Host
	NS      string     `json:"ns"`                // the host's namespace
	Router  string     `json:"router,omitempty"`  // its NAT router's namespace ("" when public)
	Public  netip.Addr `json:"public"`            // its public address (its router's when behind NAT)
	Private netip.Addr `json:"private,omitempty"` // its home-network address (behind NAT)
	Gateway netip.Addr `json:"gateway,omitempty"` // its router's home-network address
}

// Layout computes where each host of s sits (see the package comment). It
// validates s first.
func (s Spec) Layout() ([]Node, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	regionNum := map[string]int{}
	for i, r := range s.Regions {
		regionNum[r] = i + 1
	}
	perRegion := map[string]int{}
	nat := 0
	nodes := make([]Node, len(s.Hosts))
	for i, h := range s.Hosts {
		perRegion[h.Region]++
		n := Node{
			Host:   h,
			NS:     s.Prefix + "-" + h.Name,
			Public: netip.AddrFrom4([4]byte{11, byte(regionNum[h.Region]), 0, byte(perRegion[h.Region])}),
		}
		if h.Kind != Public {
			nat++
			n.Router = n.NS + "-nat"
			n.Gateway = netip.AddrFrom4([4]byte{10, byte(nat), 0, 1})
			n.Private = netip.AddrFrom4([4]byte{10, byte(nat), 0, 2})
		}
		nodes[i] = n
	}
	return nodes, nil
}

// wanNS is the namespace that holds n's wan0: its router's, or its own.
func (n Node) wanNS() string {
	if n.Router != "" {
		return n.Router
	}
	return n.NS
}
