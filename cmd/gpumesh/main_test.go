package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/api"
)

// gm runs the CLI in-process with a clean environment and returns its exit
// status and output.
func gm(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	for _, k := range []string{"GPUMESH_HOME", "GPUMESH_BOOTSTRAP", "GPUMESH_GPUS", "GPUMESH_REGION", "GPUMESH_API"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitStatusAndErrors(t *testing.T) {
	data := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string
	}{
		{"malformed filter", []string{"search", "--data", data, "vram>>80"}, 2, `"vram>>80"`},
		{"unknown filter key", []string{"search", "--data", data, "colour=red"}, 2, `unknown key "colour"`},
		{"unknown model", []string{"search", "--data", data, "model=h100"}, 2, `h100`},
		{"no bootstrap", []string{"search", "--data", data}, 1, "no bootstrap peers: pass --bootstrap"},
		{"bad bootstrap", []string{"search", "--data", data, "--bootstrap", "/ip4/127.0.0.1/tcp/1"}, 2, "must end in /p2p/PEERID"},
		{"unknown flag", []string{"gpus", "--colour"}, 2, "unknown flag"},
		{"bad gpus spec", []string{"gpus", "--data", data, "--gpus", "sim:h100:1"}, 2, "h100"},
		{"bad region", []string{"config", "show", "--data", data, "--region", "eu west"}, 2, "not a region label"},
		{"peers without node", []string{"peers", "--data", data, "--api", "127.0.0.1:1"}, 1, "is `gpumesh node` running"},
		{"unknown completion shell", []string{"completion", "foo"}, 2, `unknown subcommand "foo"`},
		{"unknown config subcommand", []string{"config", "nope"}, 2, `unknown subcommand "nope"`},
		{"zero price", []string{"config", "show", "--data", data, "--price", "h100-sxm=0"}, 2, "a price must be above zero"},
		{"floor above price", []string{"config", "show", "--data", data, "--price", "h100-sxm=2", "--price-floor", "h100-sxm=3"}, 2, "above its list price"},
		{"no such job user", []string{"config", "show", "--data", data, "--job-user", "nosuchuser-gpumesh"}, 2, "is neither a user of this machine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := gm(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.inStderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.inStderr)
			}
		})
	}
}

func TestGPUsJSONContract(t *testing.T) {
	code, out, stderr := gm(t, "gpus", "--data", t.TempDir(), "--gpus", "sim:h100-sxm:2,rtx4090:1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var gpus []map[string]any
	if err := json.Unmarshal([]byte(out), &gpus); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(gpus) != 3 {
		t.Fatalf("%d gpus, want 3", len(gpus))
	}
	for _, k := range []string{"model", "vram_gib", "simulated", "uuid", "name", "compute_capability"} {
		if _, ok := gpus[0][k]; !ok {
			t.Errorf("gpus --json lacks %q", k)
		}
	}
	if gpus[0]["model"] != "h100-sxm" || gpus[0]["vram_gib"] != float64(80) || gpus[0]["simulated"] != true || gpus[2]["model"] != "rtx4090" {
		t.Fatalf("unexpected gpus: %v", gpus)
	}
	// With no GPUs, an empty array, never null.
	_, out, _ = gm(t, "gpus", "--data", t.TempDir(), "--gpus", "none", "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Fatalf("gpus --gpus none --json = %q, want []", out)
	}
}

func TestIDIsStable(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	_, first, _ := gm(t, "id", "--data", data)
	_, second, _ := gm(t, "id", "--data", data, "--json")
	var got struct {
		PeerID  string `json:"peer_id"`
		Created bool   `json:"created"`
	}
	if err := json.Unmarshal([]byte(second), &got); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(first) != got.PeerID || got.Created || !strings.HasPrefix(got.PeerID, "12D3KooW") {
		t.Fatalf("first %q, second %+v", first, got)
	}
}

func TestConfigShowSources(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "config.toml"), []byte("region = \"ap-south\"\nheartbeat_interval = \"3s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUMESH_GPUS", "sim:t4:1")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"config", "show", "--data", data, "--heartbeat-interval", "4s", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var settings []struct {
		Key    string `json:"key"`
		Value  any    `json:"value"`
		Source string `json:"source"`
	}
	if err := json.Unmarshal(out.Bytes(), &settings); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"region":             {"ap-south", "file:" + filepath.Join(data, "config.toml")},
		"heartbeat_interval": {"4s", "flag:--heartbeat-interval"},
		"gpus":               {"sim:t4:1", "env:GPUMESH_GPUS"},
		"api":                {"127.0.0.1:7450", "default"},
	}
	for _, s := range settings {
		if w, ok := want[s.Key]; ok && (s.Value != w[0] || s.Source != w[1]) {
			t.Errorf("%s = %v from %s, want %s from %s", s.Key, s.Value, s.Source, w[0], w[1])
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range []string{"node", "id", "gpus", "config", "search", "peers", "version", "doctor"} {
		code, out, _ := gm(t, c, "--help")
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("%s --help: exit %d, output %q", c, code, out)
		}
	}
}

