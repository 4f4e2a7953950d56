package testnet

import (
	"bytes"
	"os/exec"
	"strings"
)

// Commit names the commit of the working tree the reports are measured
// at: its short hash, marked when tracked files have uncommitted
// changes; "?" outside a git checkout.
func Commit() string {
	b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	c := strings.TrimSpace(string(b))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}
