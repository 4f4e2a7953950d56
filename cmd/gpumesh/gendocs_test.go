package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenDocs: the man pages and completions the packages ship are made
// from the commands: a page per command, completions for three shells,
// and nothing dated (the same CLI gives the same files).
func TestGenDocs(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := gm(t, "gen-docs", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(filepath.Join(dir, "man", "man1", "gpumesh-node.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "gpumesh node") || !strings.Contains(string(page), "--gpus") {
		t.Errorf("gpumesh-node.1 does not document the command and --gpus:\n%.400s", page)
	}
	if strings.Contains(string(page), "Auto generated") {
		t.Error("the man page carries a generation date")
	}
	if _, err := os.Stat(filepath.Join(dir, "man", "man1", "gpumesh-gen-docs.1")); err == nil {
		t.Error("the hidden gen-docs command has a man page")
	}
	for _, f := range []string{"gpumesh.bash", "_gpumesh", "gpumesh.fish"} {
		b, err := os.ReadFile(filepath.Join(dir, "completions", f))
		if err != nil || !strings.Contains(string(b), "gpumesh") {
			t.Errorf("%s: %v, %.80q", f, err, b)
		}
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", filepath.Join(dir, "completions", "gpumesh.bash")).CombinedOutput(); err != nil {
			t.Errorf("bash -n gpumesh.bash: %v\n%s", err, out)
		}
	}
	if code, _, _ := gm(t, "gen-docs"); code != 2 {
		t.Errorf("gen-docs without DIR: exit %d, want 2", code)
	}
}
