package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/openapi"
)

var update = flag.Bool("update", false, "rewrite node/api/openapi.json (the document the node serves) from Document")

// TestEmbeddedDocument: the document the node embeds and serves is the
// one Document builds from the handlers' types now (-update rewrites
// it): a type changed without it fails here.
func TestEmbeddedDocument(t *testing.T) {
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *update {
		if err := os.WriteFile(filepath.Join("..", "openapi.json"), want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(api.OpenAPIJSON(), want) {
		t.Errorf("node/api/openapi.json is not the document the handlers' types give; run go test ./node/api/openapi -run TestEmbeddedDocument -update")
	}
}

// TestOpenAPIDocument: the document is valid OpenAPI 3, documents every
// route of Routes (with its method) and no other, and marks exactly the
// Public routes as needing no token.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	documented := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented++
			rt := api.Route{Method: method, Path: path}
			if path == api.PathPprof {
				rt.Method = ""
			}
			found := false
			for _, r := range api.Routes() {
				found = found || r == rt
			}
			if !found {
				t.Errorf("%s %s is documented but not a route", method, path)
			}
			req := httptest.NewRequest(method, strings.NewReplacer("{id}", "job1", "{peer}", "p").Replace(path), nil)
			public := op.Security != nil && len(*op.Security) == 0
			if public != api.Public(req) {
				t.Errorf("%s %s: documented public=%v, served public=%v", method, path, public, api.Public(req))
			}
		}
	}
	if documented != len(api.Routes()) {
		t.Errorf("%d operations documented, %d routes", documented, len(api.Routes()))
	}
}

var updateAPIDoc = flag.Bool("update-api-doc", false, "rewrite the route table of docs/API.md from the OpenAPI document")

// TestAPIDoc: the route table of docs/API.md is the one the OpenAPI
// document gives (-update-api-doc rewrites it).
func TestAPIDoc(t *testing.T) {
	doc, err := openapi.Document()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| Method | Path | Token | What | Answer |\n| --- | --- | --- | --- | --- |\n")
	paths := doc.Paths.InMatchingOrder()
	slices.Sort(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		methods := slices.Sorted(maps.Keys(item.Operations()))
		for _, m := range methods {
			op := item.Operations()[m]
			token := "yes"
			if op.Security != nil && len(*op.Security) == 0 {
				token = "no"
			}
			answer := ""
			for _, code := range []string{"200", "204"} {
				if r := op.Responses.Value(code); r != nil {
					answer = code
					for media := range r.Value.Content {
						answer += " " + media
					}
					if goType, ok := op.Extensions["x-go-type"].(string); ok {
						answer += ": `" + goType + "`"
					}
				}
			}
			var params []string
			for _, p := range op.Parameters {
				if p.Value.In == "query" {
					params = append(params, p.Value.Name)
				}
			}
			p := path
			if len(params) > 0 {
				p += "?" + strings.Join(params, "&")
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", m, p, token, op.Summary, answer)
		}
	}
	const begin, end = "<!-- routes: generated from the OpenAPI document; do not edit by hand -->\n", "<!-- end routes -->"
	file := filepath.Join("..", "..", "..", "docs", "API.md")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no route table markers", file)
	}
	want := s[:i+len(begin)] + b.String() + s[j:]
	if *updateAPIDoc {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != s {
		t.Errorf("the route table of %s is not the OpenAPI document's; run go test ./node/api/openapi -run TestAPIDoc -update-api-doc", file)
	}
}
