// Package gpumesh_test guards the shape of the module: the one direction of
// imports that SPEC §3 sets (cmd -> node -> (market, verify) -> (p2p, store)),
// with the leaf packages (catalog, money, merkle) below them all.
package gpumesh_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gpumesh/gpumesh/"

// forbidden lists, per top-level package, the imports it must never make
// (directly; with every edge pointing one way, transitive edges follow).
var forbidden = map[string][]string{
	// catalog is a leaf that every package may import: it imports nothing
	// of the module (see TestLeavesImportNothingOfTheModule) and no GPU
	// library.
	"catalog": {"github.com/NVIDIA/go-nvml"},
	"p2p":     {module + "node", module + "market", module + "verify", module + "store", module + "cmd", module + "testnet"},
	"store":   {module + "node", module + "market", module + "verify", module + "p2p", module + "cmd", module + "testnet"},
	"market":  {module + "node", module + "verify", module + "cmd", module + "testnet", "github.com/NVIDIA/go-nvml"},
	"verify":  {module + "node", module + "market", module + "cmd", module + "testnet"},
	"node":    {module + "cmd", module + "testnet"},
	"testnet": {module + "cmd"},
	// clock is a leaf every layer may use: it imports nothing of the
	// module but itself (clocktest imports clock) and, in tests, the
	// leaf internal/leakcheck.
	"clock": {module + "catalog", module + "money", module + "merkle", module + "node", module + "market", module + "verify", module + "p2p", module + "store", module + "cmd", module + "testnet"},
}

// forbiddenIn lists, per package directory, imports forbidden there beside
// those of its top-level package; these match the import path exactly.
var forbiddenIn = map[string][]string{
	// node imports node/api, which serves the node through api.Backend.
	"node/api": {module + "node"},
	// The light client sits beside node, not under it: node and cmd
	// import it.
	"node/light": {module + "node"},
	// The doctor's checks are a read model the node fills with facts.
	"node/doctor": {module + "node"},
	// node/job's controller and executor reach peers only through its
	// Dialer and Listener, which the node wires to its libp2p host, so
	// their state machine runs over in-memory peers in tests: the package
	// names libp2p's core interfaces but never builds or holds a host.
	"node/job": {"github.com/libp2p/go-libp2p", "github.com/libp2p/go-libp2p/core/host", "github.com/libp2p/go-libp2p-kad-dht"},
	// The CLI and the testnet reach a node's HTTP API only through
	// node/api's Client, never by hand.
	"cmd/gpumesh":         {"net/http"},
	"testnet":             {"net/http"},
	"testnet/cmd/bench":   {"net/http"},
	"testnet/cmd/testnet": {"net/http"},
	"testnet/chaos":       {"net/http"},
	"testnet/cmd/chaos":   {"net/http"},
}

// TestImportsOfPackages checks forbiddenIn, in the non-test files of each
// package it names.
func TestImportsOfPackages(t *testing.T) {
	for dir, rules := range forbiddenIn {
		files, err := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("%s: no Go files; update forbiddenIn", dir)
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
				if slices.Contains(rules, p) {
					t.Errorf("%s imports %s: package %s must not", path, p, dir)
				}
			}
		}
	}
}

func TestImportDirection(t *testing.T) {
	checked := 0
	for path, imports := range goImports(t) {
		top := topPackage(path)
		rules, ok := forbidden[top]
		if !ok {
			continue
		}
		checked++
		for _, p := range imports {
			for _, bad := range rules {
				if p == bad || strings.HasPrefix(p, bad+"/") {
					t.Errorf("%s imports %s: package %s must not depend on it (SPEC §3)", path, p, top)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d files; is the test running at the module root?", checked)
	}
}

// leaves are packages that import nothing of the module, so that every
// package may import them without a cycle.
var leaves = []string{"catalog", "money", "merkle", "internal"}

func TestLeavesImportNothingOfTheModule(t *testing.T) {
	files := map[string]int{}
	for path, imports := range goImports(t) {
		top := topPackage(path)
		if !slices.Contains(leaves, top) {
			continue
		}
		files[top]++
		for _, p := range imports {
			if strings.HasPrefix(p, module) {
				t.Errorf("%s imports %s: leaf package %s must import nothing of the module", path, p, top)
			}
		}
	}
	for _, leaf := range leaves {
		if files[leaf] == 0 {
			t.Errorf("leaf package %s has no Go files", leaf)
		}
	}
}

// goImports returns the import paths of every Go file of the module, by
// file path, leaving out hidden folders and testdata.
func goImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
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
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		out[path] = []string{}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[path] = append(out[path], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// topPackage is the top-level folder of a file path: "market" for
// "market/settle/meter.go".
func topPackage(path string) string { return strings.Split(filepath.ToSlash(path), "/")[0] }

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

// marketWiring are the names of package market that build a node's
// market: only market/assembly may use them, so that the node and the
// simulation run one wiring (and a benchmark of the simulation measures
// the node's). wiringAllowed are the other files that may, each with
// its reason.
var (
	marketWiring = []string{"NewBook", "NewPriceIndex", "NewOrderValidator", "NewTradeValidator", "NewSupplier",
		"NewRenter", "NewBidAnswerers", "ServeBook", "OrdersTopic", "TradesTopic"}
	wiringAllowed = map[string]string{
		"node/light/client.go":   "the light client rents without a market: no book of its own, bids published on the orders topic",
		"node/light/rent.go":     "the light client's throwaway book of the asks one bootstrap peer serves",
		"testnet/chaos/flood.go": "an attacker that floods the orders topic, not a node",
	}
	// marketBuilders must build their market with market/assembly.
	marketBuilders = []string{"node/market.go", "testnet/sim/node.go"}
)

// TestMarketWiredOnce: outside package market and market/assembly, no
// non-test file names marketWiring (but those of wiringAllowed), and the
// node and the simulation import market/assembly.
func TestMarketWiredOnce(t *testing.T) {
	imports := goImports(t)
	for _, path := range marketBuilders {
		if !slices.Contains(imports[filepath.FromSlash(path)], module+"market/assembly") {
			t.Errorf("%s does not build its market with market/assembly", path)
		}
	}
	seen := 0
	for path := range imports {
		slash := filepath.ToSlash(path)
		dir := filepath.ToSlash(filepath.Dir(path))
		if strings.HasSuffix(path, "_test.go") || dir == "market" || dir == "market/assembly" || wiringAllowed[slash] != "" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == module+"market" {
				name = "market"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			continue
		}
		seen++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && slices.Contains(marketWiring, sel.Sel.Name) {
				t.Errorf("%s uses market.%s: a market is wired only in market/assembly", slash, sel.Sel.Name)
			}
			return true
		})
	}
	if seen < 10 {
		t.Fatalf("only %d files import package market; is the test running at the module root?", seen)
	}
}
