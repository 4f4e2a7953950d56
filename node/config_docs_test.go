package node

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateConfigTable = flag.Bool("update-config-table", false, "rewrite docs/suppliers.md's configuration table from the key table")

// The operators' guide's configuration table lies between these markers.
const (
	tableBegin = "<!-- config-table:begin (generated from node/config_keys.go; go test ./node -run ConfigTable -update-config-table) -->\n"
	tableEnd   = "<!-- config-table:end -->\n"
)

// TestDocsConfigTable checks that the operators' guide documents every
// configuration key, once, as the key table does.
func TestDocsConfigTable(t *testing.T) {
	const path = "../docs/suppliers.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	before, rest, ok := strings.Cut(doc, tableBegin)
	table, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s has no configuration table between %q and %q", path, tableBegin, tableEnd)
	}
	want := KeysMarkdown()
	if table == want {
		return
	}
	if *updateConfigTable {
		if err := os.WriteFile(path, []byte(before+tableBegin+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's configuration table is not the key table's; run go test ./node -run ConfigTable -update-config-table, or paste:\n%s", path, want)
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
