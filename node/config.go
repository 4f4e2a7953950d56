package node

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// Config is a node's effective configuration. It is built from, in
// increasing precedence: built-in defaults, the TOML config file,
// GPUMESH_* environment variables, and command-line flags.
type Config struct {
	// DataDir holds the identity key, the store and the config file.
	DataDir string
	// ConfigFile is the TOML file that was read, if any.
	ConfigFile string

	Listen    []ma.Multiaddr  // addresses to listen on
	Network   string          // the gpumesh network's ID; p2p.DefaultNetwork when empty
	Bootstrap []peer.AddrInfo // peers to join through
	// BootstrapDNS are /dnsaddr bootstrap entries, resolved when the
	// node (or light client) starts (ResolveBootstrap).
	BootstrapDNS []ma.Multiaddr
	// NoDefaultBootstrap: no built-in mainnet list when no bootstrap peer
	// is configured (the first node of a network).
	NoDefaultBootstrap bool
	// DefaultBootstrap: Bootstrap and BootstrapDNS are the built-in
	// mainnet list (DefaultBootstrap), set by LoadConfig.
	DefaultBootstrap  bool
	GPUs              inventory.Spec   // auto | none | sim:MODEL:COUNT[,...]
	Region            string           // region label advertised in the profile
	API               string           // host:port of the local HTTP API, or "off"
	LogLevel          slog.Level       // debug | info | warn | error
	HeartbeatInterval time.Duration    // how often a heartbeat is gossiped
	ProfileTTL        time.Duration    // lifetime of a published profile
	ConnLow, ConnHigh int              // connection manager watermarks
	Ban               []peer.ID        // refused by the gater
	BootstrapTimeout  time.Duration    // how long to try bootstrap peers
	MDNS              bool             // find peers on the LAN by multicast DNS
	Reachability      p2p.Reachability // what the operator says of this node's reachability
	Pricing           market.PricingMode
	Prices            map[string]money.Micros // list prices per GPU-hour by model
	PriceFloors       map[string]money.Micros // floors by model (default half the list price)
	AskTTL            time.Duration           // lifetime of a posted ask; renewed at 30% to 50% of it
	Trusted           []peer.ID               // whose attestations are pre-trusted
	AuditInterval     time.Duration           // mean time between this node's challenges of others; 0 = none
	SimCheat          string                  // testnets only: make this node an impostor (slow=F, skip=F, ...)
	Runtimes          []string                // job runtimes a supplier offers: process, docker, podman
	JobUser           string                  // user that jobs run as ("": the node's own)
	HaltGrace         time.Duration           // how long a job waits, paused, for an unpaid renter
	UnsandboxedJobs   bool                    // a node without user namespaces may run jobs unhidden
	JobNetwork        bool                    // jobs get a network namespace of their own (root only)
	JobLAN            bool                    // jobs may reach private networks
	JobDNS            []netip.Addr            // resolvers for jobs with a network of their own
	JobNetworkWarm    int                     // job networks made ahead of jobs (0: none)
	MaxLease          time.Duration           // longest lease the supplier grants
	ClaimWindow       time.Duration           // most a lease with no job started on it is held
	// Per-job limits a supplier applies: the default for what a spec
	// leaves at 0, and the most a spec may ask. JobMemory and
	// JobMemoryMax are 0 for auto (see JobLimits).
	JobMemory, JobMemoryMax       int64
	JobProcs, JobProcsMax         int64
	JobDisk, JobDiskMax           int64
	JobOpenFiles, JobOpenFilesMax int64

	// Chain names the [chains.NAME] table of the deployment this node
	// settles on ("": off chain only); Chains are the file's tables
	// (config_chain.go). SettleRequire refuses renters that cannot pay
	// there.
	Chain         string
	Chains        map[string]ChainConfig
	SettleRequire bool

	// Sources says where each key's value came from: "default",
	// "file:PATH", "env:NAME" or "flag:--NAME".
	Sources map[string]string
}

// Input is everything LoadConfig reads, gathered by the caller, so that
// loading is a pure function that tests can drive.
type Input struct {
	// DataFlag and ConfigFlag are --data and --config ("" when not given).
	DataFlag, ConfigFlag string
	// Env looks up an environment variable.
	Env func(string) (string, bool)
	// Home is the user's home directory, for the default data dir.
	Home string
	// ServiceDir is the data dir of the packaged service (ServiceDataDir;
	// "" for none). The default data dir is ServiceDir rather than
	// ~/.gpumesh when ~/.gpumesh does not exist and this process may open
	// ServiceDir, so that `sudo gpumesh doctor` finds the service's node.
	ServiceDir string
	// ServiceConfig is the packaged service's config file
	// (ServiceConfigFile), the default config file when the data dir is
	// ServiceDir by default.
	ServiceConfig string
	// IsDir reports whether a path is a directory this process may open
	// (for ServiceDir and ~/.gpumesh); nil opens it.
	IsDir func(string) bool
	// Flags holds the flags the user set explicitly, by config key, each
	// with its values in order (repeatable flags have several).
	Flags map[string][]string
	// ReadFile reads the config file; os.ReadFile when nil.
	ReadFile func(string) ([]byte, error)
}

