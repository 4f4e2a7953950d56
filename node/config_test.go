package node

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// Two valid peer IDs.
const (
	peerA = "12D3KooWMD2urRgmT4JHgTz7XHd2ieUftbDqHFXqXqg1ReTvAktV"
	peerB = "12D3KooWDuAqZNDTsHRcvZpBrvQGNVVtbkwtKYn8xsV6LutyhhGa"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func files(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if v, ok := m[p]; ok {
			return []byte(v), nil
		}
		return nil, fs.ErrNotExist
	}
}

func TestLoadConfigPrecedence(t *testing.T) {
	tests := []struct {
		name    string
		in      Input
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{
			name: "defaults",
			in:   Input{Home: "/home/u"},
			check: func(t *testing.T, c Config) {
				if c.DataDir != "/home/u/.gpumesh" || c.Sources["data"] != "default" {
					t.Errorf("data dir %q from %q", c.DataDir, c.Sources["data"])
				}
				if c.API != "127.0.0.1:7450" || c.GPUs.String() != "auto" || c.HeartbeatInterval != 10*time.Second || len(c.Listen) != 2 {
					t.Errorf("defaults wrong: %+v", c)
				}
				for _, s := range c.Settings() {
					if s.Key != "data" && s.Source != "default" {
						t.Errorf("%s from %s, want default", s.Key, s.Source)
					}
				}
			},
		},
		{
			name: "file < env < flag",
			in: Input{
				Home: "/home/u",
				Env:  env(map[string]string{"GPUMESH_HOME": "/srv/gm", "GPUMESH_REGION": "us-east", "GPUMESH_BOOTSTRAP": "/ip4/1.2.3.4/tcp/1/p2p/" + peerA + ", /ip4/1.2.3.5/tcp/1/p2p/" + peerB, "GPUMESH_GPUS": "none"}),
				ReadFile: files(map[string]string{"/srv/gm/config.toml": `
region = "eu-west"
gpus = "sim:t4:1"
api = "127.0.0.1:9000"
conn_high = 50
listen = ["/ip4/127.0.0.1/tcp/5000"]
`}),
				Flags: map[string][]string{"gpus": {"sim:a10:2"}, "listen": {"/ip4/127.0.0.1/tcp/6000", "/ip4/127.0.0.1/udp/6000/quic-v1"}},
			},
			check: func(t *testing.T, c Config) {
				want := map[string][2]string{
					"data":      {"/srv/gm", "env:GPUMESH_HOME"},
					"region":    {"us-east", "env:GPUMESH_REGION"},
					"gpus":      {"sim:a10:2", "flag:--gpus"},
					"api":       {"127.0.0.1:9000", "file:/srv/gm/config.toml"},
					"bootstrap": {"/ip4/1.2.3.4/tcp/1/p2p/" + peerA + ",/ip4/1.2.3.5/tcp/1/p2p/" + peerB, "env:GPUMESH_BOOTSTRAP"},
					"listen":    {"/ip4/127.0.0.1/tcp/6000,/ip4/127.0.0.1/udp/6000/quic-v1", "flag:--listen"},
					"conn_high": {"50", "file:/srv/gm/config.toml"},
				}
				for _, s := range c.Settings() {
					w, ok := want[s.Key]
					if !ok {
						continue
					}
					got := s.Value
					if l, ok := got.([]string); ok {
						got = strings.Join(l, ",")
					}
					if v := fmt.Sprint(got); v != w[0] || s.Source != w[1] {
						t.Errorf("%s = %q from %q, want %q from %q", s.Key, v, s.Source, w[0], w[1])
					}
				}
			},
		},
		{
			name: "explicit config file and --data",
			in: Input{DataFlag: "/d", ConfigFlag: "/etc/gm.toml", Home: "/h",
				ReadFile: files(map[string]string{"/etc/gm.toml": `heartbeat_interval = "3s"`})},
			check: func(t *testing.T, c Config) {
				if c.DataDir != "/d" || c.HeartbeatInterval != 3*time.Second || c.ConfigFile != "/etc/gm.toml" {
					t.Errorf("got %q %s %q", c.DataDir, c.HeartbeatInterval, c.ConfigFile)
				}
			},
		},
		{name: "missing explicit file", in: Input{Home: "/h", ConfigFlag: "/nope.toml", ReadFile: files(nil)}, wantErr: "read /nope.toml"},
		{name: "unknown key", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `colour = "blue"`})}, wantErr: `unknown key "colour"`},
		{name: "bad toml", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `region = `})}, wantErr: "parse /h/.gpumesh/config.toml"},
		{name: "wrong type", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `listen = "x"`})}, wantErr: "want an array"},
		{name: "region as a number", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `region = 5`})}, wantErr: "region: want a string, got an integer (5)"},
		{name: "conn_low as a string", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `conn_low = "3"`})}, wantErr: "conn_low: want an integer, got a string"},
		{name: "mdns as a string", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `mdns = "yes"`})}, wantErr: "mdns: want true or false, got a string"},
		{name: "zero price", in: Input{Home: "/h", Flags: map[string][]string{"price": {"h100-sxm=0"}}}, wantErr: `"h100-sxm=0": a price must be above zero`},
		{name: "zero floor", in: Input{Home: "/h", Flags: map[string][]string{"price": {"h100-sxm=2"}, "price_floor": {"h100-sxm=0"}}}, wantErr: "a price must be above zero"},
		{name: "floor above list", in: Input{Home: "/h", Flags: map[string][]string{"price": {"h100-sxm=2"}, "price_floor": {"h100-sxm=3"}}}, wantErr: "price_floor for h100-sxm (3.00) is above its list price (2.00)"},
		{name: "no such job user", in: Input{Home: "/h", Flags: map[string][]string{"job_user": {"nosuchuser-gpumesh"}}}, wantErr: `job_user from flag:--job-user: "nosuchuser-gpumesh" is neither a user of this machine nor uid:gid`},
		{name: "bad job uid:gid", in: Input{Home: "/h", Flags: map[string][]string{"job_user": {"65534:x"}}}, wantErr: "is neither a user of this machine nor uid:gid"},
		{name: "job uid above 2^31", in: Input{Home: "/h", Flags: map[string][]string{"job_user": {"4294967294:1"}}}, wantErr: "is neither a user of this machine nor uid:gid"},
		{name: "bad duration env", in: Input{Home: "/h", Env: env(map[string]string{"GPUMESH_HEARTBEAT_INTERVAL": "soon"})}, wantErr: "heartbeat_interval from env:GPUMESH_HEARTBEAT_INTERVAL"},
		{name: "bad log level flag", in: Input{Home: "/h", Flags: map[string][]string{"log_level": {"loud"}}}, wantErr: "log_level from flag:--log-level"},
		{name: "bad region", in: Input{Home: "/h", Flags: map[string][]string{"region": {"eu west"}}}, wantErr: "not a region label"},
		{name: "low above high", in: Input{Home: "/h", Flags: map[string][]string{"conn_low": {"100"}, "conn_high": {"10"}}}, wantErr: "conn_low (100) is above conn_high (10)"},
		{name: "no home", in: Input{}, wantErr: "no data dir"},
		// Addresses, peer IDs and the GPU spec are parsed when loaded.
		{name: "bootstrap without peer ID", in: Input{Home: "/h", Env: env(map[string]string{"GPUMESH_BOOTSTRAP": "/ip4/1.2.3.4/tcp/1"})}, wantErr: "bootstrap from env:GPUMESH_BOOTSTRAP: bootstrap address \"/ip4/1.2.3.4/tcp/1\""},
		{name: "bad listen", in: Input{Home: "/h", Flags: map[string][]string{"listen": {"tcp:4001"}}}, wantErr: `listen from flag:--listen: "tcp:4001" is not a multiaddr`},
		{name: "bad ban", in: Input{Home: "/h", Flags: map[string][]string{"ban": {peerA + ",QmNope"}}}, wantErr: `ban from flag:--ban: "QmNope" is not a peer ID`},
		{name: "bad job dns", in: Input{Home: "/h", Flags: map[string][]string{"job_dns": {"9.9.9.9,resolver"}}}, wantErr: `job_dns from flag:--job-dns: "resolver" is not an IP address`},
		{name: "bad trusted", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `trusted = ["x"]`})}, wantErr: `trusted from file:/h/.gpumesh/config.toml: "x" is not a peer ID`},
		{name: "bad gpus", in: Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": `gpus = "sim:h100:1"`})}, wantErr: `gpus from file:/h/.gpumesh/config.toml: invalid gpu spec "sim:h100:1"`},
		{name: "price twice", in: Input{Home: "/h", Env: env(map[string]string{"GPUMESH_PRICE": "h100-sxm=2,h100-sxm=3"})}, wantErr: "price from env:GPUMESH_PRICE: \"h100-sxm=3\": model h100-sxm priced twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func FuzzParseConfigFile(f *testing.F) {
	f.Add([]byte(`region = "eu-west"` + "\nlisten = [\"/ip4/127.0.0.1/tcp/1\"]"))
	f.Add([]byte(`conn_low = 3`))
	f.Add([]byte(`[table]` + "\nx=1"))
	f.Add([]byte(`gpus = 1.5`))
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, _, err := parseConfigFile(b, "fuzz.toml")
		if err != nil {
			return
		}
		known := map[string]bool{}
		for _, k := range Keys() {
			known[k] = true
		}
		for k := range vals {
			if !known[k] {
				t.Fatalf("unknown key %q accepted", k)
			}
		}
		// Whatever parsed must then either apply cleanly or fail with an error, never panic.
		_, _ = LoadConfig(Input{Home: "/h", ReadFile: func(string) ([]byte, error) { return b, nil }})
	})
}

