package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/svcconf"
)

type openAPIDoc struct {
	OpenAPI  string                                `json:"openapi"`
	Security []map[string][]string                 `json:"security"`
	Paths    map[string]map[string]json.RawMessage `json:"paths"`
}

type openAPIOp struct {
	OperationID string                     `json:"operationId"`
	Security    *[]map[string][]string     `json:"security"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// TestRoutesMatchOpenAPI fails when a route is served but not documented,
// documented but not served, or documented with the wrong auth.
func TestRoutesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	var doc openAPIDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") || len(doc.Security) == 0 {
		t.Fatalf("openapi.json: want an OpenAPI 3 document with a global security requirement, got %q %v", doc.OpenAPI, doc.Security)
	}
	documented := map[string]openAPIOp{}
	for path, item := range doc.Paths {
		for key, raw := range item {
			if !slices.Contains(httpMethods, key) {
				continue // "parameters", "summary", …
			}
			var op openAPIOp
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", key, path, err)
			}
			documented[strings.ToUpper(key)+" "+path] = op
		}
	}
	s := &Service{cfg: Config{Common: svcconf.Common{Metrics: metrics.New()}}}
	served := map[string]route{}
	for _, rt := range s.routes() {
		key := rt.method + " " + rt.path
		if _, dup := served[key]; dup {
			t.Errorf("route %s is registered twice", key)
		}
		served[key] = rt
	}
	for key, rt := range served {
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s is served but missing from openapi.json", key)
			continue
		}
		public := op.Security != nil && len(*op.Security) == 0
		if public != rt.public {
			t.Errorf("%s: openapi.json says public=%v, the route table says %v", key, public, rt.public)
		}
		if _, has401 := op.Responses["401"]; !rt.public && !has401 {
			t.Errorf("%s: authenticated, but openapi.json documents no 401", key)
		}
		if op.OperationID == "" {
			t.Errorf("%s: no operationId", key)
		}
	}
	for key := range documented {
		if _, ok := served[key]; !ok {
			t.Errorf("openapi.json documents %s, which is not served", key)
		}
	}
	if len(served) == 0 || len(served) != len(documented) {
		t.Errorf("%d routes served, %d documented", len(served), len(documented))
	}
}
