package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gpumesh/gpumesh/node/api"
)

// TestOpenAPIDocument: the document is valid OpenAPI 3, documents every
// route of Routes (with its method) and no other, and marks exactly the
// Public routes as needing no token.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := api.OpenAPI()
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

// TestOpenAPIServed: GET /api/v1/openapi.json answers the document,
// without the token.
func TestOpenAPIServed(t *testing.T) {
	srv := httptest.NewServer(api.NewHandler(&backend{}, testToken))
	defer srv.Close()
	resp, err := http.Get(srv.URL + api.PathOpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc openapi3.T
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", api.PathOpenAPI, resp.Status, err)
	}
	if doc.Paths.Find(api.PathExplorerSupplier) == nil || doc.Paths.Find(api.PathJobs) == nil {
		t.Fatalf("the served document lacks routes: %v", doc.Paths.InMatchingOrder())
	}
}
