package node

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/challenge"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// Kind is the TOML type of a configuration key's values.
type Kind int

// The kinds of keys. Durations, sizes, prices and addresses are strings.
const (
	KindString Kind = iota
	KindInt
	KindBool
)

// Key is one configuration key: the one place that names it, documents
// it, gives its default, and parses it into Config. Its flag, environment
// variable, TOML type, `config show` row and docs/suppliers.md row all come from it.
type Key struct {
	// Name is the TOML key; the flag is Name with "-" for "_", the
	// environment variable GPUMESH_ and Name upper-cased.
	Name string
	// Kind is the TOML type of the key's values.
	Kind Kind
	// Arg names a value in --help, e.g. "duration"; none for booleans.
	Arg string
	// IntOK lets a KindString key take a TOML integer too, read as its
	// decimal string (a size in bytes; 0 for off).
	IntOK bool
	// Repeatable keys take a list: an array in TOML, a comma-separated
	// list in the environment, a repeated (or comma-separated) flag.
	Repeatable bool
	// Global keys are flags of every command; the others are flags of
	// `gpumesh node` and `gpumesh config show`, and of the commands that
	// ask for them by name.
	Global bool
	// Default is the value before the file, environment and flags; nil
	// for none.
	Default []string
	// DefaultDoc describes the default where Default does not say it
	// all (e.g. "half the list price").
	DefaultDoc string
	// Help is one line on what the key does, with `code` in backquotes:
	// the flag's usage (backquotes dropped) and the meaning in docs/suppliers.md.
	Help string

	set  func(*Config, []string) error
	show func(Config) any
}

// Flag is the key's command-line flag, without the dashes.
func (k Key) Flag() string { return strings.ReplaceAll(k.Name, "_", "-") }

// Env is the key's environment variable.
func (k Key) Env() string { return EnvName(k.Name) }

// DefaultText is the default as documentation shows it.
func (k Key) DefaultText() string {
	if k.DefaultDoc != "" {
		return k.DefaultDoc
	}
	switch {
	case len(k.Default) == 0:
		return "none"
	case len(k.Default) == 1 && k.Default[0] == "":
		return "empty"
	}
	return "`" + strings.Join(k.Default, "`, `") + "`"
}

// Usage is the flag's help text: Help, and how to repeat it and its
// default.
func (k Key) Usage() string {
	var notes []string
	if k.Repeatable {
		notes = append(notes, "repeatable or comma-separated")
	}
	if k.Kind != KindBool {
		notes = append(notes, "default "+k.DefaultText())
	}
	u := k.Help
	if len(notes) > 0 {
		u += " (" + strings.Join(notes, "; ") + ")"
	}
	return strings.ReplaceAll(u, "`", "")
}

// EnvName is the environment variable of a config key.
func EnvName(key string) string { return "GPUMESH_" + strings.ToUpper(key) }

