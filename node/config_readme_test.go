package node

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite README.md's configuration table from the key table")

// The README's configuration table lies between these markers.
const (
	tableBegin = "<!-- config-table:begin (generated from node/config_keys.go; go test ./node -run README -update-readme) -->\n"
	tableEnd   = "<!-- config-table:end -->\n"
)

// TestREADMEConfigTable checks that the README documents every
// configuration key, once, as the key table does.
func TestREADMEConfigTable(t *testing.T) {
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	before, rest, ok := strings.Cut(readme, tableBegin)
	table, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s has no configuration table between %q and %q", path, tableBegin, tableEnd)
	}
	want := KeysMarkdown()
	if table == want {
		return
	}
	if *updateREADME {
		if err := os.WriteFile(path, []byte(before+tableBegin+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's configuration table is not the key table's; run go test ./node -run README -update-readme, or paste:\n%s", path, want)
}

// TestKeysMarkdownListsEveryKeyOnce: one row per key, in table order.
func TestKeysMarkdownListsEveryKeyOnce(t *testing.T) {
	rows := strings.Split(strings.TrimSuffix(KeysMarkdown(), "\n"), "\n")[2:]
	keys := ConfigKeys()
	if len(rows) != len(keys) {
		t.Fatalf("%d rows for %d keys", len(rows), len(keys))
	}
	seen := map[string]bool{}
	for i, k := range keys {
		if seen[k.Name] {
			t.Errorf("key %s listed twice in the key table", k.Name)
		}
		seen[k.Name] = true
		if !strings.HasPrefix(rows[i], "| `"+k.Name+"` | `--"+k.Flag()+"`") || !strings.Contains(rows[i], "`"+k.Env()+"`") {
			t.Errorf("row %d is %q, want key %s, its flag and its variable", i, rows[i], k.Name)
		}
	}
}