// Pricer is the pricing strategy the configuration describes.
func (c Config) Pricer() market.Pricer {
	pr := market.Pricer{Mode: c.Pricing, List: maps.Clone(c.Prices), Floor: maps.Clone(c.PriceFloors)}
	if pr.List == nil {
		pr.List = map[string]money.Micros{}
	}
	if pr.Floor == nil {
		pr.Floor = map[string]money.Micros{}
	}
	return pr
}

// ServiceDataDir is the packaged systemd unit's data dir (its
// StateDirectory=, packaging/gpumesh.service).
const ServiceDataDir = "/var/lib/gpumesh"

// ServiceConfigFile is the packaged unit's config file (a conffile of
// the package, packaging/config.toml).
const ServiceConfigFile = "/etc/gpumesh/config.toml"

// DataDir resolves the data directory: --data, else $GPUMESH_HOME, else
// ~/.gpumesh, unless that does not exist and in.ServiceDir can be opened
// (as root where the package is installed), then in.ServiceDir.
func DataDir(in Input) (string, string, error) {
	if in.DataFlag != "" {
		return in.DataFlag, "flag:--data", nil
	}
	if v, ok := in.Env("GPUMESH_HOME"); ok && v != "" {
		return v, "env:GPUMESH_HOME", nil
	}
	isDir := in.IsDir
	if isDir == nil {
		isDir = openableDir
	}
	home := ""
	if in.Home != "" {
		home = filepath.Join(in.Home, ".gpumesh")
	}
	if in.ServiceDir != "" && (home == "" || !isDir(home)) && isDir(in.ServiceDir) {
		return in.ServiceDir, "default:service", nil
	}
	if home == "" {
		return "", "", errors.New("config: no data dir: pass --data or set GPUMESH_HOME (no home directory found)")
	}
	return home, "default", nil
}

// openableDir reports whether path is a directory this process may open
// (a 0700 directory of another user is not).
func openableDir(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	return err == nil && st.IsDir()
}

// LoadConfig builds the effective configuration from in.
func LoadConfig(in Input) (Config, error) {
	if in.Env == nil {
		in.Env = func(string) (string, bool) { return "", false }
	}
	if in.ReadFile == nil {
		in.ReadFile = os.ReadFile
	}
	var c Config
	c.Sources = map[string]string{}
	dir, src, err := DataDir(in)
	if err != nil {
		return c, err
	}
	c.DataDir, c.Sources["data"] = dir, src
	keys := ConfigKeys()
	for _, k := range keys {
		if k.Default != nil {
			if err := k.set(&c, k.Default); err != nil {
				return c, fmt.Errorf("config: default %s: %w", k.Name, err)
			}
		}
		c.Sources[k.Name] = "default"
	}

	fileVals, path, chains, err := readConfigFile(in, dir, src)
	if err != nil {
		return c, err
	}
	c.ConfigFile, c.Chains = path, chains
	for _, k := range keys {
		if v, ok := fileVals[k.Name]; ok {
			if err := apply(&c, k, v, "file:"+path); err != nil {
				return c, err
			}
		}
		if v, ok := in.Env(k.Env()); ok {
			vals := []string{v}
			if k.Repeatable {
				vals = splitList(v)
			}
			if err := apply(&c, k, vals, "env:"+k.Env()); err != nil {
				return c, err
			}
		}
		if v, ok := in.Flags[k.Name]; ok {
			if k.Repeatable {
				v = splitEach(v)
			}
			if err := apply(&c, k, v, "flag:--"+k.Flag()); err != nil {
				return c, err
			}
		}
	}
	c.applyDefaultBootstrap()
	if c.ConnLow > c.ConnHigh {
		return c, fmt.Errorf("config: conn_low (%d) is above conn_high (%d)", c.ConnLow, c.ConnHigh)
	}
	if err := c.checkFloors(); err != nil {
		return c, err
	}
	if _, err := c.ActiveChain(); err != nil {
		return c, err
	}
	// The per-GPU share of job_memory auto needs the GPUs, found later:
	// checked here against one GPU, again when the node starts.
	if _, err := c.JobLimits(hostMemory(in.ReadFile), 1); err != nil {
		return c, err
	}
	return c, nil
}

// checkFloors refuses a price floor above its model's list price: the
// supplier would then quote below the floor it set. A floor for a model
// without a list price has no effect (the model is not sold) and is
// accepted, so that dropping a price is enough to stop selling a model.
func (c Config) checkFloors() error {
	pr := c.Pricer()
	for m, floor := range pr.Floor {
		if list, ok := pr.List[m]; ok && floor > list {
			return fmt.Errorf("config: price_floor for %s (%s) is above its list price (%s)", m, floor, list)
		}
	}
	return nil
}