// ConfigKeys lists the configuration keys in their canonical order: the
// order of `config show`, docs/suppliers.md and `--help`.
func ConfigKeys() []Key {
	return append([]Key{
		{Name: "listen", Arg: "multiaddr", Repeatable: true, Default: []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"},
			Help: "libp2p multiaddr to listen on",
			set:  parsedList(func(c *Config) *[]ma.Multiaddr { return &c.Listen }, ma.NewMultiaddr, "a multiaddr"),
			show: func(c Config) any { return stringsOf(c.Listen) }},
		{Name: "network", Arg: "id", Global: true, Default: []string{p2p.DefaultNetwork},
			Help: "the gpumesh network to join: nodes of different networks never exchange records (a-z, 0-9, '-', at most 32)",
			set:  parsed(func(c *Config) *string { return &c.Network }, func(s string) (string, error) { return s, p2p.ValidNetwork(s) }),
			show: func(c Config) any { return c.Network }},
		{Name: "bootstrap", Arg: "multiaddr", Repeatable: true, Global: true, Default: DefaultBootstrap,
			DefaultDoc: "the built-in list on `mainnet` (none yet), none on other networks",
			Help:       "bootstrap peer to join the network through, a multiaddr ending in `/p2p/PEERID`, or a `/dnsaddr/NAME` entry",
			set: func(c *Config, v []string) error {
				peers, dns, err := ParseBootstrapList(v)
				if err != nil {
					return err
				}
				c.Bootstrap, c.BootstrapDNS = peers, dns
				return nil
			},
			show: func(c Config) any { return append(bootstrapStrings(c.Bootstrap), stringsOf(c.BootstrapDNS)...) }},
		{Name: "no_default_bootstrap", Kind: KindBool, Global: true, Default: []string{"false"},
			Help: "use no built-in bootstrap list when none is configured: the first node of a network (as `bootstrap = []` in the file)",
			set:  boolKey(func(c *Config) *bool { return &c.NoDefaultBootstrap }),
			show: func(c Config) any { return c.NoDefaultBootstrap }},
		{Name: "gpus", Arg: "spec", Default: []string{"auto"},
			Help: "GPUs to offer: `auto` (NVML), `none`, or `sim:MODEL:COUNT[,MODEL:COUNT...]` (simulated)",
			set:  parsed(func(c *Config) *inventory.Spec { return &c.GPUs }, inventory.ParseSpec),
			show: func(c Config) any { return c.GPUs.String() }},
		{Name: "region", Arg: "label", Default: []string{"unknown"},
			Help: "region label advertised in the profile, e.g. `eu-west`",
			set: func(c *Config, v []string) error {
				if !validRegion(v[0]) {
					return fmt.Errorf("%q is not a region label (letters, digits, '-', '_', at most 32)", v[0])
				}
				c.Region = v[0]
				return nil
			},
			show: func(c Config) any { return c.Region }},
		{Name: "api", Arg: "host:port", Default: []string{"127.0.0.1:7450"},
			Help: "address of the local HTTP API (`/healthz`, `/api/v1/...`, `/metrics`), or `off`",
			set:  str(func(c *Config) *string { return &c.API }),
			show: func(c Config) any { return c.API }},
		{Name: "log_level", Arg: "level", Global: true, Default: []string{"info"},
			Help: "log level: `debug`, `info`, `warn` or `error`",
			set:  parsed(func(c *Config) *slog.Level { return &c.LogLevel }, ParseLogLevel),
			show: func(c Config) any { return strings.ToLower(c.LogLevel.String()) }},
		{Name: "heartbeat_interval", Arg: "duration", Default: []string{"10s"},
			Help: "how often a heartbeat is gossiped; in a network of more than 20 nodes, at most every nodes/2 seconds (up to 60 s), so that each node receives about 2 a second",
			set:  durationIn(func(c *Config) *time.Duration { return &c.HeartbeatInterval }, 1, 0),
			show: func(c Config) any { return c.HeartbeatInterval.String() }},
		{Name: "profile_ttl", Arg: "duration", Default: []string{"1h"},
			Help: "lifetime of the advertised profile, 1m to " + shortDuration(p2p.MaxProfileLifetime) + "; republished at half",
			set:  durationIn(func(c *Config) *time.Duration { return &c.ProfileTTL }, time.Minute, p2p.MaxProfileLifetime),
			show: func(c Config) any { return c.ProfileTTL.String() }},
		{Name: "bootstrap_timeout", Arg: "duration", Default: []string{"10s"},
			Help: "how long to try the bootstrap peers before giving up",
			set:  durationIn(func(c *Config) *time.Duration { return &c.BootstrapTimeout }, 1, 0),
			show: func(c Config) any { return c.BootstrapTimeout.String() }},
		{Name: "conn_low", Arg: "int", Kind: KindInt, Default: []string{"32"},
			Help: "connection manager low watermark: connections kept when trimming",
			set:  positiveInt(func(c *Config) *int { return &c.ConnLow }),
			show: func(c Config) any { return c.ConnLow }},
		{Name: "conn_high", Arg: "int", Kind: KindInt, Default: []string{"96"},
			Help: "connection manager high watermark: connections above it are trimmed",
			set:  positiveInt(func(c *Config) *int { return &c.ConnHigh }),
			show: func(c Config) any { return c.ConnHigh }},
		{Name: "ban", Arg: "peer-id", Repeatable: true,
			Help: "peer ID the connection gater refuses",
			set:  parsedList(func(c *Config) *[]peer.ID { return &c.Ban }, peer.Decode, "a peer ID"),
			show: func(c Config) any { return stringsOf(c.Ban) }},
		{Name: "pricing", Arg: "mode", Default: []string{"fixed"},
			Help: "pricing mode: `fixed`, `auction` or `dynamic`",
			set:  parsed(func(c *Config) *market.PricingMode { return &c.Pricing }, market.ParsePricingMode),
			show: func(c Config) any { return string(c.Pricing) }},
		{Name: "price", Arg: "MODEL=AMOUNT", Repeatable: true,
			Help: "list price per GPU-hour, `MODEL=AMOUNT`, e.g. `h100-sxm=2.10`; a model without one is not sold",
			set:  modelPrices(func(c *Config) *map[string]money.Micros { return &c.Prices }),
			show: func(c Config) any { return priceStrings(c.Prices) }},
		{Name: "price_floor", Arg: "MODEL=AMOUNT", Repeatable: true, DefaultDoc: "half the list price",
			Help: "lowest price per GPU-hour it takes, `MODEL=AMOUNT`",
			set:  modelPrices(func(c *Config) *map[string]money.Micros { return &c.PriceFloors }),
			show: func(c Config) any { return priceStrings(c.PriceFloors) }},
		{Name: "ask_ttl", Arg: "duration", Default: []string{"10m"},
			Help: "lifetime of a posted ask, 10s to " + shortDuration(market.MaxOrderLifetime) + "; renewed at 30% to 50% of it",
			set:  durationIn(func(c *Config) *time.Duration { return &c.AskTTL }, 10*time.Second, market.MaxOrderLifetime),
			show: func(c Config) any { return c.AskTTL.String() }},
		{Name: "trusted", Arg: "peer-id", Repeatable: true,
			Help: "peer ID whose attestations are pre-trusted, besides the node itself and its bootstrap peers",
			set:  parsedList(func(c *Config) *[]peer.ID { return &c.Trusted }, peer.Decode, "a peer ID"),
			show: func(c Config) any { return stringsOf(c.Trusted) }},
		{Name: "audit_interval", Arg: "duration", IntOK: true, Default: []string{"10m"},
			Help: "mean time between this node's challenges of other suppliers, 5s or more, or `off`",
			set: func(c *Config, v []string) error {
				if v[0] == "off" || v[0] == "0" {
					c.AuditInterval = 0
					return nil
				}
				d, err := time.ParseDuration(v[0])
				if err != nil || d < 5*time.Second {
					return fmt.Errorf("%q is not a duration of 5s or more, or off", v[0])
				}
				c.AuditInterval = d
				return nil
			},
			show: func(c Config) any {
				if c.AuditInterval == 0 {
					return "off"
				}
				return c.AuditInterval.String()
			}},
		{Name: "sim_cheat", Arg: "cheats", Default: []string{""},
			Help: "testnets only, every GPU simulated: answer challenges as an impostor: `slow=F`, `skip=F`, `wrong=F`, `mem=F` or `replay`",
			set: func(c *Config, v []string) error {
				if _, err := challenge.ParseCheat(v[0]); err != nil {
					return err
				}
				c.SimCheat = v[0]
				return nil
			},
			show: func(c Config) any { return c.SimCheat }},
		{Name: "runtime", Arg: "name", Repeatable: true, Default: []string{"process"},
			Help: "job runtime this supplier offers: `process`, `docker` or `podman`",
			set: func(c *Config, v []string) error {
				for _, r := range v {
					if r != "process" && r != "docker" && r != "podman" {
						return fmt.Errorf("%q is not a job runtime: want process, docker or podman", r)
					}
				}
				c.Runtimes = v
				return nil
			},
			show: func(c Config) any { return c.Runtimes }},
		{Name: "job_user", Arg: "user", Default: []string{""}, DefaultDoc: "`nobody` when root, else the node's user",
			Help: "the user renters' jobs run as, by name or `UID:GID`",
			set: func(c *Config, v []string) error {
				if err := runtime.CheckUser(v[0]); err != nil {
					return err
				}
				c.JobUser = v[0]
				return nil
			},
			show: func(c Config) any { return c.JobUser }},
		{Name: "halt_grace", Arg: "duration", Default: []string{"2m"},
			Help: "how long a job stays paused for an unpaid renter before it is stopped, 1s or more",
			set:  durationIn(func(c *Config) *time.Duration { return &c.HaltGrace }, time.Second, 0),
			show: func(c Config) any { return c.HaltGrace.String() }},
		{Name: "max_lease", Arg: "duration", Default: []string{"24h"},
			Help: "the longest lease this supplier grants, " + shortDuration(market.MinDuration) + " to " + shortDuration(market.MaxDuration) + "; carried in its asks, longer bids are declined as `duration`",
			set:  durationIn(func(c *Config) *time.Duration { return &c.MaxLease }, market.MinDuration, market.MaxDuration),
			show: func(c Config) any { return c.MaxLease.String() }},
		{Name: "claim_window", Arg: "duration", Default: []string{"60s"},
			Help: "the most a lease on which no job has started is held before its GPUs are released, and how long a renter that let a lease lapse or go unclaimed is refused, 1s to 1h",
			set:  durationIn(func(c *Config) *time.Duration { return &c.ClaimWindow }, time.Second, time.Hour),
			show: func(c Config) any { return c.ClaimWindow.String() }},
		{Name: "unsandboxed_jobs", Kind: KindBool, Default: []string{"false"},
			Help: "a node that is not root and cannot create user namespaces refuses jobs unless this is set; then jobs run without the mount namespace that hides the node's key and store, and without a PID namespace",
			set:  boolKey(func(c *Config) *bool { return &c.UnsandboxedJobs }),
			show: func(c Config) any { return c.UnsandboxedJobs }},
		{Name: "job_network", Kind: KindBool, Default: []string{"true"},
			Help: "on a node running as root, each job runs in a network namespace of its own, with outbound NAT, that cannot reach this machine's own addresses, link-local addresses or other jobs; false, or a node not running as root, shares the machine's network with jobs and refuses jobs that serve ports",
			set:  boolKey(func(c *Config) *bool { return &c.JobNetwork }),
			show: func(c Config) any { return c.JobNetwork }},
		{Name: "job_network_warm", Arg: "int", Kind: KindInt, Default: []string{strconv.Itoa(runtime.DefaultWarm)},
			Help: fmt.Sprintf("how many job networks a node running as root with job_network on keeps ready, made in the background before any lease, so that a job need not wait for its own; each serves one job and goes with it; 0 to %d, 0 for none", runtime.MaxWarm),
			set: func(c *Config, v []string) error {
				n, err := strconv.Atoi(v[0])
				if err != nil || n < 0 || n > runtime.MaxWarm {
					return fmt.Errorf("%q is not an integer from 0 to %d", v[0], runtime.MaxWarm)
				}
				c.JobNetworkWarm = n
				return nil
			},
			show: func(c Config) any { return c.JobNetworkWarm }},
		{Name: "job_lan", Kind: KindBool, Default: []string{"false"},
			Help: "jobs in a network of their own may reach private networks (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) through this machine",
			set:  boolKey(func(c *Config) *bool { return &c.JobLAN }),
			show: func(c Config) any { return c.JobLAN }},
		{Name: "job_dns", Arg: "addr", Repeatable: true,
			Help: "a DNS resolver that jobs in a network of their own use instead of this machine's; set it when the machine's resolver is on loopback (`127.0.0.53`) or the LAN, which jobs cannot reach",
			set: func(c *Config, v []string) error {
				c.JobDNS = nil
				for _, s := range v {
					a, err := netip.ParseAddr(s)
					if err != nil {
						return fmt.Errorf("%q is not an IP address", s)
					}
					c.JobDNS = append(c.JobDNS, a)
				}
				return nil
			},
			show: func(c Config) any {
				out := []string{}
				for _, a := range c.JobDNS {
					out = append(out, a.String())
				}
				return out
			}},
		{Name: "reachability", Arg: "auto|public|private", Default: []string{"auto"},
			Help: "how peers reach this node: `public` for a bootstrap or relay node with a public address and open port (it serves as a relay at once, even when no peer has dialled it back yet), `private` behind NAT (it reserves relay slots at once), `auto` to let peers' dial-backs tell",
			set: func(c *Config, v []string) error {
				r, err := p2p.ParseReachability(v[0])
				c.Reachability = r
				return err
			},
			show: func(c Config) any { return string(c.Reachability) }},
		{Name: "chain", Arg: "name",
			Help: "settle leases on chain with the deployment of the config file's `[chains.NAME]` table (docs/PROTOCOL.md §43; see docs/suppliers.md); unset, the node settles off chain only",
			set:  str(func(c *Config) *string { return &c.Chain }),
			show: func(c Config) any { return c.Chain }},
		{Name: "settle_require", Kind: KindBool, Default: []string{"false"},
			Help: "with `chain` set, refuse a job whose renter has no funded payment channel to this supplier on that chain",
			set:  boolKey(func(c *Config) *bool { return &c.SettleRequire }),
			show: func(c Config) any { return c.SettleRequire }},
		{Name: "mdns", Kind: KindBool, Default: []string{"false"},
			Help: "find and connect to gpumesh nodes on the LAN by multicast DNS",
			set:  boolKey(func(c *Config) *bool { return &c.MDNS }),
			show: func(c Config) any { return c.MDNS }},
	}, jobLimitKeys()...)
}

