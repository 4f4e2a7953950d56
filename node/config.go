package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// Config is a node's effective configuration. It is built from, in
// increasing precedence: built-in defaults, the TOML config file,
// GPUMESH_* environment variables, and command-line flags.
type Config struct {
	// DataDir holds the identity key, the store and the config file.
	DataDir string
	// ConfigFile is the TOML file that was read, if any.
	ConfigFile string

	Listen            []string      // multiaddrs to listen on
	Bootstrap         []string      // multiaddrs (with /p2p/ID) to join through
	GPUs              string        // auto | none | sim:MODEL:COUNT[,...]
	Region            string        // region label advertised in the profile
	API               string        // host:port of the local HTTP API, or "off"
	LogLevel          string        // debug | info | warn | error
	HeartbeatInterval time.Duration // how often a heartbeat is gossiped
	ProfileTTL        time.Duration // lifetime of a published profile
	ConnLow, ConnHigh int           // connection manager watermarks
	Ban               []string      // peer IDs refused by the gater
	BootstrapTimeout  time.Duration // how long to try bootstrap peers
	MDNS              bool          // find peers on the LAN by multicast DNS
	Pricing           string        // fixed | auction | dynamic
	Prices            []string      // list prices, MODEL=AMOUNT per GPU-hour
	PriceFloors       []string      // floors, MODEL=AMOUNT (default half the list price)
	AskTTL            time.Duration // lifetime of a posted ask; renewed at half
	Trusted           []string      // peer IDs whose attestations are pre-trusted
	AuditInterval     time.Duration // mean time between this node's challenges of others; 0 = none
	SimCheat          string        // testnets only: make this node an impostor (slow=F, skip=F, ...)
	Runtimes          []string      // job runtimes a supplier offers: process, docker, podman
	JobUser           string        // user that jobs run as ("": the node's own)
	HaltGrace         time.Duration // how long a job waits, paused, for an unpaid renter
	UnsandboxedJobs   bool          // a node without user namespaces may run jobs unhidden
	MaxLease          time.Duration // longest lease the supplier grants
	ClaimWindow       time.Duration // most a lease with no job started on it is held
	// Per-job limits a supplier applies: the default for what a spec
	// leaves at 0, and the most a spec may ask. JobMemory and
	// JobMemoryMax are 0 for auto (see JobLimits).
	JobMemory, JobMemoryMax       int64
	JobProcs, JobProcsMax         int64
	JobDisk, JobDiskMax           int64
	JobOpenFiles, JobOpenFilesMax int64

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
	// Flags holds the flags the user set explicitly, by config key, each
	// with its values in order (repeatable flags have several).
	Flags map[string][]string
	// ReadFile reads the config file; os.ReadFile when nil.
	ReadFile func(string) ([]byte, error)
}

// field is one configuration key: its TOML name (also the flag name with
// "_" as "-", and the env name upper-cased after "GPUMESH_"), its default,
// and how to set it from strings.
type field struct {
	key  string
	def  []string
	list bool
	// ints: besides strings, the TOML file may give an integer (a size
	// in bytes, "0" for off), which is read as its decimal string.
	ints bool
	set  func(c *Config, v []string) error
}

