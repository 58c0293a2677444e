package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/svcconf"
)

// TestAnOldGovernorsUnknownIfRevisionIsNotAStaleRevision: a governor older
// than ifRevision refuses an update carrying it as an unknown field, which
// names ifRevision too. That is a 422 (upgrade the governors), not a 412:
// the spec did not change.
func TestAnOldGovernorsUnknownIfRevisionIsNotAStaleRevision(t *testing.T) {
	rejected := func(rule string) *control.Answer {
		return &control.Answer{Rejected: &events.TaskRejected{
			ID: "web", Command: events.VerbUpdated.Type(), CommandID: "c1",
			Reasons: []events.FieldError{{Field: "ifRevision", Rule: rule}},
		}}
	}
	if code, _ := commandReply("web", "c1", rejected("unknown field"), nil, false, 1<<20); code != http.StatusUnprocessableEntity {
		t.Errorf("ifRevision refused as an unknown field: status %d, want 422", code)
	}
	if code, _ := commandReply("web", "c1", rejected(events.StaleRevision+"the spec of task \"web\" is at revision 4, not 3"), nil, false, 1<<20); code != http.StatusPreconditionFailed {
		t.Errorf("ifRevision stale: status %d, want 412", code)
	}
}

// TestIfMatchIsPartOfAKeyedCommand: the same Idempotency-Key and body with
// another If-Match is another command; it was taken for a retry of the
// first and answered with its verdict. Without If-Match the id is as it
// was.
func TestIfMatchIsPartOfAKeyedCommand(t *testing.T) {
	id := func(ifMatch string) string {
		r := httptest.NewRequest(http.MethodPut, "/api/v1/tasks/web", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k1")
		if ifMatch != "" {
			r.Header.Set("If-Match", ifMatch)
		}
		got, ok := idempotentID(httptest.NewRecorder(), r, events.VerbUpdated, "web")
		if !ok || got == "" {
			t.Fatalf("If-Match %q: no command id", ifMatch)
		}
		return got
	}
	if a, b := id(`"3"`), id(`"4"`); a == b {
		t.Errorf("If-Match \"3\" and \"4\" under one key: the same command id %s", a)
	}
	if a, b := id(`"3"`), id(`"3"`); a != b {
		t.Errorf("the same request twice: ids %s and %s, want one", a, b)
	}
	if a, b := id(""), id(`"3"`); a == b {
		t.Errorf("with and without If-Match: the same command id %s", a)
	}
}

const internalToken = "internal-token-0123456789"

// ifMatchService is a Service with a token and no NATS: enough for the
// checks Handler puts before the handlers, and for a handler's own checks
// up to its first read of NATS.
func ifMatchService(t *testing.T) *Service {
	t.Helper()
	s := &Service{cfg: Config{Common: svcconf.Common{Metrics: metrics.New()}, MaxBodyBytes: 1 << 20}}
	if err := s.SetTokens([]string{internalToken}); err != nil {
		t.Fatal(err)
	}
	return s
}

// serveOnce makes one request to h, with the token when authed and
// If-Match when ifMatch is not empty. A handler that panics (it reached
// for NATS, which the service has none of) is answered 599.
func serveOnce(h http.Handler, method, path, body, ifMatch string, authed bool) (rec *httptest.ResponseRecorder) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if authed {
		req.Header.Set("Authorization", "Bearer "+internalToken)
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	rec = httptest.NewRecorder()
	defer func() {
		if recover() != nil {
			rec = httptest.NewRecorder()
			rec.Code = 599
		}
	}()
	h.ServeHTTP(rec, req)
	return rec
}

// errorOf is the field and detail of an error answer.
func errorOf(rec *httptest.ResponseRecorder) (field, detail string) {
	var e apiError
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return e.Field, e.Detail
}

// samplePath fills a route's path parameters.
func samplePath(path string) string {
	return strings.NewReplacer("{id}", "web", "{seq}", "1").Replace(path)
}

// TestIfMatchIsRefusedOnEveryRouteThatIsNotConditional walks the route
// table itself. The commands that take no revision precondition refused
// If-Match by a call each handler made (noIfMatch, in six of them), so a
// route added without the call ignored it: a client sending If-Match to
// make its write conditional was answered as if the precondition held.
// Now each route says whether it is conditional, and Handler answers any
// If-Match on every other route with a 400 naming If-Match before the
// handler runs, after the token is checked; a conditional route's handler
// gets the header. The handlers are replaced by ones that say they were
// reached: what is tested is what Handler puts around them.
func TestIfMatchIsRefusedOnEveryRouteThatIsNotConditional(t *testing.T) {
	t.Parallel()
	s := ifMatchService(t)
	table := s.routes()
	stubbed := slices.Clone(table)
	for i := range stubbed {
		key := stubbed[i].method + " " + stubbed[i].path
		stubbed[i].handler = func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Reached", key)
			w.WriteHeader(http.StatusNoContent)
		}
	}
	h := s.handler(stubbed)
	conditional := 0
	for _, rt := range table {
		key := rt.method + " " + rt.path
		path := samplePath(rt.path)
		if rt.conditional {
			conditional++
		}
		if rec := serveOnce(h, rt.method, path, "", "", true); rec.Header().Get("X-Reached") != key {
			t.Fatalf("%s without If-Match: %d %s, want its handler reached", key, rec.Code, rec.Body)
		}
		for _, v := range []string{`"1"`, `*`, `garbage`} {
			rec := serveOnce(h, rt.method, path, "", v, true)
			reached := rec.Header().Get("X-Reached") == key
			field, detail := errorOf(rec)
			refused := rec.Code == http.StatusBadRequest && field == "If-Match"
			switch {
			case rt.conditional && (refused || !reached):
				t.Errorf("%s is conditional, but If-Match %s was answered %d (%s) before its handler", key, v, rec.Code, detail)
			case !rt.conditional && (!refused || reached):
				t.Errorf("%s is not conditional: If-Match %s answered %d (handler reached: %v), want 400 naming If-Match before the handler", key, v, rec.Code, reached)
			case !rt.conditional && !namesEvery(detail, table):
				t.Errorf("%s: the 400 does not name the conditional routes: %s", key, detail)
			}
		}
		// The token comes first: without one, If-Match changes nothing.
		if rec := serveOnce(h, rt.method, path, "", `"1"`, false); !rt.public && rec.Code != http.StatusUnauthorized {
			t.Errorf("%s with If-Match and no token: %d, want 401 (the token is checked first)", key, rec.Code)
		}
	}
	if conditional == 0 {
		t.Fatal("no route is conditional: PUT and DELETE /api/v1/tasks/{id} take If-Match")
	}
	// A method a path does not serve is a 405 whatever If-Match says:
	// with a token, and on /healthz without one.
	for _, c := range []struct {
		method, path string
		authed       bool
	}{{http.MethodPatch, "/api/v1/tasks/web", true}, {http.MethodPost, "/healthz", false}} {
		if rec := serveOnce(h, c.method, c.path, "", `"1"`, c.authed); rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s with If-Match: %d, want 405", c.method, c.path, rec.Code)
		}
	}
}