// LookupKey finds a configuration key by its name or its flag name.
func LookupKey(name string) (Key, bool) {
	name = strings.ReplaceAll(name, "-", "_")
	for _, k := range ConfigKeys() {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Keys lists the names of the configuration keys in their canonical order.
func Keys() []string {
	var ks []string
	for _, k := range ConfigKeys() {
		ks = append(ks, k.Name)
	}
	return ks
}

// KeysMarkdown is docs/suppliers.md's table of the configuration keys.
func KeysMarkdown() string {
	var b strings.Builder
	b.WriteString("| key | flag | environment | default | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, k := range ConfigKeys() {
		flag := "`--" + k.Flag() + "`"
		if k.Repeatable {
			flag += " (repeatable)"
		}
		cell := strings.NewReplacer("|", `\|`, "\n", " ")
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s | %s |\n", k.Name, flag, k.Env(), cell.Replace(k.DefaultText()), cell.Replace(k.Help))
	}
	return b.String()
}

// str sets a string key as given.
func str(p func(*Config) *string) func(*Config, []string) error {
	return func(c *Config, v []string) error { *p(c) = v[0]; return nil }
}

// durationIn sets a duration key of at least lo and, when hi > 0, at
// most hi.
func durationIn(p func(*Config) *time.Duration, lo, hi time.Duration) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		d, err := time.ParseDuration(v[0])
		switch {
		case (err != nil || d < lo) && lo <= 1:
			return fmt.Errorf("%q is not a positive duration (e.g. 10s, 5m)", v[0])
		case hi == 0 && (err != nil || d < lo):
			return fmt.Errorf("%q is not a duration of %s or more", v[0], lo)
		case hi > 0 && (err != nil || d < lo || d > hi):
			return fmt.Errorf("%q is not a duration between %s and %s", v[0], lo, hi)
		}
		*p(c) = d
		return nil
	}
}

