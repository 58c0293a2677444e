package api

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/docexamples"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/query"
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
	Parameters  []openAPIParameter         `json:"parameters"`
}

type openAPIParameter struct {
	Name   string      `json:"name"`
	In     string      `json:"in"`
	Schema *jsonSchema `json:"schema"`
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
		// knownQuery wraps every route: an unknown query parameter is a 400.
		if _, has400 := op.Responses["400"]; !has400 {
			t.Errorf("%s: answers 400 to an unknown query parameter, but openapi.json documents no 400", key)
		}
		if op.OperationID == "" {
			t.Errorf("%s: no operationId", key)
		}
		// Handler refuses If-Match on a route that is not conditional.
		ifMatch := slices.ContainsFunc(op.Parameters, func(p openAPIParameter) bool {
			return p.In == "header" && strings.EqualFold(p.Name, "If-Match")
		})
		if ifMatch != rt.conditional {
			t.Errorf("%s: openapi.json documents an If-Match header: %v, the route table says conditional=%v", key, ifMatch, rt.conditional)
		}
		var query, arrays []string
		for _, p := range op.Parameters {
			if p.In == "query" {
				query = append(query, p.Name)
				if p.Schema != nil && slices.Contains(p.Schema.types(), "array") {
					arrays = append(arrays, p.Name)
				}
			}
		}
		// knownQuery refuses a parameter given twice unless the route
		// takes several values of it, which openapi.json says with an
		// array schema.
		if !slices.Equal(slices.Sorted(slices.Values(arrays)), slices.Sorted(slices.Values(rt.repeatable))) {
			t.Errorf("%s: openapi.json documents the repeatable (array) query parameters %v, the route table takes several of %v", key, arrays, rt.repeatable)
		}
		if !slices.Equal(slices.Sorted(slices.Values(query)), slices.Sorted(slices.Values(rt.query))) {
			t.Errorf("%s: openapi.json documents the query parameters %v, the route table reads %v", key, query, rt.query)
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

// jsonSchema is the part of an OpenAPI 3.1 schema object that
// TestOpenAPISchemasMatchTheTypes compares with the Go types.
type jsonSchema struct {
	Ref                  string                 `json:"$ref"`
	Type                 json.RawMessage        `json:"type"` // a string, or an array of them
	Format               string                 `json:"format"`
	Required             []string               `json:"required"`
	Properties           map[string]*jsonSchema `json:"properties"`
	AdditionalProperties json.RawMessage        `json:"additionalProperties"`
	Items                *jsonSchema            `json:"items"`
	AllOf                []*jsonSchema          `json:"allOf"`
	AnyOf                []*jsonSchema          `json:"anyOf"`
	Enum                 []json.RawMessage      `json:"enum"`
	Const                json.RawMessage        `json:"const"`
}

// types returns the schema's JSON types: ["string"], ["string", "null"], ….
func (s *jsonSchema) types() []string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	return many
}

// schemaTypes pairs every component schema with the Go type whose JSON
// encoding it documents.
var schemaTypes = map[string]reflect.Type{
	"Error":                reflect.TypeFor[apiError](),
	"CommandRejectedError": reflect.TypeFor[apiError](),
	"FieldError":           reflect.TypeFor[events.FieldError](),
	"CommandResult":        reflect.TypeFor[CommandResult](),
	"TaskAccepted":         reflect.TypeFor[events.TaskAccepted](),
	"TaskRejected":         reflect.TypeFor[events.TaskRejected](),
	"TaskSpec":             reflect.TypeFor[events.TaskSpec](),
	"ScheduleState":        reflect.TypeFor[gov.State](),
	"TaskView":             reflect.TypeFor[query.TaskView](),
	"PauseRequest":         reflect.TypeFor[PauseRequest](),
	"ReasonRequest":        reflect.TypeFor[ReasonRequest](),
	"HintRequest":          reflect.TypeFor[HintRequest](),
	"RunNowRequest":        reflect.TypeFor[RunNowRequest](),
	"Run":                  reflect.TypeFor[events.Run](),
	"Dispatch":             reflect.TypeFor[events.Dispatch](),
	"RunRecord":            reflect.TypeFor[query.RunRecord](),
	"DeadLetter":           reflect.TypeFor[events.DeadLetter](),
	"DeadLetterRecord":     reflect.TypeFor[query.DeadLetterRecord](),
	"Instance":             reflect.TypeFor[query.Instance](),
	"Health":               reflect.TypeFor[query.Health](),
}

// documentedElsewhere lists, per schema, the Go fields that a schema
// composing it documents instead: Error's command-rejection fields are in
// CommandRejectedError's own allOf part.
var documentedElsewhere = map[string][]string{
	"Error": {"commandId", "status", "rejected"},
}

// TestOpenAPISchemasMatchTheTypes fails when a component schema of
// openapi.json and the Go type it documents disagree: a JSON field the type
// encodes that the schema lacks, a property the type does not have, a
// property of the wrong JSON type, or a $ref to a schema of another type.
// Nested objects are compared too, whether inline or by $ref.
func TestOpenAPISchemasMatchTheTypes(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]*jsonSchema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	c := &schemaChecker{t: t, schemas: doc.Components.Schemas}
	for name := range doc.Components.Schemas {
		if _, ok := schemaTypes[name]; !ok {
			t.Errorf("schema %s: no Go type to check it against; add it to schemaTypes", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(schemaTypes)) {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s (%s) is missing from openapi.json", name, schemaTypes[name])
			continue
		}
		c.object(name, s, schemaTypes[name], documentedElsewhere[name])
	}
}

type schemaChecker struct {
	t       *testing.T
	schemas map[string]*jsonSchema
}

// resolve follows a $ref to a component schema.
func (c *schemaChecker) resolve(path string, s *jsonSchema) *jsonSchema {
	if s.Ref == "" {
		return s
	}
	name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
	if r := c.schemas[name]; ok && r != nil {
		return r
	}
	c.t.Errorf("%s: $ref %q does not resolve", path, s.Ref)
	return &jsonSchema{}
}

// properties returns the properties and required names of an object
// schema, merging the parts of an allOf.
func (c *schemaChecker) properties(path string, s *jsonSchema) (map[string]*jsonSchema, []string) {
	s = c.resolve(path, s)
	props := map[string]*jsonSchema{}
	required := slices.Clone(s.Required)
	maps.Copy(props, s.Properties)
	for _, part := range s.AllOf {
		pp, req := c.properties(path, part)
		maps.Copy(props, pp)
		required = append(required, req...)
	}
	return props, required
}

// object compares an object schema's properties with the JSON fields of
// struct type typ. Fields named in elsewhere may be absent from the schema.
func (c *schemaChecker) object(path string, s *jsonSchema, typ reflect.Type, elsewhere []string) {
	props, required := c.properties(path, s)
	fields := jsonFields(typ)
	var names []string
	for _, f := range fields {
		names = append(names, f.name)
		p, ok := props[f.name]
		switch {
		case ok:
			c.value(path+"."+f.name, p, f.typ)
		case !slices.Contains(elsewhere, f.name):
			c.t.Errorf("%s: property %q is missing: %s encodes it (field %s)", path, f.name, typ, f.goName)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(props)) {
		if !slices.Contains(names, name) {
			c.t.Errorf("%s: property %q is documented, but %s has no such JSON field", path, name, typ)
		}
	}
	for _, name := range required {
		if _, ok := props[name]; !ok {
			c.t.Errorf("%s: required property %q is not among the properties", path, name)
		}
	}
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[events.Duration]()
)

// value checks that schema s describes a value of Go type typ, and
// recurses into structs, slices and maps.
func (c *schemaChecker) value(path string, s *jsonSchema, typ reflect.Type) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if want, ok := schemaTypes[name]; ok && want != typ {
			c.t.Errorf("%s: refers to %s, which documents %s, but the field is a %s", path, name, want, typ)
		}
		return // the component is checked on its own
	}
	if len(s.AllOf) > 0 {
		c.object(path, s, typ, nil)
		return
	}
	want, format := "", ""
	switch {
	case typ == timeType:
		want, format = "string", "date-time"
	case typ == durationType:
		want = "string"
	case typ.Implements(reflect.TypeFor[json.Marshaler]()):
		return // a custom encoding this test cannot know
	default:
		switch typ.Kind() {
		case reflect.String:
			want = "string"
		case reflect.Bool:
			want = "boolean"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "integer"
		case reflect.Float32, reflect.Float64:
			want = "number"
		case reflect.Slice, reflect.Array:
			want = "array"
		case reflect.Map, reflect.Struct:
			want = "object"
		default:
			c.t.Errorf("%s: unexpected Go kind %s", path, typ)
			return
		}
	}
	if types := s.types(); !slices.Contains(types, want) {
		c.t.Errorf("%s: type %v, but %s encodes as a JSON %s", path, types, typ, want)
	}
	if format != "" && s.Format != format {
		c.t.Errorf("%s: format %q, want %q for %s", path, s.Format, format, typ)
	}
	switch {
	case want == "string": // time.Time, events.Duration, strings
	case typ.Kind() == reflect.Struct:
		c.object(path, s, typ, nil)
	case typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array:
		if s.Items == nil {
			c.t.Errorf("%s: an array without items", path)
			return
		}
		c.value(path+"[]", s.Items, typ.Elem())
	case typ.Kind() == reflect.Map:
		var add jsonSchema
		if json.Unmarshal(s.AdditionalProperties, &add) != nil {
			c.t.Errorf("%s: a map without an additionalProperties schema", path)
			return
		}
		c.value(path+".*", &add, typ.Elem())
	}
}

