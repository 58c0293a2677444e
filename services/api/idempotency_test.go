package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/services/stack"
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
	keyed := func(method, path, key, body string) *reply { return b.keyed(t, method, path, key, body) }

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

// TestAKeyedRetryAfterTheTaskIsGoneGetsTheFirstVerdict: every task route
// but create answered 404 before sending when the task was missing, and
// that check ran before the Idempotency-Key was looked at. A DELETE
// retried with the same key (after a 503 "unknown" or a lost response)
// found its own delete applied and answered 404 "no task", not the first
// verdict; so did a keyed pause, update, … retried after a delete. A
// keyed request whose command TASKS holds now gets the first verdict and
// commandId; a keyed command never sent for a missing task is still a
// 404, and nothing is stored.
func TestAKeyedRetryAfterTheTaskIsGoneGetsTheFirstVerdict(t *testing.T) {
	t.Parallel()
	b := setup(t, 200)
	keyed := func(method, path, key, body string) *reply { return b.keyed(t, method, path, key, body) }
	gone := func(id string) {
		natstest.Eventually(t, 10*time.Second, "task "+id+" gone", func() bool {
			return b.call(t, http.MethodGet, "/api/v1/tasks/"+id, "").status == http.StatusNotFound
		})
	}
	sameVerdict := func(what string, first, again *reply) {
		t.Helper()
		if again.status != first.status || again.str("commandId") == "" || again.str("commandId") != first.str("commandId") || again.str("status") != first.str("status") {
			t.Fatalf("%s retried with the same key after the task is gone: %d %s, want the first verdict %d %s", what, again.status, again.raw, first.status, first.raw)
		}
	}

	expect(t, "create web", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")
	d1 := keyed(http.MethodDelete, "/api/v1/tasks/web?reason=done", "k", "")
	expect(t, "delete", d1, http.StatusAccepted, "")
	gone("web")
	sameVerdict("DELETE", d1, keyed(http.MethodDelete, "/api/v1/tasks/web?reason=done", "k", ""))
	// Another key, or none, is another command: the task is missing.
	expect(t, "delete again with another key", keyed(http.MethodDelete, "/api/v1/tasks/web?reason=done", "k2", ""), http.StatusNotFound, "id")
	expect(t, "delete again without a key", b.call(t, http.MethodDelete, "/api/v1/tasks/web?reason=done", ""), http.StatusNotFound, "id")
	if n := len(natstest.Read(t, b.js, streams.StreamTasks, "flyball.task.deleted.web")); n != 1 {
		t.Fatalf("TASKS holds %d task.deleted of web, want 1", n)
	}

	// A keyed command on a task that never existed is a 404, and is not
	// stored.
	expect(t, "keyed delete of a missing task", keyed(http.MethodDelete, "/api/v1/tasks/nope", "k", ""), http.StatusNotFound, "id")
	expect(t, "keyed pause of a missing task", keyed(http.MethodPost, "/api/v1/tasks/nope/pause", "k", ""), http.StatusNotFound, "id")
	if n := len(natstest.Read(t, b.js, streams.StreamTasks, "flyball.task.*.nope")); n != 0 {
		t.Fatalf("TASKS holds %d commands of the missing task nope, want none", n)
	}

	// The other routes that look for the task first: the keyed command,
	// then a delete, then the same keyed command again.
	for _, c := range []struct{ method, route, body string }{
		{http.MethodPut, "", fmt.Sprintf(`{"target":{"http":{"url":%q}},"schedule":{"interval":"2h"}}`, b.url)},
		{http.MethodPost, "/pause", `{"for":"1h","reason":"deploy"}`},
		{http.MethodPost, "/resume", `{"reason":"done"}`},
		{http.MethodPost, "/hint", `{"interval":"30m","ttl":"15m"}`},
		{http.MethodPost, "/run-now", `{"reason":"check"}`},
	} {
		id := "t" + strings.ReplaceAll(c.route, "/", "-")
		path := "/api/v1/tasks/" + id + c.route
		expect(t, "create "+id, b.call(t, http.MethodPost, "/api/v1/tasks", b.task(id, "")), http.StatusAccepted, "")
		first := keyed(c.method, path, "k", c.body)
		if first.status != http.StatusAccepted && first.status != http.StatusUnprocessableEntity {
			t.Fatalf("%s %s: %d %s, want a verdict", c.method, path, first.status, first.raw)
		}
		expect(t, "delete "+id, b.call(t, http.MethodDelete, "/api/v1/tasks/"+id, ""), http.StatusAccepted, "")
		gone(id)
		sameVerdict(c.method+" "+path, first, keyed(c.method, path, "k", c.body))
	}

	// A dead letter's retry looks for its task too.
	expect(t, "create dl", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("dl", "")), http.StatusAccepted, "")
	putDeadLetter(t, b.js, "dl", 1)
	r1 := keyed(http.MethodPost, "/api/v1/deadletter/1/retry", "k", "")
	expect(t, "retry", r1, http.StatusAccepted, "")
	expect(t, "delete dl", b.call(t, http.MethodDelete, "/api/v1/tasks/dl", ""), http.StatusAccepted, "")
	gone("dl")
	sameVerdict("dead letter retry", r1, keyed(http.MethodPost, "/api/v1/deadletter/1/retry", "k", ""))
	expect(t, "retry with another key", keyed(http.MethodPost, "/api/v1/deadletter/1/retry", "k2", ""), http.StatusNotFound, "seq")

	// And whether it was created again (a 409 unless ?force=true).
	expect(t, "create dl2", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("dl2", "")), http.StatusAccepted, "")
	created, err := time.Parse(time.RFC3339Nano, b.call(t, http.MethodGet, "/api/v1/tasks/dl2", "").str("schedule", "createdAt"))
	if err != nil {
		t.Fatal(err)
	}
	d := events.DeadLetter{
		TaskID: "dl2", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: created,
		Dispatch: events.Dispatch{DispatchID: "dl2:1", TaskID: "dl2", ScheduledAt: created, TaskCreatedAt: created},
	}
	if err := jsutil.PublishEvent(context.Background(), b.js, events.DeadLetterSubject("dl2"), "dl-dl2", events.TypeDeadLettered, "test", "dl2", d, created); err != nil {
		t.Fatal(err)
	}
	r2 := keyed(http.MethodPost, "/api/v1/deadletter/2/retry", "k", "")
	expect(t, "retry of dl2", r2, http.StatusAccepted, "")
	expect(t, "delete dl2", b.call(t, http.MethodDelete, "/api/v1/tasks/dl2", ""), http.StatusAccepted, "")
	gone("dl2")
	expect(t, "create dl2 again", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("dl2", "")), http.StatusAccepted, "")
	natstest.Eventually(t, 10*time.Second, "dl2 created again", func() bool {
		return b.call(t, http.MethodGet, "/api/v1/tasks/dl2", "").status == http.StatusOK
	})
	sameVerdict("retry of a recreated task's dead letter", r2, keyed(http.MethodPost, "/api/v1/deadletter/2/retry", "k", ""))
	expect(t, "retry of a recreated task's dead letter with another key", keyed(http.MethodPost, "/api/v1/deadletter/2/retry", "k2", ""), http.StatusConflict, "seq")
}

