package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const simReport = `# Market simulation

Machine: 2 cores, linux, go1.26.8; load average 0.39 0.13 0.76 before, 2.27 2.17 1.91 after; 2026-12-03.

| figure | 100 nodes | 1000 nodes | goal | pass/short |
|---|---|---|---|---|
| requests (seed, slots × slot) | 298 (seed 1, 30 × 1m0s) | 539 (seed 1, 6 × 1m0s) |  |  |
| fill ratio, market / central | 0.995 | 0.948 | ≥ 0.95 | short |
| gossip messages per node per simulated s | 0.87 | 2.45 |  |  |
| gossip delivery p50 / p99 | 61ms / 332ms | 11.619s / 30.001s |  |  |
| wall time | 1m56s | 23m2s |  |  |
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
	write(chaos, "# Chaos run\n\nMachine: 2 cores; 2026-12-02T02:36:00Z.\n\n**Every check held.**\n")
	rows := carriedRows(sim, chaos)
	byFigure := map[string]Row{}
	for _, r := range rows {
		byFigure[r.Figure] = r
	}
	for _, c := range []struct {
		figure, value, verdict string
	}{
		{"fill ratio, market / central, 100 nodes (" + sim + ", make sim, 2026-12-03)", "0.995", "pass"},
		{"fill ratio, market / central, 1000 nodes (" + sim + ", make sim, 2026-12-03)", "0.948", "short"},
		{"gossip delivery p50 / p99, 1000 nodes (" + sim + ", make sim, 2026-12-03)", "11.619s / 30.001s", "—"},
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
	if last.Value != "every check held" || last.verdict() != "pass" || !strings.Contains(last.Figure, "2026-12-02") {
		t.Errorf("chaos row %+v, want every check held, pass, dated 2026-12-02", last)
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
	rows := carriedRows(filepath.Join("..", "..", "..", "bench", "SIM.md"), filepath.Join("..", "..", "..", "bench", "CHAOS.md"))
	if len(rows) != 2*len(simFigures)+1 {
		t.Fatalf("%d rows from the committed reports, want %d (each figure at 100 and 1000 nodes, and the chaos verdict): %+v", len(rows), 2*len(simFigures)+1, rows)
	}
	for _, r := range rows {
		if strings.HasPrefix(r.Value, "no report") || r.Value == "not in the report" || strings.Contains(r.Figure, "date unknown") {
			t.Errorf("row %q: %q", r.Figure, r.Value)
		}
	}
}
