package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/svcconf"
)

// builtBody is a response body built by the code that answers it.
type builtBody struct {
	what string
	code int
	body []byte
	// scope is the operations that answer it: "" every one, "auth" the
	// authenticated ones, "command" the ones that send a command
	// (document a 202), or one operation ("POST /api/v1/…").
	scope string
}

// builtBodies builds the API's error and command responses with the
// functions that write them.
func builtBodies(t *testing.T) []builtBody {
	t.Helper()
	var out []builtBody
	add := func(what, scope string, code int, body any) {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, builtBody{what: what, code: code, body: raw, scope: scope})
	}
	// Command outcomes, as send answers them.
	const cmdID = "cmd-1"
	accepted := &control.Answer{Accepted: &events.TaskAccepted{ID: "web", Command: events.VerbCreated.Type(), CommandID: cmdID, SpecRevision: 3}}
	rejected := &control.Answer{Rejected: &events.TaskRejected{
		ID: "web", Command: events.VerbCreated.Type(), CommandID: cmdID,
		Reasons: []events.FieldError{{Field: "id", Rule: "already exists"}},
	}}
	for _, c := range []struct {
		what  string
		ans   *control.Answer
		err   error
		keyed bool
	}{
		{what: "accepted", ans: accepted},
		{what: "rejected", ans: rejected},
		{what: "no answer in time", err: control.ErrTimeout},
		{what: "no answer in time, keyed", err: control.ErrTimeout, keyed: true},
		{what: "stored, its answer unreadable", err: fmt.Errorf("%w; its verdict is not known: %w", control.ErrStored, nats.ErrTimeout)},
		{what: "maybe stored", err: fmt.Errorf("%w (command %s): %w", control.ErrMaybeStored, cmdID, nats.ErrTimeout)},
		{what: "maybe stored, keyed", err: fmt.Errorf("%w (command %s): %w", control.ErrMaybeStored, cmdID, nats.ErrTimeout), keyed: true},
		{what: "over max_payload", err: nats.ErrMaxPayload},
		{what: "refused", err: nats.ErrNoResponders},
	} {
		code, body := commandReply("web", cmdID, c.ans, c.err, c.keyed, 1<<20)
		add("a command "+c.what, "command", code, body)
	}
	// A conditional update of a spec that changed since (If-Match).
	stale := &control.Answer{Rejected: &events.TaskRejected{
		ID: "web", Command: events.VerbUpdated.Type(), CommandID: cmdID,
		Reasons: []events.FieldError{{Field: "ifRevision", Rule: events.StaleRevision + "the spec is at revision 4, not 3"}},
	}}
	code, body := commandReply("web", cmdID, stale, nil, true, 1<<20)
	add("a stale conditional update", "PUT /api/v1/tasks/{id}", code, body)
	// The errors handlers write.
	for _, c := range []struct {
		scope       string
		code        int
		field, what string
	}{
		{"", http.StatusBadRequest, "limit", "a bad query parameter"},
		{"", http.StatusBadRequest, "", "a malformed query string"},
		{"", http.StatusServiceUnavailable, "", "NATS unavailable"},
		{"", http.StatusNotFound, "id", "no such task"},
		{"command", http.StatusRequestTimeout, "", "a slow body"},
		{"command", http.StatusRequestEntityTooLarge, "", "a body over the cap"},
		{"POST /api/v1/deadletter/{seq}/retry", http.StatusConflict, "seq", "an entry of a task created again"},
		{"POST /api/v1/deadletter/{seq}/retry", http.StatusUnprocessableEntity, "seq", "an entry that names no valid task"},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, c.code, c.field, c.what)
		out = append(out, builtBody{what: c.what, code: rec.Code, body: rec.Body.Bytes(), scope: c.scope})
	}
	rec := httptest.NewRecorder()
	writeInvalid(rec, &events.ValidationError{Errors: []events.FieldError{{Field: "schedule.interval", Rule: "must be positive"}}})
	out = append(out, builtBody{what: "an invalid body", code: rec.Code, body: rec.Body.Bytes(), scope: "command"})
	// The handler's own answers: no token, and a method the path does
	// not serve.
	s := &Service{cfg: Config{Common: svcconf.Common{Metrics: metrics.New()}}}
	const tok = "schema-test-token-0123"
	if err := s.SetTokens([]string{tok}); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, c := range []struct{ what, method, path, auth, scope string }{
		{"no token", http.MethodGet, "/api/v1/tasks", "", "auth"},
		{"a token not accepted", http.MethodGet, "/api/v1/tasks", "Bearer not-the-token-0123456", "auth"},
		{"a method the path does not serve", http.MethodPatch, "/api/v1/tasks", "Bearer " + tok, ""},
		{"an unknown query parameter", http.MethodGet, "/api/v1/runtime?all", "Bearer " + tok, ""},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		out = append(out, builtBody{what: c.what, code: rec.Code, body: rec.Body.Bytes(), scope: c.scope})
	}
	return out
}

