package store_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoGpumeshImports keeps store at the bottom of the import graph: it
// must not import other gpumesh packages.
func TestNoGpumeshImports(t *testing.T) {
	const module = "github.com/gpumesh/gpumesh/"
	allowed := func(path string) bool {
		// internal/ holds leaves that import none of ours (leakcheck).
		return path == module+"store" || strings.HasPrefix(path, module+"store/") || strings.HasPrefix(path, module+"internal/")
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module) && !allowed(p) {
				t.Errorf("%s imports %s; store must not import other gpumesh packages", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
