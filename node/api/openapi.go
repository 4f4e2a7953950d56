package api

import (
	_ "embed"
	"net/http"
)

// openAPIJSON is the OpenAPI 3 document of this API, built from the
// handlers' Go types by package node/api/openapi (whose tests keep this
// file current) and embedded, so that the node does not carry the
// generator.
//
//go:embed openapi.json
var openAPIJSON []byte

// OpenAPIJSON is the embedded OpenAPI 3 document, as served.
func OpenAPIJSON() []byte { return openAPIJSON }

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIJSON)
}