// TestResponsesMatchTheirSchemas builds every error and command response
// the API answers, with the code that writes it, and validates it
// against the schema each operation of openapi.json documents for its
// status: every operation that answers it must document the status, and
// the body must validate. Error said status was only ever "unknown" and
// CommandRejectedError, its allOf, said "rejected": no 422 validated.
func TestResponsesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas   map[string]*jsonSchema      `json:"schemas"`
			Responses map[string]*openAPIResponse `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	v := &validator{schemas: doc.Components.Schemas}
	bodies := builtBodies(t)
	s := &Service{cfg: Config{Common: svcconf.Common{Metrics: metrics.New()}}}
	public := map[string]bool{}
	for _, rt := range s.routes() {
		public[rt.method+" "+rt.path] = rt.public
	}
	checked := map[string]bool{}
	for _, path := range slices.Sorted(maps.Keys(doc.Paths)) {
		for _, method := range httpMethods {
			raw, ok := doc.Paths[path][method]
			if !ok {
				continue
			}
			key := strings.ToUpper(method) + " " + path
			var op struct {
				Responses map[string]*openAPIResponse `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			_, command := op.Responses["202"]
			for _, b := range bodies {
				switch b.scope {
				case "":
				case "auth":
					if public[key] {
						continue
					}
				case "command":
					if !command {
						continue
					}
				default:
					if b.scope != key {
						continue
					}
				}
				resp, ok := op.Responses[strconv.Itoa(b.code)]
				if !ok {
					if b.scope == "" && (b.code == http.StatusNotFound || b.code == http.StatusServiceUnavailable) {
						continue // only the routes that read NATS, or look a task or entry up
					}
					t.Errorf("%s answers %d (%s), but openapi.json documents no %d", key, b.code, b.what, b.code)
					continue
				}
				if resp.Ref != "" {
					name := strings.TrimPrefix(resp.Ref, "#/components/responses/")
					if resp = doc.Components.Responses[name]; resp == nil {
						t.Errorf("%s %d: $ref %q does not resolve", key, b.code, name)
						continue
					}
				}
				media, ok := resp.Content["application/json"]
				if !ok || media.Schema == nil {
					t.Errorf("%s %d: no application/json schema", key, b.code)
					continue
				}
				var body any
				if err := json.Unmarshal(b.body, &body); err != nil {
					t.Fatalf("%s: %v", b.what, err)
				}
				if errs := v.validate("body", media.Schema, body); len(errs) > 0 {
					t.Errorf("%s %d (%s) does not validate: %s\n%s", key, b.code, b.what, strings.Join(errs, "; "), b.body)
				}
				checked[b.what] = true
			}
		}
	}
	for _, b := range bodies {
		if !checked[b.what] {
			t.Errorf("%s (%d): no operation documents it", b.what, b.code)
		}
	}
}

type openAPIResponse struct {
	Ref     string `json:"$ref"`
	Headers map[string]struct {
		Schema *jsonSchema `json:"schema"`
	} `json:"headers"`
	Content map[string]struct {
		Schema *jsonSchema `json:"schema"`
	} `json:"content"`
}

// validator validates JSON values against the keywords of openapi.json's
// response schemas: $ref, allOf, anyOf, type, enum, const, required,
// properties, items and additionalProperties.
type validator struct {
	schemas map[string]*jsonSchema
}