// namesEvery reports whether detail names every conditional route of table.
func namesEvery(detail string, table []route) bool {
	for _, rt := range table {
		if rt.conditional && !strings.Contains(detail, rt.method+" "+rt.path) {
			return false
		}
	}
	return true
}

// TestAConditionalRouteReadsIfMatch: a route the table calls conditional
// is let through with If-Match, so its handler must read it, or the hole
// is back: a malformed If-Match is a 400 from ifMatch, not passed over.
// Each conditional route is tried with no body and with a task spec, and
// one of them must reach the check.
func TestAConditionalRouteReadsIfMatch(t *testing.T) {
	t.Parallel()
	s := ifMatchService(t)
	h := s.Handler()
	spec := `{"id":"web","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1h"}}`
	for _, rt := range s.routes() {
		if !rt.conditional {
			continue
		}
		key := rt.method + " " + rt.path
		var answers []string
		read := false
		for _, body := range []string{"", spec} {
			rec := serveOnce(h, rt.method, samplePath(rt.path), body, "garbage", true)
			field, detail := errorOf(rec)
			if rec.Code == http.StatusBadRequest && field == "If-Match" && !strings.Contains(detail, "takes no If-Match") {
				read = true
				break
			}
			answers = append(answers, rec.Body.String())
		}
		if !read {
			t.Errorf("%s is conditional, but its handler did not refuse If-Match: garbage: %v", key, answers)
		}
	}
}
