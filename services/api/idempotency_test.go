package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestAnIdempotencyKeyMakesARetryOneCommand: a client whose POST timed out
// cannot tell whether it was stored, so it retries. Every request got a
// new command id, so a retried run-now was a second task.hinted, and a
// retried create was a 422 "already exists" for a create that had
// succeeded. With the same Idempotency-Key (and body), a retry within
// TASKS's duplicate window is stored once and answered with the first
// request's verdict.
func TestAnIdempotencyKeyMakesARetryOneCommand(t *testing.T) {
	t.Parallel()
	b := setup(t, 200)
	keyed := func(method, path, key, body string) *reply {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+token)
		h.Set("Idempotency-Key", key)
		return b.send(t, method, path, h, body)
	}

	first := keyed(http.MethodPost, "/api/v1/tasks", "create-web-1", b.task("web", ""))
	expect(t, "create", first, http.StatusAccepted, "")
	again := keyed(http.MethodPost, "/api/v1/tasks", "create-web-1", b.task("web", ""))
	expect(t, "create retried with the same key", again, http.StatusAccepted, "")
	if again.str("commandId") != first.str("commandId") || again.str("status") != "accepted" || again.header.Get("Location") != "/api/v1/tasks/web" {
		t.Fatalf("create retried: %s, want the first answer %s", again.raw, first.raw)
	}

	r1 := keyed(http.MethodPost, "/api/v1/tasks/web/run-now", "run-now-1", `{"reason":"check"}`)
	expect(t, "run-now", r1, http.StatusAccepted, "")
	r2 := keyed(http.MethodPost, "/api/v1/tasks/web/run-now", "run-now-1", `{"reason":"check"}`)
	expect(t, "run-now retried", r2, http.StatusAccepted, "")
	if r2.str("commandId") != r1.str("commandId") || r2.str("status") != "accepted" {
		t.Fatalf("run-now retried: %s, want the first answer %s", r2.raw, r1.raw)
	}
	// Another key is another command.
	expect(t, "run-now with another key", keyed(http.MethodPost, "/api/v1/tasks/web/run-now", "run-now-2", `{"reason":"check"}`), http.StatusAccepted, "")
	if n := len(natstest.Read(t, b.js, streams.StreamTasks, "flyball.task.hinted.web")); n != 2 {
		t.Fatalf("TASKS holds %d task.hinted, want 2 (one per key)", n)
	}

	// A dead letter's retry names its entry in the path only: the same
	// key on two entries is two commands.
	putDeadLetter(t, b.js, "web", 1)
	putDeadLetter(t, b.js, "web", 2)
	d1 := keyed(http.MethodPost, "/api/v1/deadletter/1/retry", "retry-web", "")
	expect(t, "retry of entry 1", d1, http.StatusAccepted, "")
	d2 := keyed(http.MethodPost, "/api/v1/deadletter/2/retry", "retry-web", "")
	expect(t, "retry of entry 2 with the same key", d2, http.StatusAccepted, "")
	if d1.str("commandId") == d2.str("commandId") {
		t.Fatalf("the retries of entries 1 and 2 under one key are one command %q: %s", d1.str("commandId"), d2.raw)
	}
	if n := len(natstest.Read(t, b.js, streams.StreamTasks, "flyball.task.requeued.web")); n != 2 {
		t.Fatalf("TASKS holds %d task.requeued, want 2 (one per entry)", n)
	}

	for _, bad := range []string{strings.Repeat("k", 201), "has space", ""} {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+token)
		h["Idempotency-Key"] = []string{bad}
		expect(t, "Idempotency-Key "+bad[:min(len(bad), 10)], b.send(t, http.MethodPost, "/api/v1/tasks/web/run-now", h, ""), http.StatusBadRequest, "Idempotency-Key")
	}
}
