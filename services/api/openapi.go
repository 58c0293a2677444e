package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 description of every route, served at
// GET /api/v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}