// TestConfigAcceptsWhatTheWireDoes: the typed TOML values, a job user by
// name or UID:GID, and a floor at the list price all load.
func TestConfigAcceptsWhatTheWireDoes(t *testing.T) {
	toml := "conn_low = 4\nconn_high = 8\nmdns = true\nregion = \"eu-west\"\njob_user = \"65534:65534\"\naudit_interval = 0\njob_disk = 1073741824\n"
	// A floor for a model no longer priced is accepted (it has no effect).
	c, err := LoadConfig(Input{Home: "/h", ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": toml}),
		Flags: map[string][]string{"price": {"h100-sxm=2"}, "price_floor": {"h100-sxm=2", "a100-80gb=1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnLow != 4 || !c.MDNS || c.Region != "eu-west" || c.JobUser != "65534:65534" || c.AuditInterval != 0 || c.JobDisk != 1<<30 {
		t.Fatalf("loaded %+v", c)
	}
	if _, err := LoadConfig(Input{Home: "/h", Flags: map[string][]string{"job_user": {"nobody"}}}); err != nil {
		t.Fatalf("job_user nobody: %v", err)
	}
}

// setKey sets one key of c as a flag would, through the key table.
func setKey(t testing.TB, c *Config, key string, vals ...string) {
	t.Helper()
	k, ok := LookupKey(key)
	if !ok {
		t.Fatalf("no config key %q", key)
	}
	if k.Repeatable {
		vals = splitEach(vals)
	}
	if err := apply(c, k, vals, "flag:--"+k.Flag()); err != nil {
		t.Fatal(err)
	}
}

// keySamples are three valid values of every key, each written as
// `config show` writes it back (lists comma-separated): the file sets the
// first, the environment the second, a flag the third.
var keySamples = map[string][3]string{
	"listen":               {"/ip4/127.0.0.1/tcp/1", "/ip4/127.0.0.1/tcp/2,/ip4/127.0.0.1/udp/2/quic-v1", "/ip4/127.0.0.1/tcp/3"},
	"network":              {"testnet", "lab-1", "mainnet"},
	"no_default_bootstrap": {"true", "false", "true"},
	"bootstrap":            {"/ip4/1.2.3.4/tcp/1/p2p/" + peerA, "/ip4/1.2.3.4/tcp/2/p2p/" + peerB + ",/dnsaddr/boot.example.test", "/ip4/1.2.3.4/tcp/3/p2p/" + peerA + ",/ip4/1.2.3.5/tcp/3/p2p/" + peerB},
	"gpus":                 {"none", "sim:rtx4090:1", "sim:h100-sxm:2,t4:1"},
	"region":               {"eu-west", "us-east", "ap-south"},
	"chain":                {"a", "b", "c"},
	"settle_require":       {"true", "false", "true"},
	"api":                  {"127.0.0.1:1", "127.0.0.1:2", "off"},
	"log_level":            {"debug", "warn", "error"},
	"heartbeat_interval":   {"20s", "30s", "40s"},
	"profile_ttl":          {"2h0m0s", "3h0m0s", "4h0m0s"},
	"bootstrap_timeout":    {"20s", "30s", "40s"},
	"conn_low":             {"2", "3", "4"},
	"conn_high":            {"100", "200", "300"},
	"ban":                  {peerA, peerB, peerA + "," + peerB},
	"pricing":              {"auction", "dynamic", "fixed"},
	"price":                {"h100-sxm=2.10", "rtx4090=0.45", "a100-80gb=1.20,h100-sxm=2.00"},
	"price_floor":          {"h100-sxm=1.00", "rtx4090=0.20", "a100-80gb=0.50"},
	"ask_ttl":              {"20s", "30s", "40s"},
	"trusted":              {peerA, peerB, peerB + "," + peerA},
	"audit_interval":       {"off", "20s", "30s"},
	"sim_cheat":            {"slow=3", "replay", "skip=0.5,wrong=0.1"},
	"runtime":              {"docker", "podman", "process,docker"},
	"job_user":             {"65534:65534", "1:1", "2:2"},
	"halt_grace":           {"20s", "30s", "40s"},
	"max_lease":            {"2h0m0s", "3h0m0s", "4h0m0s"},
	"claim_window":         {"20s", "30s", "40s"},
	"unsandboxed_jobs":     {"true", "false", "true"},
	"mdns":                 {"true", "false", "true"},
	"reachability":         {"public", "private", "auto"},
	"job_network":          {"false", "true", "false"},
	"job_network_warm":     {"4", "0", "8"},
	"job_lan":              {"true", "false", "true"},
	"job_dns":              {"9.9.9.9", "1.1.1.1,8.8.8.8", "2001:4860:4860::8888"},
	"job_memory":           {"1GiB", "2GiB", "3GiB"},
	"job_memory_max":       {"4GiB", "8GiB", "16GiB"},
	"job_procs":            {"100", "200", "300"},
	"job_procs_max":        {"20000", "30000", "40000"},
	"job_disk":             {"1GiB", "2GiB", "3GiB"},
	"job_disk_max":         {"60GiB", "70GiB", "80GiB"},
	"job_open_files":       {"100", "200", "300"},
	"job_open_files_max":   {"70000", "80000", "90000"},
}

// tomlLine writes key = value in TOML as k's kind wants it.
func tomlLine(k Key, value string) string {
	quote := func(s string) string {
		if k.Kind == KindString {
			return strconv.Quote(s)
		}
		return s
	}
	if !k.Repeatable {
		return k.Name + " = " + quote(value) + "\n"
	}
	var items []string
	for _, v := range strings.Split(value, ",") {
		items = append(items, quote(v))
	}
	return k.Name + " = [" + strings.Join(items, ", ") + "]\n"
}

// sampleChains are the chain tables the samples of chain and
// settle_require name.
var sampleChains = func() string {
	var b strings.Builder
	for _, n := range []string{"a", "b", "c"} {
		fmt.Fprintf(&b, "[chains.%s]\nrpc = \"http://127.0.0.1:8545\"\nchain_id = 1337\ncontract = \"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"\ntoken = \"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"\nkey_file = \"k.json\"\n", n)
	}
	return b.String()
}()

// TestEveryKeyFromEverySource sets every key from the file, then the
// environment, then a flag, and checks that each later source wins, with
// the value it gave and its name as the source.
func TestEveryKeyFromEverySource(t *testing.T) {
	const path = "/h/.gpumesh/config.toml"
	for _, k := range ConfigKeys() {
		t.Run(k.Name, func(t *testing.T) {
			s, ok := keySamples[k.Name]
			if !ok {
				t.Fatalf("no samples for key %s: add three to keySamples", k.Name)
			}
			content := tomlLine(k, s[0])
			switch k.Name {
			case "settle_require":
				content += "chain = \"a\"\n" + sampleChains
			case "chain":
				content += sampleChains
			}
			file := files(map[string]string{path: content})
			envs := env(map[string]string{k.Env(): s[1]})
			flags := map[string][]string{k.Name: strings.Split(s[2], ",")}
			if !k.Repeatable {
				flags[k.Name] = []string{s[2]}
			}
			for _, tt := range []struct {
				in        Input
				want, src string
			}{
				{Input{Home: "/h", ReadFile: file}, s[0], "file:" + path},
				{Input{Home: "/h", ReadFile: file, Env: envs}, s[1], "env:" + k.Env()},
				{Input{Home: "/h", ReadFile: file, Env: envs, Flags: flags}, s[2], "flag:--" + k.Flag()},
			} {
				c, err := LoadConfig(tt.in)
				if err != nil {
					t.Fatalf("from %s: %v", tt.src, err)
				}
				got, src := shown(t, c, k.Name)
				if got != tt.want || src != tt.src {
					t.Errorf("%s = %q from %q, want %q from %q", k.Name, got, src, tt.want, tt.src)
				}
			}
		})
	}
	for name := range keySamples {
		if _, ok := LookupKey(name); !ok {
			t.Errorf("keySamples has %s, which is no key", name)
		}
	}
}

// shown is a key's value and source as `config show` prints them.
func shown(t *testing.T, c Config, key string) (value, source string) {
	t.Helper()
	for _, s := range c.Settings() {
		if s.Key == key {
			if l, ok := s.Value.([]string); ok {
				return strings.Join(l, ","), s.Source
			}
			return fmt.Sprint(s.Value), s.Source
		}
	}
	t.Fatalf("config show has no %s", key)
	return "", ""
}

// TestConfigHoldsParsedValues: what LoadConfig returns is parsed once,
// into the types the node uses.
func TestConfigHoldsParsedValues(t *testing.T) {
	c, err := LoadConfig(Input{Home: "/h",
		Env: env(map[string]string{"GPUMESH_BOOTSTRAP": "/ip4/1.2.3.4/tcp/1/p2p/" + peerA + ",/ip4/1.2.3.4/udp/1/quic-v1/p2p/" + peerA + ",/ip4/1.2.3.5/tcp/1/p2p/" + peerB}),
		Flags: map[string][]string{"log_level": {"debug"}, "pricing": {"Auction"}, "price": {"h100-sxm=2.10,rtx4090=0.45"}, "price_floor": {"h100-sxm=1.5"},
			"gpus": {"sim:h100-sxm:2,rtx4090:1"}, "trusted": {peerB}, "ban": {peerA}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Bootstrap) != 2 || c.Bootstrap[0].ID.String() != peerA || len(c.Bootstrap[0].Addrs) != 2 || c.Bootstrap[1].ID.String() != peerB {
		t.Errorf("bootstrap = %v, want %s with two addrs, then %s", c.Bootstrap, peerA, peerB)
	}
	if c.LogLevel != slog.LevelDebug || c.Pricing != market.Auction {
		t.Errorf("log level %v, pricing %q", c.LogLevel, c.Pricing)
	}
	pr := c.Pricer()
	if pr.Mode != market.Auction || pr.List["h100-sxm"] != 2_100_000 || pr.List["rtx4090"] != 450_000 || len(pr.List) != 2 || pr.Floor["h100-sxm"] != 1_500_000 || len(pr.Floor) != 1 {
		t.Errorf("pricer = %+v", pr)
	}
	if c.GPUs.Mode != inventory.ModeSim || len(c.GPUs.Sim) != 2 || c.GPUs.Sim[0] != (inventory.SimSpec{Model: "h100-sxm", Count: 2}) {
		t.Errorf("gpus = %+v", c.GPUs)
	}
	if len(c.Trusted) != 1 || c.Trusted[0].String() != peerB || len(c.Ban) != 1 || c.Ban[0].String() != peerA {
		t.Errorf("trusted %v, ban %v", c.Trusted, c.Ban)
	}
	// The pricer is a copy: a strategy's changes do not reach the config.
	pr.List["l40s"] = 1
	if _, ok := c.Prices["l40s"]; ok {
		t.Error("Pricer shares its price map with the config")
	}
}

// TestDataDirService: the service's data dir is the default only where
// ~/.gpumesh does not exist and it can be opened (root on a machine with
// the package); flags and $GPUMESH_HOME still win.
func TestDataDirService(t *testing.T) {
	dirs := func(ds ...string) func(string) bool {
		return func(p string) bool { return slices.Contains(ds, p) }
	}
	for _, c := range []struct {
		name     string
		in       Input
		dir, src string
	}{
		{"service dir present", Input{Home: "/root", ServiceDir: "/var/lib/gpumesh", IsDir: dirs("/var/lib/gpumesh")}, "/var/lib/gpumesh", "default:service"},
		{"no home", Input{ServiceDir: "/var/lib/gpumesh", IsDir: dirs("/var/lib/gpumesh")}, "/var/lib/gpumesh", "default:service"},
		{"home dir wins", Input{Home: "/root", ServiceDir: "/var/lib/gpumesh", IsDir: dirs("/var/lib/gpumesh", "/root/.gpumesh")}, "/root/.gpumesh", "default"},
		{"service dir closed", Input{Home: "/home/u", ServiceDir: "/var/lib/gpumesh", IsDir: dirs()}, "/home/u/.gpumesh", "default"},
		{"no service dir", Input{Home: "/home/u", IsDir: dirs("/var/lib/gpumesh")}, "/home/u/.gpumesh", "default"},
		{"env wins", Input{Home: "/root", ServiceDir: "/var/lib/gpumesh", IsDir: dirs("/var/lib/gpumesh"),
			Env: func(k string) (string, bool) { return "/srv/gm", k == "GPUMESH_HOME" }}, "/srv/gm", "env:GPUMESH_HOME"},
		{"flag wins", Input{DataFlag: "/d", ServiceDir: "/var/lib/gpumesh", IsDir: dirs("/var/lib/gpumesh")}, "/d", "flag:--data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.in.Env == nil {
				c.in.Env = func(string) (string, bool) { return "", false }
			}
			dir, src, err := DataDir(c.in)
			if err != nil || dir != c.dir || src != c.src {
				t.Fatalf("got %q from %q (%v), want %q from %q", dir, src, err, c.dir, c.src)
			}
		})
	}
	// With the service's data dir comes the service's config file.
	in := Input{Home: "/root", ServiceDir: "/var/lib/gpumesh", ServiceConfig: "/etc/gpumesh/config.toml", IsDir: dirs("/var/lib/gpumesh"),
		ReadFile: files(map[string]string{"/etc/gpumesh/config.toml": `region = "eu-west"`, "/var/lib/gpumesh/config.toml": `region = "us-east"`})}
	c, err := LoadConfig(in)
	if err != nil || c.Region != "eu-west" || c.ConfigFile != "/etc/gpumesh/config.toml" {
		t.Fatalf("service config: region %q from %q (%v), want eu-west from /etc/gpumesh/config.toml", c.Region, c.ConfigFile, err)
	}
	in.IsDir = dirs("/var/lib/gpumesh", "/root/.gpumesh")
	if c, err := LoadConfig(in); err != nil || c.ConfigFile != "" {
		t.Fatalf("with ~/.gpumesh: config %q (%v), want none", c.ConfigFile, err)
	}
	// The real check: a directory this process opens, not a file.
	d := t.TempDir()
	f := filepath.Join(d, "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !openableDir(d) || openableDir(f) || openableDir(filepath.Join(d, "missing")) {
		t.Fatal("openableDir: want true for a directory only")
	}
}