func apply(c *Config, k Key, vals []string, src string) error {
	if !k.Repeatable && len(vals) != 1 {
		// A repeated single-valued flag: the last one wins, as usual.
		if len(vals) == 0 {
			return fmt.Errorf("config: %s from %s: no value", k.Name, src)
		}
		vals = vals[len(vals)-1:]
	}
	if err := k.set(c, vals); err != nil {
		return fmt.Errorf("config: %s from %s: %w", k.Name, src, err)
	}
	c.Sources[k.Name] = src
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func splitEach(vs []string) []string {
	var out []string
	for _, v := range vs {
		out = append(out, splitList(v)...)
	}
	return out
}

// readConfigFile reads --config, or DATA/config.toml when it exists, into
// string values per key and its [chains.*] tables. Unknown keys and
// wrong types are errors.
func readConfigFile(in Input, dataDir, dataSrc string) (map[string][]string, string, map[string]ChainConfig, error) {
	path, explicit := in.ConfigFlag, in.ConfigFlag != ""
	switch {
	case explicit:
	case dataSrc == "default:service" && in.ServiceConfig != "":
		path = in.ServiceConfig // the service's node: its unit's --config
	default:
		path = filepath.Join(dataDir, "config.toml")
	}
	b, err := in.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return nil, "", nil, nil
		}
		return nil, "", nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	vals, path, err := parseConfigFile(b, path)
	if err != nil {
		return nil, "", nil, err
	}
	chains, err := parseChains(b, path)
	if err != nil {
		return nil, "", nil, err
	}
	return vals, path, chains, nil
}

func parseConfigFile(b []byte, path string) (map[string][]string, string, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		return nil, "", fmt.Errorf("config: parse %s: %w", path, err)
	}
	known := map[string]Key{}
	for _, k := range ConfigKeys() {
		known[k.Name] = k
	}
	out := map[string][]string{}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "chains" {
			if _, ok := raw[k].(map[string]any); !ok {
				return nil, "", fmt.Errorf("config: %s: chains: want [chains.NAME] tables, got %s", path, tomlType(raw[k]))
			}
			continue // the chain tables: parseChains
		}
		key, ok := known[k]
		if !ok {
			return nil, "", fmt.Errorf("config: %s: unknown key %q (known: %s)", path, k, strings.Join(Keys(), ", "))
		}
		vals, err := tomlStrings(raw[k], key)
		if err != nil {
			return nil, "", fmt.Errorf("config: %s: %s: %w", path, k, err)
		}
		out[k] = vals
	}
	return out, path, nil
}

// tomlStrings checks a decoded TOML value against k's kind and writes
// it as the strings k's setter reads: `region = 5` is refused rather than
// read as the region "5".
func tomlStrings(v any, k Key) ([]string, error) {
	scalar := func(x any) (string, error) {
		switch x := x.(type) {
		case string:
			if k.Kind == KindString {
				return x, nil
			}
		case int64:
			if k.Kind == KindInt || k.IntOK {
				return strconv.FormatInt(x, 10), nil
			}
		case bool:
			if k.Kind == KindBool {
				return strconv.FormatBool(x), nil
			}
		}
		return "", fmt.Errorf("want %s, got %s (%v)", [...]string{"a string", "an integer", "true or false"}[k.Kind], tomlType(x), x)
	}
	if !k.Repeatable {
		s, err := scalar(v)
		return []string{s}, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of strings, got %s", tomlType(v))
	}
	out := make([]string, 0, len(arr))
	for _, x := range arr {
		s, err := scalar(x)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// tomlType names the TOML type of a decoded value.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// Setting is one row of `gpumesh config show`.
type Setting struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"`
}

// Settings lists the effective configuration with each value's source:
// the data dir, then every key in the order of ConfigKeys.
func (c Config) Settings() []Setting {
	out := []Setting{{Key: "data", Value: c.DataDir, Source: c.Sources["data"]}}
	for _, k := range ConfigKeys() {
		out = append(out, Setting{Key: k.Name, Value: k.show(c), Source: c.Sources[k.Name]})
	}
	return out
}

// RunningAPI points a client whose API address is the default at the
// address the node running on its data dir wrote there (api.AddrFile:
// what it listens on, e.g. a port the kernel chose for --api
// 127.0.0.1:0), so that --data alone finds that node.
func RunningAPI(cfg *Config) {
	if cfg.Sources["api"] != "default" {
		return
	}
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, api.AddrFile))
	if err != nil {
		return
	}
	if addr := strings.TrimSpace(string(b)); addr != "" && len(addr) < 256 {
		cfg.API, cfg.Sources["api"] = addr, "data dir ("+api.AddrFile+")"
	}
}
