package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The challenge's detection figures: verify/audit's TestDetectionRates
// challenges a simulated T4 over real libp2p streams, trials times per
// case, honest and under each cheat, while ten other processes keep the
// machine's CPU busy as a testnet's nodes would. The honest case's false
// alarms are the catch rates' baseline, measured in the same run.

// cheatMeaning says what each cheat of the test does (challenge.Cheat).
var cheatMeaning = map[string]string{
	"slow=2":    "every phase twice as slow as the claimed GPU",
	"skip=0.1":  "a tenth of the rows not computed",
	"wrong=0.1": "a tenth of the rows corrupted",
	"mem=0.8":   "80% of the memory-proof buffers kept",
	"replay":    "every challenge answered with the first one's results, so the first is answered honestly",
}

// rateLine is one case's line of TestDetectionRates's log.
var rateLine = regexp.MustCompile(`:\s(\S+)\s+(\d+) of (\d+) failed \([\d.]+%\), (\S+) a challenge`)

// detectionRows runs TestDetectionRates with trials per case and returns
// its rows.
func detectionRows(trials int) ([]Row, error) {
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestDetectionRates$", "-v", "-timeout", "90m", "./verify/audit/")
	cmd.Env = append(os.Environ(), fmt.Sprintf("GPUMESH_TRIALS=%d", trials))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("detection rates (GPUMESH_TRIALS=%d go test -run TestDetectionRates ./verify/audit/): %w: %s", trials, err, out)
	}
	return parseRates(out)
}

// parseRates makes rows of TestDetectionRates's log: the honest case's
// false alarms, judged against none, and each cheat's catch rate beside
// them.
func parseRates(log []byte) ([]Row, error) {
	type rate struct {
		name           string
		failed, trials int
		perChallenge   string
	}
	var rates []rate
	var honest *rate
	for _, m := range rateLine.FindAllStringSubmatch(string(log), -1) {
		failed, _ := strconv.Atoi(m[2])
		trials, _ := strconv.Atoi(m[3])
		per := m[4]
		if d, err := time.ParseDuration(per); err == nil {
			per = fmt.Sprintf("%.2f s", d.Seconds())
		}
		rates = append(rates, rate{name: m[1], failed: failed, trials: trials, perChallenge: per})
		if m[1] == "honest" {
			honest = &rates[len(rates)-1]
		}
	}
	if honest == nil || len(rates) < 2 {
		return nil, fmt.Errorf("detection rates: the test's log has no honest case and cheats:\n%s", log)
	}
	share := func(r rate) string {
		return fmt.Sprintf("%d of %d (%.1f%%)", r.failed, r.trials, 100*float64(r.failed)/float64(r.trials))
	}
	where := func(r rate) string {
		return fmt.Sprintf("a simulated T4 over libp2p beside ten busy processes, %d challenges (verify/audit TestDetectionRates)", r.trials)
	}
	rows := []Row{{
		Figure: "challenge false alarms: an honest supplier failed, " + where(*honest),
		Value:  share(*honest) + "; " + honest.perChallenge + " a challenge",
		Goal:   "none", Met: met(honest.failed == 0),
	}}
	for _, r := range rates {
		if r.name == "honest" {
			continue
		}
		what := r.name
		if m, ok := cheatMeaning[r.name]; ok {
			what += " (" + m + ")"
		}
		rows = append(rows, Row{
			Figure:   "challenge catch rate: cheat " + what + " failed, " + where(r),
			Value:    share(r) + "; " + r.perChallenge + " a challenge",
			Baseline: share(*honest) + " honest false alarms",
			Goal:     "—",
		})
	}
	return rows, nil
}

// ratesInto replaces the challenge rows of the table at path with rows
// measured now on m (datedInto).
func ratesInto(path string, m Machine, rows []Row) error {
	if err := datedInto(path, m, rows, "-rates-only", "| challenge "); err != nil {
		return fmt.Errorf("detection rates into %s: %w", path, err)
	}
	return nil
}

// datedInto replaces the rows of the table at path that start with prefix
// with rows measured now on m by `bench flag`, each naming the date, the
// load and the commit it was measured at: the rest of the table is from
// an earlier run.
func datedInto(path string, m Machine, rows []Row, flag, prefix string) error {
	for i := range rows {
		rows[i].Figure += fmt.Sprintf(" (bench %s, %s, load average %s before, %s after; commit %s)", flag, m.Started[:min(10, len(m.Started))], m.LoadBefore, m.LoadAfter, m.Commit)
	}
	return replaceRows(path, func(line string) bool { return strings.HasPrefix(line, prefix) }, rows, "")
}