type jsonField struct {
	name, goName string
	typ          reflect.Type
}

// jsonFields lists the JSON fields encoding/json writes for struct type
// typ, in order: exported fields by their json name, "-" skipped,
// untagged embedded structs flattened.
func jsonFields(typ reflect.Type) []jsonField {
	var out []jsonField
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, goName: f.Name, typ: f.Type})
	}
	return out
}

// countingBody is a request body that counts its reads.
type countingBody struct {
	io.Reader
	reads int
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads++
	return b.Reader.Read(p)
}

func (b *countingBody) Close() error { return nil }

// TestRoutesThatReadABodyDocument408And413: readBody answers 413 to a
// body over MaxBodyBytes and 408 to one that does not arrive in time, on
// every route that reads a body, DELETE's included (it refuses one);
// openapi.json listed neither for DELETE. Each route is called with a
// body over the cap: one that reads it must answer 413 and document
// both. A handler that reaches for NATS first (the reads: the service
// here has none) panics, and has read nothing.
func TestRoutesThatReadABodyDocument408And413(t *testing.T) {
	t.Parallel()
	var doc openAPIDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	s := &Service{cfg: Config{Common: svcconf.Common{Metrics: metrics.New()}, MaxBodyBytes: 4}}
	var reading []string
	for _, rt := range s.routes() {
		key := rt.method + " " + rt.path
		body := &countingBody{Reader: strings.NewReader(`{"reason":"over the cap"}`)}
		req := httptest.NewRequest(rt.method, samplePath(rt.path), nil)
		req.Body = body
		req.SetPathValue("id", "web")
		req.SetPathValue("seq", "1")
		rec := httptest.NewRecorder()
		func() {
			defer func() { _ = recover() }()
			withRawBody(rt.handler)(rec, req)
		}()
		if body.reads == 0 {
			continue
		}
		reading = append(reading, key)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: a body over MaxBodyBytes answered %d, want 413", key, rec.Code)
		}
		var op openAPIOp
		if err := json.Unmarshal(doc.Paths[rt.path][strings.ToLower(rt.method)], &op); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, code := range []string{"408", "413"} {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s reads a body (readBody answers 408 and 413), but openapi.json documents no %s", key, code)
			}
		}
	}
	if !slices.Contains(reading, "DELETE /api/v1/tasks/{id}") || !slices.Contains(reading, "POST /api/v1/tasks") {
		t.Fatalf("routes that read a body: %v, want DELETE and POST /api/v1/tasks among them", reading)
	}
}

