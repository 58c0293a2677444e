package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestStrictDecodingRefusesCaseVariantsAndDuplicates: a key that is not the
// documented camelCase name is an unknown field, and a key given twice is
// refused (as the CLI does for YAML). A trailing "ID" used to create task
// "other" and a second "schedule" silently replaced the first.
func TestStrictDecodingRefusesCaseVariantsAndDuplicates(t *testing.T) {
	b, _ := apiOnly(t)
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
	b, _ := apiOnly(t)
	for _, c := range []struct{ path, body, field string }{
		{"/api/v1/tasks/web/pause", `{"until":"tomorrow"}`, "until"},
		{"/api/v1/tasks/web/hint", `{"at":"soon"}`, "at"},
		{"/api/v1/tasks", `{"id":"web","target":{"http":{"url":"http://example.com"}},"schedule":{"interval":"1h"},"startAt":"noon"}`, "startAt"},
	} {
		r := b.call(t, http.MethodPost, c.path, c.body)
		expect(t, "POST "+c.path+" "+c.body, r, http.StatusBadRequest, c.field)
	}
}

// TestReasonIsBounded: the reason of a pause or a hint is kept in the
// task's schedule, so it is at most events.MaxReasonBytes; a longer one is
// a 400 naming reason (it used to be sent, and a long enough one made the
// governor retry the command forever).
func TestReasonIsBounded(t *testing.T) {
	b, _ := apiOnly(t)
	long := strings.Repeat("x", events.MaxReasonBytes+1)
	for _, c := range []struct{ path, body string }{
		{"/api/v1/tasks/web/pause", `{"reason":"` + long + `"}`},
		{"/api/v1/tasks/web/hint", `{"interval":"10s","reason":"` + long + `"}`},
		{"/api/v1/tasks/web/run-now", `{"reason":"` + long + `"}`},
		// Resume and retry sent any reason, kept in TASKS as history.
		{"/api/v1/tasks/web/resume", `{"reason":"` + long + `"}`},
		{"/api/v1/deadletter/1/retry", `{"reason":"` + long + `"}`},
	} {
		expect(t, "POST "+c.path+" with a long reason", b.call(t, http.MethodPost, c.path, c.body), http.StatusBadRequest, "reason")
	}
	expect(t, "DELETE with a long reason", b.call(t, http.MethodDelete, "/api/v1/tasks/web?reason="+long, ""), http.StatusBadRequest, "reason")
}

// TestInvalidUTF8IsRefused: a body that is not UTF-8 is a 400. It used to
// be decoded with every invalid byte replaced by U+FFFD, so a reason or a
// spec (a header value, a job) was stored altered, without a word. The
// 400 names the field that holds the byte, as the governor's answer to
// the same spec over NATS does.
func TestInvalidUTF8IsRefused(t *testing.T) {
	b, _ := apiOnly(t)
	for _, c := range []struct{ path, body, field string }{
		{"/api/v1/tasks/web/pause", "{\"reason\":\"caf\xe9\"}", "reason"},
		{"/api/v1/tasks", "{\"id\":\"web\",\"job\":\"caf\xe9\",\"target\":{\"http\":{\"url\":\"http://example.com\"}},\"schedule\":{\"interval\":\"1h\"}}", "job"},
	} {
		r := b.call(t, http.MethodPost, c.path, c.body)
		expect(t, "POST "+c.path+" with a Latin-1 byte", r, http.StatusBadRequest, c.field)
		if !strings.Contains(r.str("detail"), "UTF-8") {
			t.Fatalf("POST %s: %s, want a detail naming UTF-8", c.path, r.raw)
		}
	}
}

// TestSpecRulesOfTheCodecReview: the API refuses what the governor does,
// naming the field: a connection-level header, which every call to an
// HTTP/2 target failed with, and bounds past 366 days, which stopped an
// adaptive task. Both were accepted (201) and then failed or stopped.
func TestSpecRulesOfTheCodecReview(t *testing.T) {
	b, _ := apiOnly(t)
	for _, c := range []struct{ body, field string }{
		{`{"id":"web","target":{"http":{"url":"https://example.com","headers":{"Upgrade":"websocket"}}},"schedule":{"interval":"1h"}}`, "target.http.headers.Upgrade"},
		{`{"id":"web","target":{"http":{"url":"https://example.com","headers":{"TE":"gzip"}}},"schedule":{"interval":"1h"}}`, "target.http.headers.TE"},
		{`{"id":"web","target":{"http":{"url":"https://example.com"}},"schedule":{"interval":"1h"},"bounds":{"max":"2000000h"}}`, "bounds.max"},
	} {
		r := b.call(t, http.MethodPost, "/api/v1/tasks", c.body)
		expect(t, "POST /api/v1/tasks "+c.body, r, http.StatusBadRequest, c.field)
	}
}

// TestAWhitespaceBodyIsNoBody: the optional bodies of pause, resume,
// run-now and dead-letter retry were absent only when empty: a body of
// white space was a 400 naming no field, while DELETE took it as none.
// White space is no body on all of them.
func TestAWhitespaceBodyIsNoBody(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, path := range []string{"/api/v1/tasks/web/pause", "/api/v1/tasks/web/resume", "/api/v1/tasks/web/run-now", "/api/v1/deadletter/1/retry"} {
		field := "id"
		if strings.HasPrefix(path, "/api/v1/deadletter/") {
			field = "seq"
		}
		// No task web nor dead letter 1: past the body, the route's 404.
		expect(t, "POST "+path+" with a body of white space", b.call(t, http.MethodPost, path, " \n\t"), http.StatusNotFound, field)
	}
}
