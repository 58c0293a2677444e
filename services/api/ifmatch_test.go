package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestAConditionalUpdateRefusesAStaleRevision: two clients that each
// read a task, changed it and wrote it back lost one change without an
// error: GET returned no ETag and PUT ignored If-Match. GET now returns
// the spec's revision as ETag, and a PUT with If-Match carries it in
// task.updated (ifRevision): the governor rejects it when the spec
// changed since, answered 412. Without If-Match an update applies as
// before.
func TestAConditionalUpdateRefusesAStaleRevision(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusOK)
	expect(t, "create", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")

	read := b.call(t, http.MethodGet, "/api/v1/tasks/web", "")
	expect(t, "GET", read, http.StatusOK, "")
	etag := read.header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) || len(etag) < 3 {
		t.Fatalf("GET /api/v1/tasks/web: ETag %q, want the spec's revision, quoted", etag)
	}
	put := func(ifMatch, job string) *reply {
		h := http.Header{"Authorization": {"Bearer " + token}}
		if ifMatch != "" {
			h.Set("If-Match", ifMatch)
		}
		return b.send(t, http.MethodPut, "/api/v1/tasks/web", h, b.task("web", `,"job":"`+job+`"`))
	}
	// The first client writes back what it read: applied.
	first := put(etag, "first")
	expect(t, "PUT If-Match the current revision", first, http.StatusAccepted, "")
	if first.str("status") != "accepted" {
		t.Fatalf("PUT If-Match the current revision: %s, want accepted", first.raw)
	}
	// The second read before the first wrote: refused, naming ifRevision.
	second := put(etag, "second")
	expect(t, "PUT If-Match a revision the first update replaced", second, http.StatusPreconditionFailed, "ifRevision")
	if second.str("status") != "rejected" || second.str("commandId") == "" {
		t.Fatalf("the stale update: %s, want status rejected with its commandId", second.raw)
	}
	if got := b.call(t, http.MethodGet, "/api/v1/tasks/web", ""); got.str("spec", "job") != "first" {
		t.Fatalf("after the stale update: job %q, want the first update's", got.str("spec", "job"))
	}
	// Read again: the new ETag applies.
	again := b.call(t, http.MethodGet, "/api/v1/tasks/web", "").header.Get("ETag")
	if again == etag {
		t.Fatalf("the ETag %s did not change with the update", etag)
	}
	expect(t, "PUT If-Match the new revision", put(again, "second"), http.StatusAccepted, "")
	expect(t, "PUT If-Match *", put("*", "star"), http.StatusAccepted, "")
	expect(t, "PUT without If-Match", put("", "plain"), http.StatusAccepted, "")
	for _, bad := range []string{`W/"1"`, `7`, `"x"`, `"1", "2"`} {
		expect(t, "PUT If-Match "+bad, put(bad, "bad"), http.StatusBadRequest, "If-Match")
	}
}