func fields() []field {
	str := func(p func(*Config) *string) func(*Config, []string) error {
		return func(c *Config, v []string) error { *p(c) = v[0]; return nil }
	}
	list := func(p func(*Config) *[]string) func(*Config, []string) error {
		return func(c *Config, v []string) error { *p(c) = v; return nil }
	}
	dur := func(p func(*Config) *time.Duration) func(*Config, []string) error {
		return func(c *Config, v []string) error {
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 {
				return fmt.Errorf("%q is not a positive duration (e.g. 10s, 5m)", v[0])
			}
			*p(c) = d
			return nil
		}
	}
	num := func(p func(*Config) *int) func(*Config, []string) error {
		return func(c *Config, v []string) error {
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a positive integer", v[0])
			}
			*p(c) = n
			return nil
		}
	}
	return append([]field{
		{key: "listen", list: true, def: []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"}, set: list(func(c *Config) *[]string { return &c.Listen })},
		{key: "bootstrap", list: true, def: nil, set: list(func(c *Config) *[]string { return &c.Bootstrap })},
		{key: "gpus", def: []string{"auto"}, set: str(func(c *Config) *string { return &c.GPUs })},
		{key: "region", def: []string{"unknown"}, set: func(c *Config, v []string) error {
			if !validRegion(v[0]) {
				return fmt.Errorf("%q is not a region label (letters, digits, '-', '_', at most 32)", v[0])
			}
			c.Region = v[0]
			return nil
		}},
		{key: "api", def: []string{"127.0.0.1:7450"}, set: str(func(c *Config) *string { return &c.API })},
		{key: "log_level", def: []string{"info"}, set: func(c *Config, v []string) error {
			if _, err := ParseLogLevel(v[0]); err != nil {
				return err
			}
			c.LogLevel = v[0]
			return nil
		}},
		{key: "heartbeat_interval", def: []string{"10s"}, set: dur(func(c *Config) *time.Duration { return &c.HeartbeatInterval })},
		{key: "profile_ttl", def: []string{"1h"}, set: func(c *Config, v []string) error {
			d, err := time.ParseDuration(v[0])
			if err != nil || d < time.Minute || d > p2p.MaxProfileLifetime {
				return fmt.Errorf("%q is not a duration between 1m and %s", v[0], p2p.MaxProfileLifetime)
			}
			c.ProfileTTL = d
			return nil
		}},
		{key: "bootstrap_timeout", def: []string{"10s"}, set: dur(func(c *Config) *time.Duration { return &c.BootstrapTimeout })},
		{key: "conn_low", def: []string{"32"}, set: num(func(c *Config) *int { return &c.ConnLow })},
		{key: "conn_high", def: []string{"96"}, set: num(func(c *Config) *int { return &c.ConnHigh })},
		{key: "ban", list: true, def: nil, set: list(func(c *Config) *[]string { return &c.Ban })},
		{key: "pricing", def: []string{"fixed"}, set: func(c *Config, v []string) error {
			if _, err := market.ParsePricingMode(v[0]); err != nil {
				return err
			}
			c.Pricing = v[0]
			return nil
		}},
		{key: "price", list: true, def: nil, set: modelPrices(func(c *Config) *[]string { return &c.Prices })},
		{key: "price_floor", list: true, def: nil, set: modelPrices(func(c *Config) *[]string { return &c.PriceFloors })},
		{key: "ask_ttl", def: []string{"10m"}, set: func(c *Config, v []string) error {
			d, err := time.ParseDuration(v[0])
			if err != nil || d < 10*time.Second || d > market.MaxOrderLifetime {
				return fmt.Errorf("%q is not a duration between 10s and %s", v[0], market.MaxOrderLifetime)
			}
			c.AskTTL = d
			return nil
		}},
		{key: "trusted", list: true, def: nil, set: func(c *Config, v []string) error {
			for _, s := range v {
				if _, err := peer.Decode(s); err != nil {
					return fmt.Errorf("%q is not a peer ID", s)
				}
			}
			c.Trusted = v
			return nil
		}},
		{key: "audit_interval", def: []string{"10m"}, ints: true, set: func(c *Config, v []string) error {
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
		}},
		{key: "sim_cheat", def: []string{""}, set: func(c *Config, v []string) error {
			if _, err := challenge.ParseCheat(v[0]); err != nil {
				return err
			}
			c.SimCheat = v[0]
			return nil
		}},
		{key: "runtime", list: true, def: []string{"process"}, set: func(c *Config, v []string) error {
			for _, r := range v {
				if r != "process" && r != "docker" && r != "podman" {
					return fmt.Errorf("%q is not a job runtime: want process, docker or podman", r)
				}
			}
			c.Runtimes = v
			return nil
		}},
		{key: "job_user", def: []string{""}, set: func(c *Config, v []string) error {
			if err := runtime.CheckUser(v[0]); err != nil {
				return err
			}
			c.JobUser = v[0]
			return nil
		}},
		{key: "halt_grace", def: []string{"2m"}, set: func(c *Config, v []string) error {
			d, err := time.ParseDuration(v[0])
			if err != nil || d < time.Second {
				return fmt.Errorf("%q is not a duration of 1s or more", v[0])
			}
			c.HaltGrace = d
			return nil
		}},
		{key: "max_lease", def: []string{"24h"}, set: func(c *Config, v []string) error {
			d, err := time.ParseDuration(v[0])
			if err != nil || d < market.MinDuration || d > market.MaxDuration {
				return fmt.Errorf("%q is not a duration between %s and %s", v[0], market.MinDuration, market.MaxDuration)
			}
			c.MaxLease = d
			return nil
		}},
		{key: "claim_window", def: []string{"60s"}, set: func(c *Config, v []string) error {
			d, err := time.ParseDuration(v[0])
			if err != nil || d < time.Second || d > time.Hour {
				return fmt.Errorf("%q is not a duration between 1s and 1h", v[0])
			}
			c.ClaimWindow = d
			return nil
		}},
		{key: "unsandboxed_jobs", def: []string{"false"}, set: boolKey(func(c *Config) *bool { return &c.UnsandboxedJobs })},
		{key: "mdns", def: []string{"false"}, set: boolKey(func(c *Config) *bool { return &c.MDNS })},
	}, jobLimitFields()...)
}