// shortDuration writes d without zero units: 1m rather than 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// positiveInt sets an integer key of 1 or more.
func positiveInt(p func(*Config) *int) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", v[0])
		}
		*p(c) = n
		return nil
	}
}

// boolKey sets a boolean key.
func boolKey(p func(*Config) *bool) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return fmt.Errorf("%q is not true or false", v[0])
		}
		*p(c) = b
		return nil
	}
}

// parsed sets a single-valued key with parse.
func parsed[T any](p func(*Config) *T, parse func(string) (T, error)) func(*Config, []string) error {
	return parsedAll(p, func(v []string) (T, error) { return parse(v[0]) })
}

// parsedAll sets a key from all its values with parse; Config keeps its
// value when parse fails.
func parsedAll[T any](p func(*Config) *T, parse func([]string) (T, error)) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		x, err := parse(v)
		if err != nil {
			return err
		}
		*p(c) = x
		return nil
	}
}

// parsedList sets a list key, parsing each value with parse; what names
// a value in errors.
func parsedList[T any](p func(*Config) *[]T, parse func(string) (T, error), what string) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		out := make([]T, 0, len(v))
		for _, s := range v {
			x, err := parse(s)
			if err != nil {
				return fmt.Errorf("%q is not %s: %w", s, what, err)
			}
			out = append(out, x)
		}
		*p(c) = out
		return nil
	}
}

