package gpumesh_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goFileName matches a Go file named in prose: "reach.go", "node/config_keys.go".
var goFileName = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_]\.go\b`)

// TestPackageCommentsNameFilesThatExist: a package comment that names a
// file (`reach.go`, `node/config_keys.go`) names one that exists, in the
// package's own folder or, for a path with a folder, from the module root.
// Files move; a package comment that lists them goes stale unseen.
func TestPackageCommentsNameFilesThatExist(t *testing.T) {
	checked := 0
	for path, doc := range packageComments(t) {
		checked++
		for _, name := range staleFileNames(filepath.Dir(path), doc) {
			t.Errorf("%s: the package comment names %s, which does not exist; name the responsibility, not the file", path, name)
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d package comments; is the test running at the module root?", checked)
	}
}

// TestStaleFileNamesFindsAMissingFile: the check above can fail.
func TestStaleFileNamesFindsAMissingFile(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{"Package x lives in docs_test.go.", nil},
		{"See node/doc.go and arch_test.go.", nil},
		{"Reachability is in no_such_file.go (the verdict).", []string{"no_such_file.go"}},
		{"The keys are in node/no_such_keys.go.", []string{"node/no_such_keys.go"}},
		{"Nothing here names a file; go.mod is not one.", nil},
	} {
		got := staleFileNames(".", tc.doc)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("staleFileNames(%q) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// staleFileNames returns the Go files doc names that exist neither in dir
// nor, for a name with a folder, from the module root.
func staleFileNames(dir, doc string) []string {
	var stale []string
	for _, name := range goFileName.FindAllString(doc, -1) {
		name = strings.TrimLeft(name, "./")
		if exists(filepath.Join(dir, filepath.FromSlash(name))) {
			continue
		}
		if strings.Contains(name, "/") && exists(filepath.FromSlash(name)) {
			continue
		}
		stale = append(stale, name)
	}
	return stale
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// packageComments returns the package comment of every Go file of the
// module that has one, by file path, leaving out hidden folders, testdata
// and generated protobuf code.
func packageComments(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Doc != nil {
			out[path] = f.Doc.Text()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docFiles are the Markdown documents a reader follows links through.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, files...)
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} +(.+)$`)
	// sectionRef matches a reference to a numbered section, as "PROTOCOL.md §19.9".
	sectionRef = regexp.MustCompile(`(PROTOCOL|API)\.md,? §(\d+(?:\.\d+)*)`)
	// sectionHeading matches "## 19.9 Test vector" and "## 3. Routes".
	sectionHeading = regexp.MustCompile(`(?m)^#{2,4} +(\d+(?:\.\d+)*)\.? `)
)

// TestDocLinksResolve: every relative link of README.md and docs/*.md
// names a file that exists and, with a #fragment, a heading of that file.
func TestDocLinksResolve(t *testing.T) {
	for _, file := range docFiles(t) {
		text := readFile(t, file)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if !exists(dest) {
					t.Errorf("%s links to %s, which does not exist", file, target)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(readFile(t, dest))[frag] {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", file, target, dest, frag)
			}
		}
	}
}

// TestSectionReferencesResolve: every "PROTOCOL.md §N" or "API.md §N" in
// the Go sources and the docs names a numbered section of that document.
func TestSectionReferencesResolve(t *testing.T) {
	sections := map[string]map[string]bool{}
	for _, doc := range []string{"PROTOCOL", "API"} {
		sections[doc] = map[string]bool{}
		for _, m := range sectionHeading.FindAllStringSubmatch(readFile(t, filepath.Join("docs", doc+".md")), -1) {
			sections[doc][m[1]] = true
		}
	}
	if len(sections["PROTOCOL"]) < 30 {
		t.Fatalf("docs/PROTOCOL.md has only %d numbered sections; has its heading style changed?", len(sections["PROTOCOL"]))
	}
	check := func(file, text string) {
		for _, m := range sectionRef.FindAllStringSubmatch(text, -1) {
			if !sections[m[1]][strings.TrimSuffix(m[2], ".")] {
				t.Errorf("%s refers to %s.md §%s, which has no such section", file, m[1], m[2])
			}
		}
	}
	for _, file := range docFiles(t) {
		check(file, readFile(t, file))
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			check(path, readFile(t, path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// anchors returns the GitHub anchors of a Markdown document's headings:
// lower case, punctuation dropped, spaces as hyphens.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '§' && r != '—' && r != '→':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