// boolKey sets a boolean key.
func boolKey(field func(*Config) *bool) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return fmt.Errorf("%q is not true or false", v[0])
		}
		*field(c) = b
		return nil
	}
}

// modelPrices validates a list of MODEL=AMOUNT prices.
func modelPrices(p func(*Config) *[]string) func(*Config, []string) error {
	return func(c *Config, v []string) error {
		seen := map[string]bool{}
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
			if seen[m] {
				return fmt.Errorf("%q: model %s priced twice", s, m)
			}
			seen[m] = true
		}
		*p(c) = v
		return nil
	}
}

func auditString(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return d.String()
}

// Pricer is the pricing strategy the configuration describes.
func (c Config) Pricer() (market.Pricer, error) {
	mode, err := market.ParsePricingMode(c.Pricing)
	if err != nil {
		return market.Pricer{}, err
	}
	pr := market.Pricer{Mode: mode, List: map[string]money.Micros{}, Floor: map[string]money.Micros{}}
	for _, l := range []struct {
		in  []string
		out map[string]money.Micros
	}{{c.Prices, pr.List}, {c.PriceFloors, pr.Floor}} {
		for _, s := range l.in {
			m, micros, err := market.ParseModelPrice(s)
			if err != nil {
				return pr, err
			}
			l.out[m] = micros
		}
	}
	return pr, nil
}

// Keys lists the configuration keys in their canonical order.
func Keys() []string {
	var ks []string
	for _, f := range fields() {
		ks = append(ks, f.key)
	}
	return ks
}

// EnvName is the environment variable of a config key.
func EnvName(key string) string { return "GPUMESH_" + strings.ToUpper(key) }

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

// DataDir resolves the data directory: --data, else $GPUMESH_HOME, else
// ~/.gpumesh.
func DataDir(in Input) (string, string, error) {
	if in.DataFlag != "" {
		return in.DataFlag, "flag:--data", nil
	}
	if v, ok := in.Env("GPUMESH_HOME"); ok && v != "" {
		return v, "env:GPUMESH_HOME", nil
	}
	if in.Home == "" {
		return "", "", errors.New("config: no data dir: pass --data or set GPUMESH_HOME (no home directory found)")
	}
	return filepath.Join(in.Home, ".gpumesh"), "default", nil
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
	fs := fields()
	for _, f := range fs {
		if f.def != nil {
			if err := f.set(&c, f.def); err != nil {
				return c, fmt.Errorf("config: default %s: %w", f.key, err)
			}
		}
		c.Sources[f.key] = "default"
	}

	fileVals, path, err := readConfigFile(in, dir)
	if err != nil {
		return c, err
	}
	c.ConfigFile = path
	for _, f := range fs {
		if v, ok := fileVals[f.key]; ok {
			if err := apply(&c, f, v, "file:"+path); err != nil {
				return c, err
			}
		}
		if v, ok := in.Env(EnvName(f.key)); ok {
			vals := []string{v}
			if f.list {
				vals = splitList(v)
			}
			if err := apply(&c, f, vals, "env:"+EnvName(f.key)); err != nil {
				return c, err
			}
		}
		if v, ok := in.Flags[f.key]; ok {
			if f.list {
				v = splitEach(v)
			}
			if err := apply(&c, f, v, "flag:--"+strings.ReplaceAll(f.key, "_", "-")); err != nil {
				return c, err
			}
		}
	}
	if c.ConnLow > c.ConnHigh {
		return c, fmt.Errorf("config: conn_low (%d) is above conn_high (%d)", c.ConnLow, c.ConnHigh)
	}
	if err := c.checkFloors(); err != nil {
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
	pr, err := c.Pricer()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for m, floor := range pr.Floor {
		if list, ok := pr.List[m]; ok && floor > list {
			return fmt.Errorf("config: price_floor for %s (%s) is above its list price (%s)", m, floor, list)
		}
	}
	return nil
}

func apply(c *Config, f field, vals []string, src string) error {
	if !f.list && len(vals) != 1 {
		// A repeated single-valued flag: the last one wins, as usual.
		if len(vals) == 0 {
			return fmt.Errorf("config: %s from %s: no value", f.key, src)
		}
		vals = vals[len(vals)-1:]
	}
	if err := f.set(c, vals); err != nil {
		return fmt.Errorf("config: %s from %s: %w", f.key, src, err)
	}
	c.Sources[f.key] = src
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
// string values per key. Unknown keys and wrong types are errors.
func readConfigFile(in Input, dataDir string) (map[string][]string, string, error) {
	path, explicit := in.ConfigFlag, in.ConfigFlag != ""
	if !explicit {
		path = filepath.Join(dataDir, "config.toml")
	}
	b, err := in.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("config: read %s: %w", path, err)
	}
	return parseConfigFile(b, path)
}

func parseConfigFile(b []byte, path string) (map[string][]string, string, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		return nil, "", fmt.Errorf("config: parse %s: %w", path, err)
	}
	known := map[string]field{}
	for _, f := range fields() {
		known[f.key] = f
	}
	out := map[string][]string{}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := known[k]
		if !ok {
			return nil, "", fmt.Errorf("config: %s: unknown key %q (known: %s)", path, k, strings.Join(Keys(), ", "))
		}
		vals, err := tomlStrings(raw[k], f.list, f.kind(), f.ints)
		if err != nil {
			return nil, "", fmt.Errorf("config: %s: %s: %w", path, k, err)
		}
		out[k] = vals
	}
	return out, path, nil
}