// modelPrices sets prices per model from MODEL=AMOUNT values.
func modelPrices(p func(*Config) *map[string]money.Micros) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		out := make(map[string]money.Micros, len(v))
		for _, s := range v {
			m, micros, err := market.ParseModelPrice(s)
			if err != nil {
				return err
			}
			if micros <= 0 {
				return fmt.Errorf("%q: a price must be above zero", s)
			}
			if !catalog.Known(m) {
				return fmt.Errorf("%q: unknown model %q (known: %s)", s, m, strings.Join(catalog.Slugs(), ", "))
			}
			if _, ok := out[m]; ok {
				return fmt.Errorf("%q: model %s priced twice", s, m)
			}
			out[m] = micros
		}
		*p(c) = out
		return nil
	}
}

// ParseBootstrap parses bootstrap multiaddrs, each ending in /p2p/PEERID;
// the addresses of one peer are merged into one AddrInfo.
func ParseBootstrap(addrs []string) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	byID := map[peer.ID]int{}
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("bootstrap address %q: %w", s, err)
		}
		ai, err := peer.AddrInfoFromP2pAddr(a)
		if err != nil {
			return nil, fmt.Errorf("bootstrap address %q: %w (it must end in /p2p/PEERID)", s, err)
		}
		if i, ok := byID[ai.ID]; ok {
			out[i].Addrs = append(out[i].Addrs, ai.Addrs...)
			continue
		}
		byID[ai.ID] = len(out)
		out = append(out, *ai)
	}
	return out, nil
}

// ParseLogLevel maps a level name to a slog.Level.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not a log level (debug, info, warn, error)", s)
	}
	return l, nil
}

func validRegion(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// stringsOf writes each of vs with its String method; never nil, so that
// `config show --json` prints an empty list as [].
func stringsOf[T fmt.Stringer](vs []T) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

// bootstrapStrings writes bootstrap peers back as /.../p2p/PEERID
// multiaddrs.
func bootstrapStrings(ais []peer.AddrInfo) []string {
	out := []string{}
	for _, ai := range ais {
		addrs, err := peer.AddrInfoToP2pAddrs(&ai)
		if err != nil {
			continue
		}
		out = append(out, stringsOf(addrs)...)
	}
	return out
}

// priceStrings writes prices as MODEL=AMOUNT, by model.
func priceStrings(prices map[string]money.Micros) []string {
	out := []string{}
	for _, m := range slices.Sorted(maps.Keys(prices)) {
		out = append(out, m+"="+prices[m].String())
	}
	return out
}
