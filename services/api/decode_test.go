package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

// apiWithoutGovernor starts NATS and only the API service: enough for the
// requests refused before anything is published.
func apiWithoutGovernor(t *testing.T) *bundle {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{"api"}, APIAddr: "127.0.0.1:0", APITokens: []string{token},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return &bundle{base: "http://" + st.API.Addr()}
}

// TestStrictDecodingRefusesCaseVariantsAndDuplicates: a key that is not the
// documented camelCase name is an unknown field, and a key given twice is
// refused (as the CLI does for YAML). A trailing "ID" used to create task
// "other" and a second "schedule" silently replaced the first.
func TestStrictDecodingRefusesCaseVariantsAndDuplicates(t *testing.T) {
	b := apiWithoutGovernor(t)
	for _, c := range []struct{ body, field string }{
		{`{"id":"web","target":{"http":{"url":"http://example.com"}},"schedule":{"interval":"1h"},"ID":"other"}`, "ID"},
		{`{"id":"web","target":{"http":{"url":"http://example.com"}},"schedule":{"interval":"1h"},"schedule":{"interval":"1m"}}`, "schedule"},
		{`{"id":"web","target":{"http":{"url":"http://example.com"}},"schedule":{"INTERVAL":"1h"}}`, "schedule.INTERVAL"},
	} {
		r := b.call(t, http.MethodPost, "/api/v1/tasks", c.body)
		expect(t, "POST /api/v1/tasks "+c.body, r, http.StatusBadRequest, c.field)
	}
	r := b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"reason":"a","reason":"b"}`)
	expect(t, "pause with reason twice", r, http.StatusBadRequest, "reason")
}

// TestBadTimeNamesTheField: a malformed time names its field, like every
// other bad input (docs/operations.md: "400: invalid input; field names it"). It
// used to come back without a field: time.ParseError carries no JSON path.
func TestBadTimeNamesTheField(t *testing.T) {
	b := apiWithoutGovernor(t)
	for _, c := range []struct{ path, body, field string }{
		{"/api/v1/tasks/web/pause", `{"until":"tomorrow"}`, "until"},
		{"/api/v1/tasks/web/hint", `{"at":"soon"}`, "at"},
		{"/api/v1/tasks", `{"id":"web","target":{"http":{"url":"http://example.com"}},"schedule":{"interval":"1h"},"startAt":"noon"}`, "startAt"},
	} {
		r := b.call(t, http.MethodPost, c.path, c.body)
		expect(t, "POST "+c.path+" "+c.body, r, http.StatusBadRequest, c.field)
	}
}