// tomlKind is the TOML type a key's values must have.
type tomlKind int

const (
	tomlString tomlKind = iota
	tomlInt
	tomlBool
)

// kind is the TOML type of f's values, from its default: a key whose
// default is an integer takes integers, true/false booleans, anything
// else strings (durations and prices included), so that `region = 5`
// is refused rather than read as the region "5".
func (f field) kind() tomlKind {
	if len(f.def) != 1 {
		return tomlString
	}
	if f.def[0] == "true" || f.def[0] == "false" {
		return tomlBool
	}
	if _, err := strconv.ParseInt(f.def[0], 10, 64); err == nil {
		return tomlInt
	}
	return tomlString
}

func tomlStrings(v any, list bool, kind tomlKind, ints bool) ([]string, error) {
	scalar := func(x any) (string, error) {
		switch x := x.(type) {
		case string:
			if kind == tomlString {
				return x, nil
			}
		case int64:
			if kind == tomlInt || ints {
				return strconv.FormatInt(x, 10), nil
			}
		case bool:
			if kind == tomlBool {
				return strconv.FormatBool(x), nil
			}
		}
		return "", fmt.Errorf("want %s, got %s (%v)", [...]string{"a string", "an integer", "true or false"}[kind], tomlType(x), x)
	}
	if !list {
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

// ParseLogLevel maps a level name to a slog.Level.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not a log level (debug, info, warn, error)", s)
	}
	return l, nil
}

// Setting is one row of `gpumesh config show`.
type Setting struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"`
}

// Settings lists the effective configuration with each value's source.
func (c Config) Settings() []Setting {
	vals := map[string]any{
		"listen": c.Listen, "bootstrap": c.Bootstrap, "gpus": c.GPUs, "region": c.Region,
		"api": c.API, "log_level": c.LogLevel, "heartbeat_interval": c.HeartbeatInterval.String(),
		"profile_ttl": c.ProfileTTL.String(), "bootstrap_timeout": c.BootstrapTimeout.String(),
		"conn_low": c.ConnLow, "conn_high": c.ConnHigh, "ban": c.Ban, "mdns": c.MDNS,
		"pricing": c.Pricing, "price": c.Prices, "price_floor": c.PriceFloors, "ask_ttl": c.AskTTL.String(),
		"trusted": c.Trusted, "audit_interval": auditString(c.AuditInterval), "sim_cheat": c.SimCheat,
		"runtime": c.Runtimes, "job_user": c.JobUser, "halt_grace": c.HaltGrace.String(), "unsandboxed_jobs": c.UnsandboxedJobs,
		"max_lease": c.MaxLease.String(), "claim_window": c.ClaimWindow.String(),
	}
	for k, v := range c.jobLimitSettings() {
		vals[k] = v
	}
	out := []Setting{{Key: "data", Value: c.DataDir, Source: c.Sources["data"]}}
	for _, k := range Keys() {
		v := vals[k]
		if l, ok := v.([]string); ok && l == nil {
			v = []string{}
		}
		out = append(out, Setting{Key: k, Value: v, Source: c.Sources[k]})
	}
	return out
}