func TestRentUsageErrors(t *testing.T) {
	data := t.TempDir()
	bs := "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWHmt23bKc9UXdqMffuWYaw355movJao7eAc4E33iQe8EK"
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string
	}{
		{"no max price", []string{"rent", "--data", data, "model=h100-sxm", "--bootstrap", bs}, 2, "--max-price is required"},
		{"bad max price", []string{"rent", "--data", data, "--max-price", "cheap", "--bootstrap", bs}, 2, `--max-price "cheap"`},
		{"zero count", []string{"rent", "--data", data, "--max-price", "2", "--count", "0", "--bootstrap", bs}, 2, "--count 0"},
		{"too short", []string{"rent", "--data", data, "--max-price", "2", "--hours", "0.001", "--bootstrap", bs}, 2, "--hours 0.001"},
		{"bad filter", []string{"rent", "--data", data, "--max-price", "2", "vram>>80", "--bootstrap", bs}, 2, `"vram>>80"`},
		{"no bootstrap", []string{"rent", "--data", data, "--max-price", "2"}, 1, "no bootstrap peers: pass --bootstrap"},
		{"orders bad filter", []string{"orders", "--data", data, "colour=red"}, 2, `unknown key "colour"`},
		{"bad price flag", []string{"config", "show", "--data", data, "--price", "h100=2"}, 2, `unknown model "h100"`},
		{"bad pricing", []string{"config", "show", "--data", data, "--pricing", "haggle"}, 2, "haggle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := gm(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.inStderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.inStderr)
			}
		})
	}
}

func TestJobCommandsUsageErrors(t *testing.T) {
	data := t.TempDir()
	withToken := t.TempDir()
	if _, err := api.EnsureToken(withToken); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string
	}{
		{"run without a command", []string{"run", "--data", data, "--max-price", "1"}, 2, "give the command to run after --"},
		{"run without a price", []string{"run", "--data", data, "--", "true"}, 2, "--max-price is required"},
		{"run with a bad filter", []string{"run", "--data", data, "vram>>2", "--max-price", "1", "--", "true"}, 2, "vram>>2"},
		{"run with a bad restart", []string{"run", "--data", data, "--max-price", "1", "--restart", "always", "--", "true"}, 2, "restart"},
		{"run with a bad env", []string{"run", "--data", data, "--max-price", "1", "--env", "NOEQUALS", "--", "true"}, 2, "NAME=VALUE"},
		{"run with a missing file", []string{"run", "--data", data, "--max-price", "1", "--file", "/no/such", "--", "true"}, 2, "--file"},
		{"run without a node", []string{"run", "--data", data, "--max-price", "1", "--", "true"}, 1, "start `gpumesh node`"},
		{"jobs without a node", []string{"jobs", "--data", data}, 1, "start `gpumesh node`"},
		{"run on a lease with a price", []string{"run", "--data", data, "--lease", "abcd", "--max-price", "1", "--", "true"}, 2, "leave out the filter, max_price"},
		{"run on a lease without a node", []string{"run", "--data", data, "--lease", "abcd", "--", "true"}, 1, "start `gpumesh node`"},
		{"release needs a lease", []string{"release", "--data", data}, 2, "accepts 1 arg"},
		{"release of a lease not kept", []string{"release", "--data", data, "abcd"}, 1, "lease abcd: none of this renter's"},
		{"logs needs a job", []string{"logs", "--data", data}, 2, "accepts 1 arg"},
		{"receipts without a node", []string{"receipts", "--data", data}, 1, "start `gpumesh node`"},
		{"jobs with a token but no node", []string{"jobs", "--data", withToken, "--api", "127.0.0.1:1"}, 1, "is `gpumesh node` running"},
		{"stop with a token but no node", []string{"stop", "--data", withToken, "--api", "127.0.0.1:1", "abcd"}, 1, "cannot reach the node's API at 127.0.0.1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := gm(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.inStderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.inStderr)
			}
		})
	}
}

// TestJobHint: an error of the node's job API says what to do next, by
// its status.
func TestJobHint(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{401, "pass the --data of the node"},
		{404, "`gpumesh jobs` lists"},
		{503, "try again in a moment"},
		{502, ""},
	}
	for _, tt := range tests {
		e := &api.Error{Method: "GET", Path: api.PathJobs, Status: tt.status, Message: "m"}
		got := jobHint(e)
		if !errors.Is(got, e) {
			t.Errorf("%d: the hint %v does not wrap the error", tt.status, got)
		}
		if tt.want == "" && got != error(e) || tt.want != "" && !strings.Contains(got.Error(), tt.want) {
			t.Errorf("%d: %v, want %q", tt.status, got, tt.want)
		}
	}
}