func (v *validator) validate(path string, s *jsonSchema, val any) []string {
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		r, ok := v.schemas[name]
		if !ok {
			return []string{fmt.Sprintf("%s: $ref %q does not resolve", path, s.Ref)}
		}
		s = r
	}
	var errs []string
	for _, part := range s.AllOf {
		errs = append(errs, v.validate(path, part, val)...)
	}
	if len(s.AnyOf) > 0 {
		var all []string
		for _, part := range s.AnyOf {
			e := v.validate(path, part, val)
			if len(e) == 0 {
				all = nil
				break
			}
			all = append(all, e...)
		}
		if all != nil {
			errs = append(errs, fmt.Sprintf("%s: matches no anyOf part (%s)", path, strings.Join(all, "; ")))
		}
	}
	if types := s.types(); len(types) > 0 && !slices.Contains(types, jsonType(val)) &&
		(jsonType(val) != "integer" || !slices.Contains(types, "number")) {
		return append(errs, fmt.Sprintf("%s: a JSON %s, want %v", path, jsonType(val), types))
	}
	if s.Enum != nil && !slices.ContainsFunc(s.Enum, func(e json.RawMessage) bool { return sameJSON(e, val) }) {
		errs = append(errs, fmt.Sprintf("%s: %v is not one of the enum %s", path, val, enumText(s.Enum)))
	}
	if s.Const != nil && !sameJSON(s.Const, val) {
		errs = append(errs, fmt.Sprintf("%s: %v, want the const %s", path, val, s.Const))
	}
	switch val := val.(type) {
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := val[name]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required property %q is missing", path, name))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(val)) {
			if p, ok := s.Properties[name]; ok {
				errs = append(errs, v.validate(path+"."+name, p, val[name])...)
				continue
			}
			var add jsonSchema
			if len(s.AdditionalProperties) > 0 && json.Unmarshal(s.AdditionalProperties, &add) == nil {
				errs = append(errs, v.validate(path+"."+name, &add, val[name])...)
			}
		}
	case []any:
		if s.Items != nil {
			for i, item := range val {
				errs = append(errs, v.validate(fmt.Sprintf("%s[%d]", path, i), s.Items, item)...)
			}
		}
	}
	return errs
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func sameJSON(raw json.RawMessage, val any) bool {
	var want any
	return json.Unmarshal(raw, &want) == nil && reflect.DeepEqual(want, val)
}

func enumText(enum []json.RawMessage) string {
	var parts []string
	for _, e := range enum {
		parts = append(parts, string(e))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// TestTheValidatorRefusesWhatItShould keeps the validator honest: a
// validator that accepts everything passes TestResponsesMatchTheirSchemas.
func TestTheValidatorRefusesWhatItShould(t *testing.T) {
	t.Parallel()
	schema := func(s string) *jsonSchema {
		var js jsonSchema
		if err := json.Unmarshal([]byte(s), &js); err != nil {
			t.Fatal(err)
		}
		return &js
	}
	v := &validator{schemas: map[string]*jsonSchema{"E": schema(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","enum":["x"]}}}`)}}
	for _, c := range []struct {
		schema, value string
		ok            bool
	}{
		{`{"$ref":"#/components/schemas/E"}`, `{"a":"x"}`, true},
		{`{"$ref":"#/components/schemas/E"}`, `{"a":"y"}`, false},
		{`{"$ref":"#/components/schemas/E"}`, `{}`, false},
		{`{"$ref":"#/components/schemas/E"}`, `{"a":1}`, false},
		{`{"allOf":[{"$ref":"#/components/schemas/E"},{"properties":{"a":{"const":"x"}}}]}`, `{"a":"x"}`, true},
		{`{"allOf":[{"$ref":"#/components/schemas/E"},{"properties":{"a":{"const":"z"}}}]}`, `{"a":"z"}`, false},
		{`{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `1`, true},
		{`{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `true`, false},
		{`{"type":"array","items":{"type":"integer"}}`, `[1,"a"]`, false},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"k":"a"}`, false},
	} {
		var val any
		if err := json.Unmarshal([]byte(c.value), &val); err != nil {
			t.Fatal(err)
		}
		if errs := v.validate("v", schema(c.schema), val); (len(errs) == 0) != c.ok {
			t.Errorf("%s against %s: errors %v, want valid=%v", c.value, c.schema, errs, c.ok)
		}
	}
}
