package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const simReport = `# Market simulation

Machine: 2 cores, linux, go1.26.8; load average 0.39 0.13 0.76 before, 2.27 2.17 1.91 after; 2026-12-03.

| figure | 100 nodes, seed 1 | 100 nodes, seed 2 | 1000 nodes | goal | pass/short |
|---|---|---|---|---|---|
| requests (seed, slots × slot) | 298 (seed 1, 30 × 1m0s) | 301 (seed 2, 30 × 1m0s) | 539 (seed 1, 6 × 1m0s) |  |  |
| filled by the central matcher | 208 (69.8%) | 210 (69.8%) | 480 (89.1%) |  |  |
| utilisation of honest GPUs, market / central | 80.1% / 81.0% | 80.0% / 80.2% | 90.2% / 91.0% |  |  |
| fill ratio, market / central | 0.995 | 0.991 | 0.948 | ≥ 0.95 | short |
| gossip messages per node per simulated s | 0.87 | 0.88 | 2.45 |  |  |
| gossip delivery p50 / p99 | 61ms / 332ms | 60ms / 300ms | 11.619s / 30.001s |  |  |
| wall time | 1m56s | 1m50s | 23m2s |  |  |
`

// TestCarriedRows: the simulation's fill ratio is carried per size and
// judged against 0.95, with its report and date; the chaos verdict is
// carried as it is; a missing report is a short row, not a silent gap.
func TestCarriedRows(t *testing.T) {
	dir := t.TempDir()
	sim, chaos := filepath.Join(dir, "SIM.md"), filepath.Join(dir, "CHAOS.md")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(sim, simReport)
	write(chaos, "# Chaos run\n\nMachine: 2 cores; commit d6bdf03; 2026-12-02T02:36:00Z.\n\n**Every check held.**\n")
	rows := carriedRows(sim, chaos)
	byFigure := map[string]Row{}
	for _, r := range rows {
		byFigure[r.Figure] = r
	}
	for _, c := range []struct {
		figure, value, verdict string
	}{
		{"fill ratio, market / central, 100 nodes, seed 1 (" + sim + ", make sim, 2026-12-03; the report names no commit and is not committed)", "0.995", "pass"},
		{"fill ratio, market / central, 100 nodes, seed 2 (" + sim + ", make sim, 2026-12-03; the report names no commit and is not committed)", "0.991", "pass"},
		{"utilisation of honest GPUs, market / central, 1000 nodes (" + sim + ", make sim, 2026-12-03; the report names no commit and is not committed)", "90.2% / 91.0%", "—"},
		{"fill ratio, market / central, 1000 nodes (" + sim + ", make sim, 2026-12-03; the report names no commit and is not committed)", "0.948", "short"},
		{"gossip delivery p50 / p99, 1000 nodes (" + sim + ", make sim, 2026-12-03; the report names no commit and is not committed)", "11.619s / 30.001s", "—"},
	} {
		r, ok := byFigure[c.figure]
		if !ok {
			t.Errorf("no row %q among %v", c.figure, rows)
			continue
		}
		if r.Value != c.value || r.verdict() != c.verdict {
			t.Errorf("%s: %q %s, want %q %s", c.figure, r.Value, r.verdict(), c.value, c.verdict)
		}
	}
	last := rows[len(rows)-1]
	if last.Value != "every check held" || last.verdict() != "pass" || !strings.Contains(last.Figure, "2026-12-02; commit d6bdf03)") {
		t.Errorf("chaos row %+v, want every check held, pass, dated 2026-12-02 at commit d6bdf03", last)
	}

	write(chaos, "# Chaos run\n\n2026-12-02\n\n**2 check(s) failed:**\n\n- lost a receipt\n")
	if r := chaosRow(chaos); r.Value != "a check failed: 2 check(s) failed:" || r.verdict() != "short" {
		t.Errorf("failed chaos run carried as %q %s", r.Value, r.verdict())
	}
	rows = carriedRows(filepath.Join(dir, "none.md"), filepath.Join(dir, "none.md"))
	if len(rows) != 2 || rows[0].verdict() != "short" || rows[1].verdict() != "short" {
		t.Errorf("missing reports carried as %+v, want two short rows", rows)
	}
}

