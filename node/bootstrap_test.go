package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/doctor"
	"github.com/gpumesh/gpumesh/p2p"
)

// fakeResolver answers /dnsaddr lookups from a table, and records what
// it was asked: tests never reach real DNS.
type fakeResolver struct {
	mu      sync.Mutex
	records map[string][]string // dnsaddr name -> multiaddrs
	asked   []string
}

func (f *fakeResolver) Resolve(_ context.Context, a ma.Multiaddr) ([]ma.Multiaddr, error) {
	name, err := a.ValueForProtocol(ma.P_DNSADDR)
	if err != nil {
		return []ma.Multiaddr{a}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, name)
	recs, ok := f.records[name]
	if !ok {
		return nil, errors.New("NXDOMAIN (fake)")
	}
	// As madns does: with /p2p/ID, keep only the records of that peer.
	id, _ := a.ValueForProtocol(ma.P_P2P)
	var out []ma.Multiaddr
	for _, r := range recs {
		m := ma.StringCast(r)
		if id != "" {
			if rid, _ := m.ValueForProtocol(ma.P_P2P); rid != id {
				continue
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func (f *fakeResolver) lookups() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// TestDefaultBootstrapParses: the built-in list parses, and every entry
// is a /dnsaddr or names its peer.
func TestDefaultBootstrapParses(t *testing.T) {
	peers, dns, err := ParseBootstrapList(DefaultBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers)+len(dns) != len(DefaultBootstrap) || len(DefaultBootstrap) == 0 {
		t.Fatalf("%d peers and %d /dnsaddr entries from %d defaults", len(peers), len(dns), len(DefaultBootstrap))
	}
}

// TestDefaultBootstrapOnlyWhenNothingConfigured: the built-in list is
// the bootstrap list of a mainnet node that names none, and of no other.
func TestDefaultBootstrapOnlyWhenNothingConfigured(t *testing.T) {
	load := func(flags map[string][]string, file string, envs map[string]string) Config {
		t.Helper()
		c, err := LoadConfig(Input{Home: "/h", Flags: flags, Env: env(envs),
			ReadFile: files(map[string]string{"/h/.gpumesh/config.toml": file})})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := load(nil, "", nil)
	if !c.DefaultBootstrap || c.Network != "mainnet" || len(c.BootstrapDNS) == 0 || !strings.Contains(c.BootstrapList(), "built-in mainnet list") {
		t.Fatalf("a mainnet node that names no bootstrap: default %v, network %q, %d dnsaddr, list %q", c.DefaultBootstrap, c.Network, len(c.BootstrapDNS), c.BootstrapList())
	}
	if v, _ := shown(t, c, "bootstrap"); v != strings.Join(DefaultBootstrap, ",") {
		t.Errorf("config show bootstrap = %q, want the built-in list", v)
	}
	for _, tt := range []struct {
		name  string
		flags map[string][]string
		file  string
		env   map[string]string
	}{
		{"another network", map[string][]string{"network": {"testnet"}}, "", nil},
		{"another network from the environment", nil, "", map[string]string{"GPUMESH_NETWORK": "lab-1"}},
		{"--no-default-bootstrap", map[string][]string{"no_default_bootstrap": {"true"}}, "", nil},
		{"bootstrap = [] in the file", nil, "bootstrap = []\n", nil},
		{"a bootstrap flag", map[string][]string{"bootstrap": {"/ip4/127.0.0.1/tcp/1/p2p/" + peerA}}, "", nil},
		{"a /dnsaddr bootstrap", map[string][]string{"bootstrap": {"/dnsaddr/boot.example.test"}}, "", nil},
	} {
		c := load(tt.flags, tt.file, tt.env)
		if c.DefaultBootstrap {
			t.Errorf("%s: the built-in list is used", tt.name)
		}
		for _, d := range c.BootstrapDNS {
			if strings.Contains(d.String(), "gpumesh.invalid") {
				t.Errorf("%s: bootstrap has the built-in entry %s", tt.name, d)
			}
		}
	}
	if c := load(map[string][]string{"no_default_bootstrap": {"true"}}, "", nil); !strings.HasPrefix(c.BootstrapList(), "none") {
		t.Errorf("first node's list = %q", c.BootstrapList())
	}
}

func TestNetworkKeyIsValidated(t *testing.T) {
	for _, bad := range []string{"", "Main", "a b", "x/y", strings.Repeat("n", 33)} {
		_, err := LoadConfig(Input{Home: "/h", Flags: map[string][]string{"network": {bad}}})
		if err == nil {
			t.Errorf("network %q accepted", bad)
		}
	}
}

func TestParseBootstrapList(t *testing.T) {
	peers, dns, err := ParseBootstrapList([]string{
		"/ip4/127.0.0.1/tcp/1/p2p/" + peerA,
		"/dnsaddr/boot.example.test",
		"/dnsaddr/boot.example.test/p2p/" + peerB,
		"/ip4/127.0.0.1/udp/1/quic-v1/p2p/" + peerA,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 1 || len(peers[0].Addrs) != 2 || len(dns) != 2 {
		t.Fatalf("peers %v, dnsaddr %v", peers, dns)
	}
	for _, bad := range []string{"/ip4/127.0.0.1/tcp/1", "/dns4/boot.example.test/tcp/1", "not a multiaddr", "/dnsaddr"} {
		if _, _, err := ParseBootstrapList([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestResolveBootstrap(t *testing.T) {
	r := &fakeResolver{records: map[string][]string{
		"boot.example.test": {
			"/dnsaddr/deeper.example.test",
			"/ip4/127.0.0.1/tcp/4001/p2p/" + peerA,
			"/ip4/127.0.0.1/tcp/4002", // no peer: ignored
		},
		"deeper.example.test": {"/ip4/127.0.0.2/tcp/4001/p2p/" + peerB, "/ip4/127.0.0.2/udp/4001/quic-v1/p2p/" + peerB},
		"loop.example.test":   {"/dnsaddr/loop.example.test"},
		"empty.example.test":  {"/ip4/127.0.0.1/tcp/1"},
	}}
	ctx := context.Background()
	given, err := ParseBootstrap([]string{"/ip4/127.0.0.9/tcp/1/p2p/" + peerA})
	if err != nil {
		t.Fatal(err)
	}
	_, dns, _ := ParseBootstrapList([]string{"/dnsaddr/boot.example.test"})
	got, err := ResolveBootstrap(ctx, r, given, dns)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID.String() != peerA || len(got[0].Addrs) != 2 || got[1].ID.String() != peerB || len(got[1].Addrs) != 2 {
		t.Fatalf("resolved %v", got)
	}
	// With /p2p/ID: only that peer's records.
	_, dns, _ = ParseBootstrapList([]string{"/dnsaddr/deeper.example.test/p2p/" + peerB})
	if got, err := ResolveBootstrap(ctx, r, nil, dns); err != nil || len(got) != 1 || got[0].ID.String() != peerB {
		t.Fatalf("resolved %v, %v", got, err)
	}
	for _, bad := range []string{"/dnsaddr/nx.example.test", "/dnsaddr/loop.example.test", "/dnsaddr/empty.example.test"} {
		_, dns, _ := ParseBootstrapList([]string{bad})
		if got, err := ResolveBootstrap(ctx, r, nil, dns); err == nil {
			t.Errorf("%s resolved to %v", bad, got)
		}
	}
	// The placeholder domain is never looked up.
	before := len(r.lookups())
	_, dns, _ = ParseBootstrapList(DefaultBootstrap)
	if _, err := ResolveBootstrap(ctx, r, nil, dns); err == nil || !strings.Contains(err.Error(), ".invalid") {
		t.Fatalf("the placeholder list: %v", err)
	}
	if asked := r.lookups()[before:]; len(asked) != 0 {
		t.Fatalf("the resolver was asked %v for the placeholder list", asked)
	}
}

// TestLightBootstrap: a light client on the default list is told that
// it names no peer yet; one given a /dnsaddr gets what it resolves to.
func TestLightBootstrap(t *testing.T) {
	c, err := LoadConfig(Input{Home: "/h"})
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeResolver{}
	if _, err := LightBootstrap(context.Background(), c, r); !errors.Is(err, ErrDefaultBootstrapUnavailable) {
		t.Fatalf("light client on the default list: %v", err)
	}
	c, err = LoadConfig(Input{Home: "/h", Flags: map[string][]string{"bootstrap": {"/dnsaddr/boot.example.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	r.records = map[string][]string{"boot.example.test": {"/ip4/127.0.0.1/tcp/4001/p2p/" + peerA}}
	got, err := LightBootstrap(context.Background(), c, r)
	if err != nil || len(got) != 1 || got[0].ID.String() != peerA {
		t.Fatalf("light bootstrap %v, %v", got, err)
	}
}

// TestNodeJoinsThroughDNSAddr: a node whose bootstrap is a /dnsaddr entry
// resolves it through the injected resolver and joins the peer it names;
// doctor's network check shows the list. A mainnet node on the built-in
// list starts alone, saying so.
func TestNodeJoinsThroughDNSAddr(t *testing.T) {
	first := startNode(t, testConfig(t, t.TempDir(), "none", "eu-west", nil))
	var recs []string
	for _, a := range first.Addrs() {
		recs = append(recs, a.String())
	}
	r := &fakeResolver{records: map[string][]string{"boot.example.test": recs}}
	cfg := testConfig(t, t.TempDir(), "none", "eu-west", []string{"/dnsaddr/boot.example.test"})
	n := startNode(t, cfg, WithResolver(r))
	if got := n.bootstrapIDs(); len(got) != 1 || got[0] != first.ID() {
		t.Fatalf("bootstrap peers %v, want [%s]", got, first.ID())
	}
	if got := r.lookups(); len(got) != 1 || got[0] != "boot.example.test" {
		t.Fatalf("lookups %v", got)
	}
	rep := n.Doctor(context.Background())
	c, ok := rep.Check(doctor.CheckNetwork)
	if !ok || c.Status != api.StatusOK || !strings.Contains(c.Detail, "mainnet; bootstrap: configured (1 entry)") {
		t.Fatalf("network check %+v", c)
	}

	// The built-in list: no lookup, the node starts alone.
	def := testConfig(t, t.TempDir(), "none", "eu-west", nil)
	var err error
	def.Bootstrap, def.BootstrapDNS, err = ParseBootstrapList(DefaultBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	def.Sources["bootstrap"] = "default"
	if def.applyDefaultBootstrap(); !def.DefaultBootstrap {
		t.Fatal("default list not applied")
	}
	alone := startNode(t, def, WithResolver(r))
	if len(alone.bootstrapIDs()) != 0 {
		t.Fatalf("bootstrap peers %v from the placeholder list", alone.bootstrapIDs())
	}
	if got := r.lookups(); len(got) != 1 {
		t.Fatalf("the resolver was asked %v", got)
	}
	c, _ = alone.Doctor(context.Background()).Check(doctor.CheckNetwork)
	if !strings.Contains(c.Detail, "built-in mainnet list") {
		t.Fatalf("network check %+v", c)
	}
}

// TestNodeOnAnotherNetworkIsRefused: a node of network lab-1 given a
// mainnet node as its bootstrap peer fails to start, naming both.
func TestNodeOnAnotherNetworkIsRefused(t *testing.T) {
	first := startNode(t, testConfig(t, t.TempDir(), "none", "eu-west", nil))
	cfg := testConfig(t, t.TempDir(), "none", "eu-west", bootstrapOf(first))
	cfg.Network = "lab-1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := New(ctx, cfg, WithLogger(quiet()))
	if err == nil {
		n.Close()
		t.Fatal("a lab-1 node joined the mainnet")
	}
	if !errors.Is(err, p2p.ErrWrongNetwork) || !strings.Contains(err.Error(), "network mainnet") || !strings.Contains(err.Error(), "lab-1") {
		t.Fatalf("start: %v, want p2p.ErrWrongNetwork naming both networks", err)
	}
}
