package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ratesLog is the log of a run of TestDetectionRates, GPUMESH_TRIALS=3.
const ratesLog = `=== RUN   TestDetectionRates
    rates_test.go:100: honest     0 of 3 failed (0.0%), 2.667s a challenge
    rates_test.go:92: slow=2: failed: challenge: took 4.261044606s, allowed 3.347912027s: slower than the claimed device allows
    rates_test.go:100: slow=2     3 of 3 failed (100.0%), 14.681s a challenge
    rates_test.go:100: skip=0.1   3 of 3 failed (100.0%), 2.724s a challenge
    rates_test.go:100: wrong=0.1  3 of 3 failed (100.0%), 2.397s a challenge
    rates_test.go:100: mem=0.8    3 of 3 failed (100.0%), 10.55s a challenge
    rates_test.go:92: replay: failed: GPU GPU-sim-a: challenge: row 172: opened row differs from the recomputed row
    rates_test.go:100: replay     2 of 3 failed (66.7%), 1.939s a challenge
--- PASS: TestDetectionRates (107.58s)
PASS
`

// TestParseRates: the honest case is judged against no false alarm, and
// each cheat's catch rate stands beside it, in the log's order.
func TestParseRates(t *testing.T) {
	rows, err := parseRates([]byte(ratesLog))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6: %+v", len(rows), rows)
	}
	if r := rows[0]; !strings.HasPrefix(r.Figure, "challenge false alarms: an honest supplier failed") || r.Value != "0 of 3 (0.0%); 2.67 s a challenge" || r.verdict() != "pass" || r.Baseline != "" {
		t.Errorf("honest row %+v", r)
	}
	for i, want := range []string{"slow=2 (every phase", "skip=0.1", "wrong=0.1", "mem=0.8", "replay (every challenge"} {
		r := rows[i+1]
		if !strings.HasPrefix(r.Figure, "challenge catch rate: cheat "+want) || r.Baseline != "0 of 3 (0.0%) honest false alarms" || r.verdict() != "—" {
			t.Errorf("row %d: %+v, want cheat %s beside the honest false alarms", i+1, r, want)
		}
	}
	if got := rows[5].Value; got != "2 of 3 (66.7%); 1.94 s a challenge" {
		t.Errorf("replay: %q", got)
	}
	if _, err := parseRates([]byte("--- SKIP: TestDetectionRates\n")); err == nil {
		t.Error("a log without rates parsed")
	}
	honestFailing := strings.Replace(ratesLog, "honest     0 of 3", "honest     1 of 3", 1)
	if rows, err := parseRates([]byte(honestFailing)); err != nil || rows[0].verdict() != "short" {
		t.Errorf("an honest supplier failing once: %v, %+v; want short", err, rows)
	}
}

// TestRatesInto: the detection rows of a table are replaced by new ones,
// dated, and the header counts the rows without a baseline anew.
func TestRatesInto(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	measured := Row{Figure: "cold search p50", Value: "34.2 ms", Baseline: "8.43 ms connect + ping", Ratio: 4.06, Goal: "≤ 5×", Met: met(true)}
	old := Row{Figure: "challenge false alarms: old", Value: "9 of 9", Goal: "none", Met: met(false)}
	if err := writeMarkdown(path, Machine{Cores: 2, Commit: "abc1234"}, []Row{measured, old}, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := parseRates([]byte(ratesLog))
	if err != nil {
		t.Fatal(err)
	}
	if err := ratesInto(path, Machine{Started: "2026-12-04T18:00:00Z", LoadBefore: "1.00 1.00 1.00", LoadAfter: "2.00 2.00 2.00", Commit: "abc1234"}, rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	for _, want := range []string{measured.line(), "| challenge false alarms: an honest supplier failed", "(bench -rates-only, 2026-12-04, load average 1.00 1.00 1.00 before, 2.00 2.00 2.00 after; commit abc1234, not an ancestor", "; 1 of the 7 rows have none"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "9 of 9") {
		t.Errorf("the old detection row stayed:\n%s", got)
	}
}

// TestParseGas: TestGasPerOperation's log makes one row per operation,
// each beside the transfer it compares with; a log without baselines is
// an error, not a table of zeros.
func TestParseGas(t *testing.T) {
	log := []byte(`=== RUN   TestGasPerOperation
    channel_test.go:278: gas baseline: ERC-20 transfer (new holder)  146588
    channel_test.go:279: gas baseline: ERC-20 transfer (holder)       48668
    channel_test.go:291: gas deposit (first, without approve)    265923
    channel_test.go:291: gas redeem (later, same lease)           87984
--- PASS: TestGasPerOperation (0.36s)
`)
	rows, err := parseGas(log)
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	if rows[0].Value != "265923 gas" || !strings.Contains(rows[0].Baseline, "new holder") || rows[0].Ratio < 1.8 || rows[0].Ratio > 1.82 {
		t.Errorf("deposit row %+v", rows[0])
	}
	if !strings.Contains(rows[1].Baseline, "48668 gas ERC-20 transfer (holder)") {
		t.Errorf("redeem row %+v", rows[1])
	}
	if _, err := parseGas([]byte("gas redeem 5\n")); err == nil {
		t.Error("a log without baselines parsed")
	}
}