// TestCarriedRowsFromCommittedReports: the reports committed in bench/
// parse, so a change to their format cannot drop their rows from
// bench/RESULTS.md unnoticed.
func TestCarriedRowsFromCommittedReports(t *testing.T) {
	sim := filepath.Join("..", "..", "..", "bench", "SIM.md")
	b, err := os.ReadFile(sim)
	if err != nil {
		t.Fatal(err)
	}
	header, _ := markdownTable(b)
	runs := len(header) - 3 // figure, then a column a run, then goal and pass/short
	rows := carriedRows(sim, filepath.Join("..", "..", "..", "bench", "CHAOS.md"))
	if runs < 2 || len(rows) != runs*len(simFigures)+1 {
		t.Fatalf("%d rows from the committed reports, want %d (each figure of each of the %d runs, and the chaos verdict): %+v", len(rows), runs*len(simFigures)+1, runs, rows)
	}
	for _, r := range rows {
		if strings.HasPrefix(r.Value, "no report") || r.Value == "not in the report" || strings.Contains(r.Figure, "date unknown") {
			t.Errorf("row %q: %q", r.Figure, r.Value)
		}
	}
}

// TestCarryInto: the carried rows of a table written earlier are
// replaced by the reports' rows as they are now, every measured row and
// note stays as it was, and carrying again changes nothing.
func TestCarryInto(t *testing.T) {
	dir := t.TempDir()
	sim, chaos, results := filepath.Join(dir, "SIM.md"), filepath.Join(dir, "CHAOS.md"), filepath.Join(dir, "RESULTS.md")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(sim, strings.Replace(simReport, "| 0.995 | 0.991 | 0.948 |", "| 0.990 | 0.991 | 0.931 |", 1))
	write(chaos, "# Chaos run\n\n2026-12-02\n\n**Every check held.**\n")
	measured := Row{Figure: "cold search p50", Value: "34.2 ms", Baseline: "8.43 ms connect + ping", Ratio: 4.06, Goal: "≤ 5×", Met: met(true)}
	if err := writeMarkdown(results, Machine{Cores: 2, Commit: "abc1234"}, append([]Row{measured}, carriedRows(sim, chaos)...),
		[]string{"Each cold search found 24 offers.", carriedNote(sim, chaos)}); err != nil {
		t.Fatal(err)
	}
	write(sim, simReport) // a new make sim
	if err := carryInto(results, sim, chaos); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(results)
	for _, want := range []string{measured.line(), "| 0.948 |", "| 0.995 |", "every check held", "- Each cold search found 24 offers.",
		"commit abc1234, not an ancestor of the commit this table was written at",
		"; 16 of the 17 rows have none (an empty baseline cell)"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("after carrying, the table lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"0.931", "0.990"} {
		if strings.Contains(string(got), gone) {
			t.Errorf("after carrying, the table still has the old figure %s:\n%s", gone, got)
		}
	}
	if n := strings.Count(string(got), "The rows naming"); n != 1 {
		t.Errorf("%d notes on the carried rows, want 1:\n%s", n, got)
	}
	if err := carryInto(results, sim, chaos); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(results); string(again) != string(got) {
		t.Errorf("carrying twice changed the table:\n%s\nthen\n%s", got, again)
	}
	if err := carryInto(filepath.Join(dir, "none.md"), sim, chaos); err == nil {
		t.Error("carrying into a table that does not exist: no error")
	}
}

// TestRefreshAges: every commit named gets how many commits before HEAD
// it is, recounted (not added again) when the table is written again.
func TestRefreshAges(t *testing.T) {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	head := strings.TrimSpace(string(out))
	in := "Machine: 2 cores; commit " + head + "; started today.\n| chaos (CHAOS.md, make chaos, 2026-12-02; commit 0000000, 12 commits before this table was written) |\n"
	want := "Machine: 2 cores; commit " + head + ", 0 commits before this table was written; started today.\n" +
		"| chaos (CHAOS.md, make chaos, 2026-12-02; commit 0000000, not an ancestor of the commit this table was written at) |\n"
	got := refreshAges(in)
	if got != want {
		t.Errorf("refreshAges:\n%s\nwant\n%s", got, want)
	}
	if again := refreshAges(got); again != got {
		t.Errorf("refreshAges twice:\n%s\nwant it unchanged:\n%s", again, got)
	}
}
