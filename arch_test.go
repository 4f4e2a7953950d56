// Package gpumesh_test guards the shape of the module: the one direction of
// imports that SPEC §3 sets (cmd -> node -> (market, verify) -> (p2p, store)).
package gpumesh_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gpumesh/gpumesh/"

// forbidden lists, per top-level package, the imports it must never make
// (directly; with every edge pointing one way, transitive edges follow).
var forbidden = map[string][]string{
	"p2p":     {module + "node", module + "market", module + "verify", module + "store", module + "cmd", module + "testnet"},
	"store":   {module + "node", module + "market", module + "verify", module + "p2p", module + "cmd", module + "testnet"},
	"market":  {module + "node", module + "verify", module + "cmd", module + "testnet", "github.com/NVIDIA/go-nvml"},
	"verify":  {module + "node", module + "market", module + "cmd", module + "testnet"},
	"node":    {module + "cmd", module + "testnet"},
	"testnet": {module + "cmd"},
}

func TestImportDirection(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		top := strings.Split(filepath.ToSlash(path), "/")[0]
		rules, ok := forbidden[top]
		if !ok {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range rules {
				if p == bad || strings.HasPrefix(p, bad+"/") {
					t.Errorf("%s imports %s: package %s must not depend on it (SPEC §3)", path, p, top)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked only %d files; is the test running at the module root?", checked)
	}
}

func TestEveryPackageHasADocComment(t *testing.T) {
	dirs := map[string]bool{}
	documented := map[string]bool{}
	filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			if d != nil && d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.Dir(path)
		dirs[dir] = true
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err == nil && f.Doc != nil && len(strings.TrimSpace(f.Doc.Text())) > 20 {
			documented[dir] = true
		}
		return nil
	})
	for dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "records.pb.go")); err == nil && len(dirs) > 0 {
			continue // generated protobuf package: documented by its .proto
		}
		if !documented[dir] {
			t.Errorf("package in %s has no package comment", dir)
		}
	}
}

// TestJobReachesTheNetworkThroughInterfaces: node/job's controller and
// executor reach peers only through its Dialer and Listener, which the
// node wires to its libp2p host, so their state machine runs over
// in-memory peers in tests. The package may name libp2p's core interfaces
// (streams, peer IDs, protocol IDs) but not build or hold a host.
func TestJobReachesTheNetworkThroughInterfaces(t *testing.T) {
	banned := []string{"github.com/libp2p/go-libp2p", "github.com/libp2p/go-libp2p/core/host", "github.com/libp2p/go-libp2p-kad-dht"}
	files, err := filepath.Glob("node/job/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in node/job (%v); is the test running at the module root?", err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range banned {
				if p == bad {
					t.Errorf("%s imports %s: node/job reaches the network through its Dialer and Listener only", path, p)
				}
			}
		}
	}
}
