package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestConflictingLabelSelectorsAreRefused: every label selector must match
// ("repeat to require several"), so team=ops and team=dev together can
// match no task. The second used to replace the first, and the list
// showed the team=dev tasks as if both had been required.
func TestConflictingLabelSelectorsAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	r := b.call(t, http.MethodGet, "/api/v1/tasks?label=team=ops&label=team=dev", "")
	expect(t, "GET /api/v1/tasks?label=team=ops&label=team=dev", r, http.StatusBadRequest, "label")
	if !strings.Contains(r.str("detail"), `"team"`) {
		t.Fatalf("the error does not name the label key: %s", r.raw)
	}
	expect(t, "the same selector twice", b.call(t, http.MethodGet, "/api/v1/tasks?label=team=ops&label=team=ops", ""), http.StatusOK, "")
}

// TestUnknownQueryParametersAreRefused: a query parameter a route does not
// read is a 400 naming it, as an unknown body field is. It used to be
// ignored: GET /api/v1/tasks?offset=10 listed every task, and a misspelt
// selector (?lable=team=ops) listed every task as if it had matched.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, c := range []struct{ method, path, field string }{
		{http.MethodGet, "/api/v1/tasks?offset=10", "offset"},
		{http.MethodGet, "/api/v1/tasks?label=team=ops&lable=team=ops", "lable"},
		{http.MethodGet, "/api/v1/deadletter?task=web&limt=5", "limt"},
		{http.MethodGet, "/api/v1/tasks/web/runs?offset=50", "offset"},
		{http.MethodDelete, "/api/v1/tasks/web?reasn=done", "reasn"},
		{http.MethodGet, "/api/v1/runtime?all", "all"},
	} {
		expect(t, c.method+" "+c.path, b.call(t, c.method, c.path, ""), http.StatusBadRequest, c.field)
	}
	expect(t, "a malformed query", b.call(t, http.MethodGet, "/api/v1/deadletter?limit=5%zz", ""), http.StatusBadRequest, "")
	expect(t, "an unknown parameter without a token", b.do(t, http.MethodGet, "/api/v1/tasks?offset=10", "", ""), http.StatusUnauthorized, "Authorization")
	for _, ok := range []string{"/api/v1/tasks?job=a&label=team=ops", "/api/v1/deadletter?task=web&limit=5", "/api/v1/tasks/web/runs?limit=5"} {
		expect(t, "GET "+ok, b.call(t, http.MethodGet, ok, ""), http.StatusOK, "")
	}
}

// TestRepeatedQueryParametersAreRefused: a parameter that takes one value
// and is given twice is a 400 naming it, as a JSON key given twice is. The
// second value was silently ignored: ?limit=5&limit=500 listed 5, and
// ?task=a&task=b listed the dead letters of a alone.
func TestRepeatedQueryParametersAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, c := range []struct{ method, path, field string }{
		{http.MethodGet, "/api/v1/tasks/web/runs?limit=5&limit=500", "limit"},
		{http.MethodGet, "/api/v1/deadletter?task=a&task=b", "task"},
		{http.MethodGet, "/api/v1/deadletter?limit=1&limit=2", "limit"},
		{http.MethodGet, "/api/v1/tasks?job=a&job=b", "job"},
		{http.MethodDelete, "/api/v1/tasks/web?reason=a&reason=b", "reason"},
	} {
		expect(t, c.method+" "+c.path, b.call(t, c.method, c.path, ""), http.StatusBadRequest, c.field)
	}
	// label takes several selectors.
	expect(t, "two label selectors", b.call(t, http.MethodGet, "/api/v1/tasks?label=team=ops&label=tier=1", ""), http.StatusOK, "")
}

// TestEmptyQueryValuesAreRefused: a query parameter given with no value
// is a 400 naming it, on every route. GET /api/v1/tasks?job= dropped the
// filter and listed every task, while an empty ?task=, ?after=, ?before=
// or ?label= was refused: a script that lists ?job=$JOB and deletes each
// task deleted every task when $JOB was empty. ?force= read as false.
// Only DELETE's ?reason= may be empty: it is free text, and an empty
// reason is no reason, as when it is not given.
func TestEmptyQueryValuesAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, c := range []struct{ method, path, field string }{
		{http.MethodGet, "/api/v1/tasks?job=", "job"},
		{http.MethodGet, "/api/v1/tasks?job=a&job=", "job"},
		{http.MethodGet, "/api/v1/tasks?label=", "label"},
		{http.MethodGet, "/api/v1/tasks?limit=", "limit"},
		{http.MethodGet, "/api/v1/tasks?after=", "after"},
		{http.MethodGet, "/api/v1/tasks/web/runs?limit=", "limit"},
		{http.MethodGet, "/api/v1/tasks/web/runs?before=", "before"},
		{http.MethodGet, "/api/v1/deadletter?task=", "task"},
		{http.MethodGet, "/api/v1/deadletter?limit=", "limit"},
		{http.MethodGet, "/api/v1/deadletter?before=", "before"},
		{http.MethodPost, "/api/v1/deadletter/1/retry?force=", "force"},
		{http.MethodGet, "/api/v1/scheduler/health?staleness=", "staleness"},
	} {
		expect(t, c.method+" "+c.path, b.call(t, c.method, c.path, ""), http.StatusBadRequest, c.field)
	}
	expect(t, "DELETE ?reason= (no reason)", b.call(t, http.MethodDelete, "/api/v1/tasks/nope?reason=", ""), http.StatusNotFound, "id")
}

// TestALabelIsSelectedByItsSelector: ?label= is key=value, split at the
// first "=", so a task created with the label key "a=b" was selected by
// no selector (?label=a=b=c looks for the key "a"). Such a key is
// refused at creation, naming it; a value holding "=" is selected by
// ?label=a=b=c; and a task stored with such a key before (which the
// executor still runs) is still listed.
func TestALabelIsSelectedByItsSelector(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	b.url = "https://example.com/"
	body := strings.Replace(b.task("eqkey", ""), `"labels":{"team":"ops"}`, `"labels":{"a=b":"c"}`, 1)
	r := b.call(t, http.MethodPost, "/api/v1/tasks", body)
	expect(t, `create with the label key "a=b"`, r, http.StatusBadRequest, "labels")
	if !strings.Contains(r.str("detail"), `key "a=b" must not contain "="`) {
		t.Fatalf(`create with the label key "a=b": the detail does not name the key: %s`, r.raw)
	}

	// As the governor stores them: one with "=" in a value, one stored
	// with "=" in a key before keys were checked, and one without.
	kv := putSpecs(t, js)
	for id, labels := range map[string]string{"eqvalue": `{"a":"b=c"}`, "eqkey": `{"a=b":"c"}`, "other": `{"a":"b"}`} {
		if _, err := kv.Put(t.Context(), id, fmt.Appendf(nil, `{"id":%q,"labels":%s,"target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1h"}}`, id, labels)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/api/v1/tasks?label=a=b=c", []string{"eqvalue"}},
		{"/api/v1/tasks?label=a=b", []string{"other"}},
		{"/api/v1/tasks", []string{"eqkey", "eqvalue", "other"}},
	} {
		if got, _ := pageOf(t, b, c.path, "tasks", specID); !slices.Equal(got, c.want) {
			t.Errorf("GET %s = %v, want %v", c.path, got, c.want)
		}
	}
}
