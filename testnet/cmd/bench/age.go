package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// Every commit bench/RESULTS.md names (its run's, and each carried
// row's) is followed by how many commits before the one the table is
// written at it is, so that a reader sees how old each figure is;
// refreshAges recounts them whenever the table is written again.

// commitAge matches a commit the table names, with the age written after
// it by an earlier writing, if any.
var commitAge = regexp.MustCompile(`\bcommit ([0-9a-f]{7,40})\b(?:, (?:\d+ commits? before this table was written|not an ancestor of the commit this table was written at))?`)

// refreshAges rewrites each commit s names as "commit X, N commits before
// this table was written", N counted by git now.
func refreshAges(s string) string {
	return commitAge.ReplaceAllStringFunc(s, func(m string) string {
		c := commitAge.FindStringSubmatch(m)[1]
		return "commit " + c + ", " + commitsBefore(c)
	})
}

// commitsBefore is how many commits commit is before HEAD, in words.
func commitsBefore(commit string) string {
	out, err := exec.Command("git", "rev-list", "--count", commit+"..HEAD").Output()
	if err != nil || exec.Command("git", "merge-base", "--is-ancestor", commit, "HEAD").Run() != nil {
		return "not an ancestor of the commit this table was written at"
	}
	n := strings.TrimSpace(string(out))
	if n == "1" {
		return "1 commit before this table was written"
	}
	return n + " commits before this table was written"
}

// reportCommit is the commit a report of another run (make sim, make
// chaos) was measured at, in words: the one it names, else the one that
// committed it, else none.
func reportCommit(path string, report []byte) string {
	if m := regexp.MustCompile(`\bcommit ([0-9a-f]{7,40})\b`).FindSubmatch(report); m != nil {
		return "commit " + string(m[1])
	}
	out, err := exec.Command("git", "log", "-1", "--format=%h", "--", path).Output()
	if c := strings.TrimSpace(string(out)); err == nil && c != "" {
		return fmt.Sprintf("the report names no commit; it was committed with commit %s", c)
	}
	return "the report names no commit and is not committed"
}
