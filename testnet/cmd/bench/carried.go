package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpumesh/gpumesh/testnet/chaos"
	"github.com/gpumesh/gpumesh/testnet/sim"
)

// The figures that other harnesses measure, in runs of their own that
// take longer than this one (make sim: the 1000-node market; make chaos:
// kills, a flood and skewed clocks), are carried into bench/RESULTS.md
// from the reports those runs write, marked with where and when they
// were measured, so that every target of the scale issue has its row
// there.

// simFigures are the rows of bench/SIM.md carried, by their first cell;
// the fill ratio is judged against sim.GoalFillRatio at each size.
var simFigures = []string{
	fillFigure,
	"filled by the central matcher",
	"utilisation of honest GPUs, market / central",
	"gossip messages per node per simulated s",
	"gossip delivery p50 / p99",
}

const fillFigure = "fill ratio, market / central"

var fillGoal = fmt.Sprintf("≥ %.2f", sim.GoalFillRatio)

// carriedNote is the note under the table that says where the carried
// rows come from.
func carriedNote(simPath, chaosPath string) string {
	return fmt.Sprintf("The rows naming %s and %s are carried from the reports of make sim and make chaos, runs of their own that take longer than this one: they were measured on the date and at the commit they name, not in this run.", simPath, chaosPath)
}

// carryInto replaces the carried rows of the table at path (written by
// an earlier run of the harness) with those of the reports as they are
// now, and leaves every row this harness measured as it was: make sim
// and make chaos run it so, after writing their reports.
func carryInto(path, simPath, chaosPath string) error {
	carried := func(line string) bool {
		return strings.Contains(line, ", make sim, ") || strings.Contains(line, ", make chaos, ") ||
			strings.HasPrefix(line, "| market simulation (make sim)") || strings.HasPrefix(line, "| chaos: ")
	}
	if err := replaceRows(path, carried, carriedRows(simPath, chaosPath), carriedNote(simPath, chaosPath)); err != nil {
		return fmt.Errorf("carry into %s: %w", path, err)
	}
	return nil
}

// replaceRows rewrites the table at path (written by an earlier run of
// the harness) with the rows old matches, and the note that starts as
// note does (up to its first colon), replaced by rows and note; every
// other row stays as it was. The header's count of rows without a
// baseline and the age of every commit named are written anew.
func replaceRows(path string, old func(line string) bool, rows []Row, note string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	notePrefix, _, _ := strings.Cut("- "+note, ":")
	var out, table []string
	lastRow := -1
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "|") && old(l):
		case note != "" && strings.HasPrefix(l, notePrefix):
		default:
			if strings.HasPrefix(l, "|") {
				lastRow = len(out)
				table = append(table, l)
			}
			out = append(out, l)
		}
	}
	if lastRow < 0 {
		return errors.New("no table")
	}
	var add []string
	for _, r := range rows {
		add = append(add, r.line())
	}
	out = append(out[:lastRow+1], append(add, out[lastRow+1:]...)...)
	if note != "" {
		out = append(out, "- "+note)
	}
	if len(table) < 2 {
		return errors.New("no table header")
	}
	bare, all := withoutBaseline(append(table[2:], add...))
	for i, l := range out {
		if strings.HasPrefix(l, headerStart) {
			out[i] = header(bare, all)
		}
	}
	return os.WriteFile(path, []byte(refreshAges(strings.Join(out, "\n")+"\n")), 0o644)
}

// withoutBaseline counts the rows of a Markdown table (lines of
// Row.line) whose baseline cell is empty, and all its rows.
func withoutBaseline(lines []string) (bare, all int) {
	for _, l := range lines {
		cells := strings.Split(strings.ReplaceAll(l, `\|`, ""), "|")
		if len(cells) > 3 && strings.TrimSpace(cells[3]) == "" {
			bare++
		}
	}
	return bare, len(lines)
}

// carriedRows reads the reports of make sim (simPath) and make chaos
// (chaosPath) and returns their rows for bench/RESULTS.md; a report that
// is missing or unreadable gives a row that says so, judged short.
func carriedRows(simPath, chaosPath string) []Row {
	return append(simRows(simPath), chaosRow(chaosPath))
}

// simRows carries the fill ratio (judged), messages per node and gossip
// delivery of each size the simulation's table has.
func simRows(path string) []Row {
	b, err := os.ReadFile(path)
	if err != nil {
		return []Row{{Figure: "market simulation (make sim)", Value: fmt.Sprintf("no report: %v", err), Goal: fillGoal + " of the central matcher's fills", Met: met(false)}}
	}
	header, table := markdownTable(b)
	when := reportDate(b)
	var rows []Row
	for _, f := range simFigures {
		cells, ok := table[f]
		if !ok || len(cells) < len(header)-1 {
			rows = append(rows, Row{Figure: f + " (" + path + ")", Value: "not in the report", Met: met(false)})
			continue
		}
		for i, nodes := range header[1:] {
			if !strings.HasSuffix(nodes, " nodes") && !strings.Contains(nodes, " nodes, seed ") {
				continue
			}
			r := Row{Figure: fmt.Sprintf("%s, %s (%s, make sim, %s; %s)", f, nodes, path, when, reportCommit(path, b)), Value: cells[i]}
			if f == fillFigure {
				v, err := strconv.ParseFloat(cells[i], 64)
				r.Goal, r.Met = fillGoal, met(err == nil && v >= sim.GoalFillRatio)
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// chaosRow is the chaos run's verdict: every check held, or the first
// that did not.
func chaosRow(path string) Row {
	r := Row{Figure: "chaos: 20 nodes through kills and restarts, a flood of valid-signed asks and ±30 s clock skew (nothing acknowledged lost, every job finished or failed over, no double-booked GPU)",
		Goal: "every check holds"}
	b, err := os.ReadFile(path)
	if err != nil {
		r.Value, r.Met = fmt.Sprintf("no report: %v", err), met(false)
		return r
	}
	r.Figure += fmt.Sprintf(" (%s, make chaos, %s; %s)", path, reportDate(b), reportCommit(path, b))
	if bytes.Contains(b, []byte(chaos.AllHeld)) {
		r.Value, r.Met = "every check held", met(true)
		return r
	}
	r.Value, r.Met = "a check failed: "+firstBold(b), met(false)
	return r
}

// markdownTable returns the header cells of the first table in b and its
// rows by their first cell.
func markdownTable(b []byte) (header []string, rows map[string][]string) {
	rows = map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if header != nil {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == nil:
			header = cells
		case strings.HasPrefix(cells[0], "---"):
		default:
			rows[cells[0]] = cells[1:]
		}
	}
	return header, rows
}

var isoDate = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)

// reportDate is the first date (YYYY-MM-DD) a report names, its run's.
func reportDate(b []byte) string {
	if d := isoDate.Find(b); d != nil {
		return string(d)
	}
	return "date unknown"
}

// firstBold is the first **bold** phrase of a report after its title.
func firstBold(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte("**"))
	if !ok {
		return "(the report names none)"
	}
	phrase, _, _ := bytes.Cut(rest, []byte("**"))
	return string(phrase)
}
