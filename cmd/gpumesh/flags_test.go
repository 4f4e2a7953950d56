package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

// showJSON runs `config show --json` with args and returns its rows by key.
func showJSON(t *testing.T, args ...string) map[string]node.Setting {
	t.Helper()
	code, out, errs := gm(t, append([]string{"config", "show", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("config show %v: exit %d: %s", args, code, errs)
	}
	var rows []node.Setting
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	byKey := map[string]node.Setting{}
	for _, r := range rows {
		byKey[r.Key] = r
	}
	return byKey
}

// TestEveryKeyHasAFlag gives `config show` every key's flag, set to the
// key's default, and checks that each is taken (its source is the flag)
// and reads as the default does.
func TestEveryKeyHasAFlag(t *testing.T) {
	data := t.TempDir()
	args := []string{"--data", data}
	for _, k := range node.ConfigKeys() {
		args = append(args, "--"+k.Flag()+"="+strings.Join(k.Default, ","))
	}
	defaults, flagged := showJSON(t, "--data", data), showJSON(t, args...)
	for _, k := range node.ConfigKeys() {
		d, f := defaults[k.Name], flagged[k.Name]
		if d.Source != "default" || f.Source != "flag:--"+k.Flag() {
			t.Errorf("%s: sources %q and %q, want default and flag:--%s", k.Name, d.Source, f.Source, k.Flag())
		}
		if !reflect.DeepEqual(d.Value, f.Value) {
			t.Errorf("%s: --%s=%s reads as %v, the default as %v", k.Name, k.Flag(), strings.Join(k.Default, ","), f.Value, d.Value)
		}
	}
}

// TestKeyFlagsWhereDocumented: the global keys are flags of every
// command, the others of node and config show only.
func TestKeyFlagsWhereDocumented(t *testing.T) {
	root := newRoot(nil, nil)
	nodeCmd, _, err := root.Find([]string{"node"})
	if err != nil {
		t.Fatal(err)
	}
	version, _, err := root.Find([]string{"version"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range node.ConfigKeys() {
		if nodeCmd.Flag(k.Flag()) == nil {
			t.Errorf("gpumesh node has no --%s", k.Flag())
		}
		if got := version.Flag(k.Flag()) != nil; got != k.Global {
			t.Errorf("gpumesh version has --%s: %v, want %v", k.Flag(), got, k.Global)
		}
	}
}

// TestConfigKeys: `config keys` lists every key once with its flag and
// variable; --markdown prints the README's table.
func TestConfigKeys(t *testing.T) {
	code, out, errs := gm(t, "config", "keys", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []keyInfo
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	keys := node.ConfigKeys()
	if len(rows) != len(keys) {
		t.Fatalf("%d rows for %d keys", len(rows), len(keys))
	}
	for i, k := range keys {
		if r := rows[i]; r.Key != k.Name || r.Flag != "--"+k.Flag() || r.Env != k.Env() || r.Help == "" {
			t.Errorf("row %d = %+v, want key %s", i, r, k.Name)
		}
	}
	if code, out, _ := gm(t, "config", "keys", "--markdown"); code != 0 || out != node.KeysMarkdown() {
		t.Errorf("config keys --markdown: exit %d, printed\n%s", code, out)
	}
}

// TestNoHandWrittenKeyFlags: a flag named as a configuration key is the
// key's, registered from the key table, on every command; `run --runtime`
// (the job's runtime, not the supplier's list) is the one exception.
func TestNoHandWrittenKeyFlags(t *testing.T) {
	own := map[string]bool{"gpumesh run --runtime": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			k, ok := node.LookupKey(f.Name)
			if !ok || k.Flag() != f.Name || own[c.CommandPath()+" --"+f.Name] {
				return
			}
			if v, ok := f.Value.(*keyValue); !ok || v.key.Name != k.Name {
				t.Errorf("%s --%s is written by hand; register it with addKeyFlags", c.CommandPath(), f.Name)
			}
			if f.Usage != k.Usage() {
				t.Errorf("%s --%s: usage %q, want the key's %q", c.CommandPath(), f.Name, f.Usage, k.Usage())
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(nil, nil))
}

// TestRunningAPI: a client command with the default API address finds
// the node running on its data dir at the address the node wrote there;
// an address the user gave, or a data dir with no running node's file,
// is left as it is.
func TestRunningAPI(t *testing.T) {
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, API: "127.0.0.1:7450", Sources: map[string]string{"api": "default"}}
	node.RunningAPI(&cfg)
	if cfg.API != "127.0.0.1:7450" {
		t.Fatalf("no api.addr: API %q", cfg.API)
	}
	if err := os.WriteFile(filepath.Join(dir, api.AddrFile), []byte("127.0.0.1:45313\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node.RunningAPI(&cfg)
	if cfg.API != "127.0.0.1:45313" || cfg.Sources["api"] == "default" {
		t.Fatalf("api.addr not used: API %q from %q", cfg.API, cfg.Sources["api"])
	}
	given := node.Config{DataDir: dir, API: "127.0.0.1:9999", Sources: map[string]string{"api": "flag"}}
	node.RunningAPI(&given)
	if given.API != "127.0.0.1:9999" {
		t.Fatalf("a given --api was replaced by %q", given.API)
	}
}
