package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/gpumesh/gpumesh/node/api"
)

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
