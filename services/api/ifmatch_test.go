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
	if want := `"specRevision":` + strings.Trim(again, `"`); !strings.Contains(string(second.raw), want) {
		t.Fatalf("the stale update's 412: %s, want the rejection to name the revision the spec is at (%s)", second.raw, want)
	}
	expect(t, "PUT If-Match the new revision", put(again, "second"), http.StatusAccepted, "")
	expect(t, "PUT If-Match *", put("*", "star"), http.StatusAccepted, "")
	expect(t, "PUT without If-Match", put("", "plain"), http.StatusAccepted, "")
	for _, bad := range []string{`W/"1"`, `7`, `"x"`, `"1", "2"`} {
		expect(t, "PUT If-Match "+bad, put(bad, "bad"), http.StatusBadRequest, "If-Match")
	}
}

// TestAConditionalDeleteRefusesAStaleRevision: DELETE ignored If-Match
// (only PUT read it), so a client that read revision "1" deleted the task
// someone had updated to "2" since, answered 202. A DELETE with If-Match
// carries it in task.deleted (ifRevision), and the governor rejects it
// when the spec changed since: 412, and the task stays.
func TestAConditionalDeleteRefusesAStaleRevision(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusOK)
	expect(t, "create", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")
	etag := b.call(t, http.MethodGet, "/api/v1/tasks/web", "").header.Get("ETag")
	expect(t, "PUT", b.call(t, http.MethodPut, "/api/v1/tasks/web", b.task("web", `,"job":"moved"`)), http.StatusAccepted, "")
	del := func(ifMatch string) *reply {
		h := http.Header{"Authorization": {"Bearer " + token}}
		h.Set("If-Match", ifMatch)
		return b.send(t, http.MethodDelete, "/api/v1/tasks/web", h, "")
	}
	stale := del(etag)
	expect(t, "DELETE If-Match a revision the update replaced", stale, http.StatusPreconditionFailed, "ifRevision")
	if stale.str("status") != "rejected" || stale.str("commandId") == "" {
		t.Fatalf("the stale delete: %s, want status rejected with its commandId", stale.raw)
	}
	expect(t, "GET after the stale delete", b.call(t, http.MethodGet, "/api/v1/tasks/web", ""), http.StatusOK, "")
	for _, bad := range []string{`garbage`, `W/"1"`, `"1", "2"`} {
		expect(t, "DELETE If-Match "+bad, del(bad), http.StatusBadRequest, "If-Match")
	}
	current := b.call(t, http.MethodGet, "/api/v1/tasks/web", "").header.Get("ETag")
	expect(t, "DELETE If-Match the current revision", del(current), http.StatusAccepted, "")
	expect(t, "GET after the delete", b.call(t, http.MethodGet, "/api/v1/tasks/web", ""), http.StatusNotFound, "id")
}

// TestIfMatchIsRefusedWhereItIsNotEvaluated: the commands that take no
// revision precondition (create, pause, resume, hint, run-now, dead-letter
// retry) ignored If-Match, a malformed one too (If-Match: garbage on a
// pause was 202), while it changed a keyed command's id. They answer 400
// naming If-Match to any.
func TestIfMatchIsRefusedWhereItIsNotEvaluated(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	b.url = "http://example.com"
	for _, c := range []struct{ path, body string }{
		{"/api/v1/tasks", b.task("web", "")},
		{"/api/v1/tasks/web/pause", ""},
		{"/api/v1/tasks/web/resume", ""},
		{"/api/v1/tasks/web/hint", `{"interval":"10s"}`},
		{"/api/v1/tasks/web/run-now", ""},
		{"/api/v1/deadletter/1/retry", ""},
	} {
		for _, v := range []string{`garbage`, `"1"`, `*`} {
			h := http.Header{"Authorization": {"Bearer " + token}}
			h.Set("If-Match", v)
			expect(t, "POST "+c.path+" If-Match "+v, b.send(t, http.MethodPost, c.path, h, c.body), http.StatusBadRequest, "If-Match")
		}
	}
}

// TestAnIdenticalPutKeepsTheETag: a PUT of the spec the task has (the
// same file applied again, a retried request) wrote it again under a new
// revision, and another client's PUT with If-Match on the ETag it had
// read was answered 412, though nothing had changed. The spec keeps its
// revision now: the ETag stays, the PUT is answered 202 naming it, and
// the other client's conditional PUT applies.
func TestAnIdenticalPutKeepsTheETag(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusOK)
	expect(t, "create", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")
	etag := b.call(t, http.MethodGet, "/api/v1/tasks/web", "").header.Get("ETag")
	same := b.call(t, http.MethodPut, "/api/v1/tasks/web", b.task("web", ""))
	expect(t, "PUT the same spec", same, http.StatusAccepted, "")
	if want := `"specRevision":` + strings.Trim(etag, `"`); same.str("status") != "accepted" || !strings.Contains(string(same.raw), want) {
		t.Fatalf("PUT the same spec: %s, want accepted naming the revision it has (%s)", same.raw, want)
	}
	if again := b.call(t, http.MethodGet, "/api/v1/tasks/web", "").header.Get("ETag"); again != etag {
		t.Fatalf("PUT the same spec moved the ETag from %s to %s", etag, again)
	}
	h := http.Header{"Authorization": {"Bearer " + token}}
	h.Set("If-Match", etag)
	expect(t, "PUT If-Match the ETag read before the same spec was put", b.send(t, http.MethodPut, "/api/v1/tasks/web", h, b.task("web", `,"job":"changed"`)), http.StatusAccepted, "")
	if got := b.call(t, http.MethodGet, "/api/v1/tasks/web", ""); got.str("spec", "job") != "changed" || got.header.Get("ETag") == etag {
		t.Fatalf("after the conditional PUT: job %q, ETag %s; want the change applied under a new ETag", got.str("spec", "job"), got.header.Get("ETag"))
	}
}