// keyed sends an authorised request with Idempotency-Key key.
func (b *bundle) keyed(t *testing.T, method, path, key, body string) *reply {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("Idempotency-Key", key)
	return b.send(t, method, path, h, body)
}

// TestAKeyedPauseRetriedAfterItsUntilGetsTheFirstVerdict: a pause's
// until must lie in the future, and that check ran before the
// Idempotency-Key was looked at. A client that retried its pause (same
// key, same body) once the until had passed got 400 "until: must be in
// the future", although the first one was applied. A retry whose command
// TASKS holds now gets the first verdict and commandId; a request with
// another key is still a 400, and nothing more is stored. The API's clock
// is moved past until; the governor's is not touched.
func TestAKeyedPauseRetriedAfterItsUntilGetsTheFirstVerdict(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"governor"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	var ahead atomic.Int64 // how far the API's clock is ahead, in ns
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js, Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }},
		Addr:   "127.0.0.1:0", Tokens: []string{token},
	})
	b := &bundle{js: js, base: "http://" + s.Addr(), url: "https://orders.example/healthz"}
	expect(t, "create web", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")

	body := fmt.Sprintf(`{"until":%q,"reason":"deploy"}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	first := b.keyed(t, http.MethodPost, "/api/v1/tasks/web/pause", "pause-1", body)
	expect(t, "pause", first, http.StatusAccepted, "")
	if first.str("status") != "accepted" {
		t.Fatalf("pause: %s, want accepted", first.raw)
	}

	ahead.Store(int64(2 * time.Hour)) // the until has passed, for the API
	again := b.keyed(t, http.MethodPost, "/api/v1/tasks/web/pause", "pause-1", body)
	if again.status != first.status || again.str("commandId") != first.str("commandId") || again.str("status") != first.str("status") {
		t.Fatalf("pause retried with the same key after its until: %d %s, want the first verdict %d %s", again.status, again.raw, first.status, first.raw)
	}
	// Another key is another command, whose until has passed.
	expect(t, "pause with another key after its until", b.keyed(t, http.MethodPost, "/api/v1/tasks/web/pause", "pause-2", body), http.StatusBadRequest, "until")
	expect(t, "pause without a key after its until", b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", body), http.StatusBadRequest, "until")
	if n := len(natstest.Read(t, js, streams.StreamTasks, "flyball.task.paused.web")); n != 1 {
		t.Fatalf("TASKS holds %d task.paused of web, want 1", n)
	}
}

// TestAKeyedPauseRetriedPastTheDuplicateWindowIsANewPause: a keyed pause
// retried once its until had passed skipped the "until must be in the
// future" check when TASKS held its first send. The API looked for that
// send a minute further back than TASKS's duplicate window (a margin for
// its clock running ahead of the server's), and a retry found in that
// minute was not deduplicated: it was stored as a new pause whose until
// had passed, which the governor applied by ending the task's pause at
// once, an operator's newer indefinite pause with it, and answered 202.
// The API now judges the window by the NATS server's clock, so a retry
// past it is a new pause with a past until: 400, and nothing is stored.
// (TASKS's window is 1 s here, standing in for its 2 minutes.)
func TestAKeyedPauseRetriedPastTheDuplicateWindowIsANewPause(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	ctx := t.Context()
	tasks, err := js.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{"governor", "api"}, APIAddr: "127.0.0.1:0", APITokens: []string{token},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	cfg := tasks.CachedInfo().Config
	cfg.Duplicates = time.Second // after the governor's start, which wants 2 minutes
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	b := &bundle{js: js, base: "http://" + st.API.Addr(), url: "https://orders.example/healthz"}
	expect(t, "create web", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")

	// A pauses for a moment, B pauses indefinitely after it.
	until := time.Now().Add(500 * time.Millisecond)
	body := fmt.Sprintf(`{"until":%q}`, until.UTC().Format(time.RFC3339Nano))
	first := b.keyed(t, http.MethodPost, "/api/v1/tasks/web/pause", "pause-1", body)
	expect(t, "timed pause", first, http.StatusAccepted, "")
	expect(t, "indefinite pause", b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"reason":"maintenance"}`), http.StatusAccepted, "")
	md, err := natstest.Read(t, js, streams.StreamTasks, "flyball.task.paused.web")[0].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the first pause's until and TASKS's duplicate window passed, by the server's clock", func() bool {
		info, err := tasks.Info(ctx)
		return err == nil && info.TimeStamp.After(md.Timestamp.Add(2*cfg.Duplicates)) && time.Now().After(until)
	})

	// A retries its pause, past the window.
	again := b.keyed(t, http.MethodPost, "/api/v1/tasks/web/pause", "pause-1", body)
	expect(t, "timed pause retried past the duplicate window, after its until", again, http.StatusBadRequest, "until")
	if g := b.call(t, http.MethodGet, "/api/v1/tasks/web", ""); g.body["schedule"].(map[string]any)["paused"] != true ||
		g.str("schedule", "pausedUntil") != "" || g.str("schedule", "pauseReason") != "maintenance" {
		t.Fatalf("schedule after the retry: %s, want B's indefinite pause", g.raw)
	}
	n := 0
	for _, m := range natstest.Read(t, js, streams.StreamTasks, "flyball.task.paused.web") {
		if m.Headers().Get(jetstream.MsgIDHeader) == first.str("commandId") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("TASKS holds %d task.paused with the retried pause's id %s, want 1", n, first.str("commandId"))
	}
}