// TestOpenAPIMaxResponseBytesRange: the schema states the range the API
// enforces, [1, 10485760] (an explicit 0 is refused; it used to mean the
// default silently).
func TestOpenAPIMaxResponseBytesRange(t *testing.T) {
	t.Parallel()
	var doc any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var found []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(map[string]any); ok && k == "maxResponseBytes" {
					found = append(found, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	if len(found) == 0 {
		t.Fatal("openapi.json has no maxResponseBytes property")
	}
	for _, s := range found {
		if s["minimum"] != float64(1) || s["maximum"] != float64(events.MaxMaxResponseBytes) {
			t.Errorf("maxResponseBytes: minimum %v, maximum %v; want 1 and %d", s["minimum"], s["maximum"], events.MaxMaxResponseBytes)
		}
	}
}

// TestOpenAPIRangesAndTheBudgetWindowMatchTheRules: the schema's texts
// state the ranges Validate enforces and the window the governor counts
// a budget in. They drifted: budget.maxRunsPerDay said "per rolling 24
// hours", where the governor counts whole UTC hours (the current one and
// the 23 before it), as docs/events.md says, and deadLetter.recheckAfter
// and a hint's interval said "at least 1s" with no word of the 8784h cap
// Validate enforces.
func TestOpenAPIRangesAndTheBudgetWindowMatchTheRules(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	prop := func(schema string, path ...string) map[string]any {
		t.Helper()
		s, _ := doc.Components.Schemas[schema].(map[string]any)
		for _, p := range path {
			props, _ := s["properties"].(map[string]any)
			if s, _ = props[p].(map[string]any); s == nil {
				t.Fatalf("openapi.json: %s has no property %s", schema, strings.Join(path, "."))
			}
		}
		return s
	}
	description := func(s map[string]any) string { d, _ := s["description"].(string); return d }

	// Every duration Validate holds to [MinInterval, MaxInterval].
	durations := fmt.Sprintf("[%s, %dh]", events.MinInterval, int(events.MaxInterval.Hours()))
	for _, p := range []struct {
		schema string
		path   []string
	}{
		{"TaskSpec", []string{"schedule", "interval"}},
		{"TaskSpec", []string{"bounds", "min"}},
		{"TaskSpec", []string{"bounds", "max"}},
		{"TaskSpec", []string{"quietHours", "interval"}},
		{"TaskSpec", []string{"deadLetter", "recheckAfter"}},
		{"HintRequest", []string{"interval"}},
	} {
		if d := description(prop(p.schema, p.path...)); !strings.Contains(d, durations) {
			t.Errorf("%s.%s: description %q does not state the range %s", p.schema, strings.Join(p.path, "."), d, durations)
		}
	}
	spec := func(mutate func(*events.TaskSpec)) error {
		s := events.TaskSpec{ID: "x", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}}
		mutate(&s)
		return s.Validate()
	}
	recheck := func(d time.Duration) func(*events.TaskSpec) {
		return func(s *events.TaskSpec) { s.DeadLetter = &events.DeadLetterPolicy{RecheckAfter: events.Duration(d)} }
	}
	if spec(recheck(events.MaxInterval)) != nil || spec(recheck(events.MaxInterval+time.Second)) == nil {
		t.Errorf("deadLetter.recheckAfter: Validate does not hold it to %s, which openapi.json states", durations)
	}

	// budget.maxRunsPerDay: the range Validate enforces, stated and given
	// as minimum and maximum.
	budget := prop("TaskSpec", "budget", "maxRunsPerDay")
	lo, _ := budget["minimum"].(float64)
	hi, _ := budget["maximum"].(float64)
	runs := func(n int) func(*events.TaskSpec) {
		return func(s *events.TaskSpec) { s.Budget = &events.Budget{MaxRunsPerDay: n} }
	}
	if lo < 1 || spec(runs(int(lo))) != nil || spec(runs(int(lo)-1)) == nil || spec(runs(int(hi))) != nil || spec(runs(int(hi)+1)) == nil {
		t.Errorf("budget.maxRunsPerDay: minimum %v and maximum %v are not the range Validate enforces", budget["minimum"], budget["maximum"])
	}
	if d := description(budget); !strings.Contains(d, fmt.Sprintf("in [%d, %d]", int(lo), int(hi))) {
		t.Errorf("budget.maxRunsPerDay: description %q does not state the range [%d, %d]", d, int(lo), int(hi))
	}
	// Its window, in the words of docs/events.md's Budget section.
	b, err := os.ReadFile(filepath.Join(docexamples.Root(t), "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n#### Budget\n")
	section, _, _ = strings.Cut(section, "\n#### ")
	section = strings.Join(strings.Fields(section), " ")
	for _, words := range []string{"the current UTC hour and the 23 before it", "The window is whole UTC hours, not any rolling 24 hours"} {
		if !strings.Contains(section, words) {
			t.Errorf("docs/events.md's Budget section no longer says %q: state the window anew here and in openapi.json", words)
		}
		if d := description(budget); !strings.Contains(d, words) {
			t.Errorf("budget.maxRunsPerDay: description %q does not say %q, as docs/events.md does", d, words)
		}
	}
}
