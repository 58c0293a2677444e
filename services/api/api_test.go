package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

const token = "test-token-0123456789"

type bundle struct {
	js    jetstream.JetStream
	base  string
	calls atomic.Int64
	url   string // the target's URL
}

// setup starts NATS, every service and a target answering status.
func setup(t *testing.T, status int) *bundle {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	b := &bundle{js: js}
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b.calls.Add(1)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(tg.Close)
	b.url = tg.URL
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Guard: executor.Guard{AllowLoopback: true}, APIAddr: "127.0.0.1:0", APITokens: []string{token},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	b.base = "http://" + st.API.Addr()
	return b
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (r *reply) str(path ...string) string {
	var v any = r.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func (b *bundle) do(t *testing.T, method, path, auth, body string) *reply {
	t.Helper()
	h := http.Header{}
	if auth != "" {
		h.Set("Authorization", auth)
	}
	return b.send(t, method, path, h, body)
}

// send makes one request with the headers h.
func (b *bundle) send(t *testing.T, method, path string, h http.Header, body string) *reply {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := &reply{status: resp.StatusCode, header: resp.Header}
	r.raw, _ = io.ReadAll(resp.Body)
	_ = json.Unmarshal(r.raw, &r.body)
	return r
}

func (b *bundle) call(t *testing.T, method, path, body string) *reply {
	t.Helper()
	return b.do(t, method, path, "Bearer "+token, body)
}

// expect fails unless r has the status and, for errors, names the field.
func expect(t *testing.T, what string, r *reply, status int, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.raw)
	}
	if status >= 400 {
		if r.str("error") == "" || r.str("detail") == "" {
			t.Fatalf("%s: error body without error/detail: %s", what, r.raw)
		}
		if r.str("field") != field {
			t.Fatalf("%s: field %q, want %q: %s", what, r.str("field"), field, r.raw)
		}
	}
	// Every 400 that names a field lists it in errors too, as a
	// validation failure does: a client reads one shape.
	if status == http.StatusBadRequest && field != "" {
		errs, _ := r.body["errors"].([]any)
		first, _ := func() (map[string]any, bool) {
			if len(errs) == 0 {
				return nil, false
			}
			m, ok := errs[0].(map[string]any)
			return m, ok
		}()
		if first == nil || first["field"] != field || first["reason"] == "" {
			t.Fatalf("%s: errors %v, want one naming %q: %s", what, r.body["errors"], field, r.raw)
		}
	}
}

type documentedOp struct{ method, path string }

func documentedOps(t *testing.T) []documentedOp {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []documentedOp
	for p, item := range doc.Paths {
		for m := range item {
			if slices.Contains([]string{"get", "put", "post", "delete", "patch"}, m) {
				ops = append(ops, documentedOp{strings.ToUpper(m), strings.NewReplacer("{id}", "some-task", "{seq}", "1").Replace(p)})
			}
		}
	}
	return ops
}

func TestAuthOnEveryRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, 200)
	ops := documentedOps(t)
	if len(ops) < 18 {
		t.Fatalf("only %d documented operations", len(ops))
	}
	for _, op := range ops {
		what := op.method + " " + op.path
		missing := b.do(t, op.method, op.path, "", "")
		if op.path == "/healthz" {
			expect(t, what+" without a token", missing, http.StatusOK, "")
			continue
		}
		// RFC 6750 section 3: no token (or another scheme) is a challenge
		// without an error code; a token not accepted is invalid_token.
		expectChallenge(t, what+" without a token", missing, noTokenChallenge)
		expectChallenge(t, what+" with a basic auth header", b.do(t, op.method, op.path, "Basic dXNlcjpwYXNz", ""), noTokenChallenge)
		expectChallenge(t, what+" with a wrong token", b.do(t, op.method, op.path, "Bearer wrong-token-0123456789", ""), invalidTokenChallenge)
		// With the right token every documented route is served (whatever
		// its answer to this empty request), never the catch-all.
		ok := b.call(t, op.method, op.path, "")
		if ok.status == http.StatusUnauthorized || ok.status == http.StatusForbidden || ok.status == http.StatusMethodNotAllowed ||
			strings.HasPrefix(ok.str("detail"), "no route") {
			t.Errorf("%s with the right token: %d %s", what, ok.status, ok.raw)
		}
	}
	expect(t, "unknown route", b.call(t, http.MethodGet, "/api/v1/nothing", ""), http.StatusNotFound, "")
	expect(t, "unknown route without a token", b.do(t, http.MethodGet, "/api/v1/nothing", "", ""), http.StatusUnauthorized, "Authorization")
	wrong := b.call(t, http.MethodPatch, "/api/v1/tasks/x", "")
	expect(t, "wrong method", wrong, http.StatusMethodNotAllowed, "")
	if got := wrong.header.Get("Allow"); got != "GET, PUT, DELETE" {
		t.Errorf("405 Allow: %q, want the path's methods %q", got, "GET, PUT, DELETE")
	}
	spec := b.call(t, http.MethodGet, "/api/v1/openapi.json", "")
	if spec.status != http.StatusOK || !bytes.Equal(spec.raw, api.OpenAPI) {
		t.Fatalf("openapi.json: %d", spec.status)
	}
	if m := b.call(t, http.MethodGet, "/metrics", ""); m.status != http.StatusOK || !bytes.Contains(m.raw, []byte("flyball_")) {
		t.Fatalf("metrics: %d", m.status)
	}
}

func (b *bundle) task(id, extra string) string {
	return fmt.Sprintf(`{"id":%q,"labels":{"team":"ops"},"target":{"http":{"url":%q}},"schedule":{"interval":"1h"}%s}`, id, b.url, extra)
}

// TestRepairATaskWhoseStoredSpecDoesNotDecode: the executor skips the
// runs of such a task and says "fix or re-create the task", but update,
// delete and pause answered 503 "stored spec of task \"web\" does not
// decode", so the API could not repair it. GET shows the task with why
// its spec is unreadable, and the list includes it.
func TestRepairATaskWhoseStoredSpecDoesNotDecode(t *testing.T) {
	t.Parallel()
	b := setup(t, 200)
	expect(t, "create", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")
	kv, err := b.js.KeyValue(context.Background(), streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(context.Background(), "web", "garbage"); err != nil {
		t.Fatal(err)
	}
	// Shown, not hidden: GET answered 503 (try again later, for a state no
	// retry changes), and the list left the task out.
	got := b.call(t, http.MethodGet, "/api/v1/tasks/web", "")
	expect(t, "get of the garbled spec", got, http.StatusOK, "")
	if got.str("spec", "id") != "web" || !strings.HasPrefix(got.str("unreadable"), "stored spec does not decode: ") ||
		!strings.Contains(got.str("unreadable"), "task.updated") || got.str("schedule", "source") == "" {
		t.Fatalf("get of the garbled spec: %s, want its id, schedule and why it is unreadable", got.raw)
	}
	list := b.call(t, http.MethodGet, "/api/v1/tasks", "")
	if list.status != http.StatusOK || !strings.Contains(string(list.raw), `"unreadable":"stored spec does not decode: `) {
		t.Fatalf("list with the garbled spec: %d %s, want the task listed as unreadable", list.status, list.raw)
	}
	expect(t, "update", b.call(t, http.MethodPut, "/api/v1/tasks/web", b.task("web", "")), http.StatusAccepted, "")
	expect(t, "get after the update", b.call(t, http.MethodGet, "/api/v1/tasks/web", ""), http.StatusOK, "")
	if _, err := kv.PutString(context.Background(), "web", "garbage"); err != nil {
		t.Fatal(err)
	}
	expect(t, "delete", b.call(t, http.MethodDelete, "/api/v1/tasks/web", ""), http.StatusAccepted, "")
	expect(t, "get after the delete", b.call(t, http.MethodGet, "/api/v1/tasks/web", ""), http.StatusNotFound, "id")
}

func TestTaskRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, 200)

	// Create: validated before anything is published, every reason listed.
	bad := b.call(t, http.MethodPost, "/api/v1/tasks", `{"id":"a.b","target":{"http":{"url":"ftp://x"}},"schedule":{"interval":"10ms"}}`)
	expect(t, "invalid spec", bad, http.StatusBadRequest, "id")
	if errs, _ := bad.body["errors"].([]any); len(errs) != 3 {
		t.Fatalf("invalid spec: want 3 reasons, got %s", bad.raw)
	}
	expect(t, "unknown field", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", `,"colour":"red"`)), http.StatusBadRequest, "colour")
	expect(t, "wrong type", b.call(t, http.MethodPost, "/api/v1/tasks", `{"id":"web","schedule":{"interval":5}}`), http.StatusBadRequest, "schedule.interval")
	expect(t, "not JSON", b.call(t, http.MethodPost, "/api/v1/tasks", `{`), http.StatusBadRequest, "")
	big := b.task("web", fmt.Sprintf(`,"job":%q`, strings.Repeat("x", 2<<20)))
	expect(t, "body over the cap", b.call(t, http.MethodPost, "/api/v1/tasks", big), http.StatusRequestEntityTooLarge, "")

	created := b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", ""))
	expect(t, "create", created, http.StatusAccepted, "")
	if created.str("status") != "accepted" || created.str("accepted", "source") != "baseline-interval" || created.header.Get("Location") != "/api/v1/tasks/web" {
		t.Fatalf("create: %s (Location %q)", created.raw, created.header.Get("Location"))
	}
	dup := b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", ""))
	expect(t, "create twice", dup, http.StatusUnprocessableEntity, "id")
	if dup.str("status") != "rejected" || dup.str("commandId") == "" || dup.header.Get("Location") != "" {
		t.Fatalf("create twice: %s (Location %q: want none, nothing was created)", dup.raw, dup.header.Get("Location"))
	}
	natstest.Eventually(t, 10*time.Second, "the first run", func() bool { return b.calls.Load() >= 1 })

	// Reads.
	got := b.call(t, http.MethodGet, "/api/v1/tasks/web", "")
	expect(t, "get", got, http.StatusOK, "")
	if got.str("spec", "id") != "web" || got.str("schedule", "taskId") != "web" {
		t.Fatalf("get: %s", got.raw)
	}
	expect(t, "get a bad id", b.call(t, http.MethodGet, "/api/v1/tasks/a.b", ""), http.StatusBadRequest, "id")
	expect(t, "get a missing task", b.call(t, http.MethodGet, "/api/v1/tasks/nope", ""), http.StatusNotFound, "id")
	for _, c := range []struct {
		query string
		want  int
	}{{"", 1}, {"?label=team=ops", 1}, {"?label=team=dev", 0}, {"?job=nope", 0}} {
		l := b.call(t, http.MethodGet, "/api/v1/tasks"+c.query, "")
		if tasks, _ := l.body["tasks"].([]any); l.status != http.StatusOK || len(tasks) != c.want {
			t.Fatalf("list%s: %d tasks, want %d: %s", c.query, len(tasks), c.want, l.raw)
		}
	}
	expect(t, "bad label selector", b.call(t, http.MethodGet, "/api/v1/tasks?label=oops", ""), http.StatusBadRequest, "label")

	// Update.
	expect(t, "update another id", b.call(t, http.MethodPut, "/api/v1/tasks/web", b.task("other", "")), http.StatusBadRequest, "id")
	expect(t, "update a missing task", b.call(t, http.MethodPut, "/api/v1/tasks/nope", b.task("nope", "")), http.StatusNotFound, "id")
	expect(t, "update invalid", b.call(t, http.MethodPut, "/api/v1/tasks/web", `{"schedule":{"interval":"1h"}}`), http.StatusBadRequest, "target")
	upd := b.call(t, http.MethodPut, "/api/v1/tasks/web", fmt.Sprintf(`{"target":{"http":{"url":%q}},"schedule":{"interval":"2h"}}`, b.url))
	expect(t, "update", upd, http.StatusAccepted, "")
	if upd.str("accepted", "command") != "io.flyball.task.updated" {
		t.Fatalf("update: %s", upd.raw)
	}

	// Pause and resume.
	expect(t, "pause with until and for", b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"1h","until":"2030-01-01T00:00:00Z"}`), http.StatusBadRequest, "for")
	// "for":"0s" was read as no "for" at all: an indefinite pause.
	expect(t, "pause for no time", b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"0s"}`), http.StatusBadRequest, "for")
	expect(t, "pause for no time and until", b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"0s","until":"2030-01-01T00:00:00Z"}`), http.StatusBadRequest, "for")
	expect(t, "pause until the past", b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"until":"2001-01-01T00:00:00Z"}`), http.StatusBadRequest, "until")
	expect(t, "pause a missing task", b.call(t, http.MethodPost, "/api/v1/tasks/nope/pause", ""), http.StatusNotFound, "id")
	p := b.call(t, http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"1h","reason":"deploy"}`)
	expect(t, "pause", p, http.StatusAccepted, "")
	if p.str("accepted", "source") != "paused" {
		t.Fatalf("pause: %s", p.raw)
	}
	if s := b.call(t, http.MethodGet, "/api/v1/tasks/web", ""); s.body["schedule"].(map[string]any)["paused"] != true || s.str("schedule", "pauseReason") != "deploy" {
		t.Fatalf("paused schedule: %s", s.raw)
	}
	r := b.call(t, http.MethodPost, "/api/v1/tasks/web/resume", "")
	expect(t, "resume", r, http.StatusAccepted, "")

	// Hints and run-now.
	expect(t, "hint without interval or at", b.call(t, http.MethodPost, "/api/v1/tasks/web/hint", `{}`), http.StatusBadRequest, "interval")
	expect(t, "hint with a number", b.call(t, http.MethodPost, "/api/v1/tasks/web/hint", `{"interval":30}`), http.StatusBadRequest, "interval")
	expect(t, "hint with a long ttl", b.call(t, http.MethodPost, "/api/v1/tasks/web/hint", `{"interval":"30s","ttl":"999h"}`), http.StatusBadRequest, "ttl")
	expect(t, "hint without a body", b.call(t, http.MethodPost, "/api/v1/tasks/web/hint", ""), http.StatusBadRequest, "")
	h := b.call(t, http.MethodPost, "/api/v1/tasks/web/hint", `{"interval":"10m","ttl":"15m","reason":"incident"}`)
	expect(t, "hint", h, http.StatusAccepted, "")
	if h.str("accepted", "source") != "hint-interval" {
		t.Fatalf("hint: %s", h.raw)
	}
	before := b.calls.Load()
	rn := b.call(t, http.MethodPost, "/api/v1/tasks/web/run-now", `{"reason":"check"}`)
	expect(t, "run-now", rn, http.StatusAccepted, "")
	if rn.str("accepted", "source") != "hint-oneshot" {
		t.Fatalf("run-now: %s", rn.raw)
	}
	natstest.Eventually(t, 10*time.Second, "run-now runs the task", func() bool { return b.calls.Load() > before })

	// Runs.
	var runs []any
	natstest.Eventually(t, 10*time.Second, "two succeeded runs on RUNS", func() bool {
		l := b.call(t, http.MethodGet, "/api/v1/tasks/web/runs?limit=1000", "")
		runs, _ = l.body["runs"].([]any)
		n := 0
		for _, r := range runs {
			if r.(map[string]any)["outcome"] == "succeeded" {
				n++
			}
		}
		return n >= 2
	})
	one := b.call(t, http.MethodGet, "/api/v1/tasks/web/runs?limit=1", "")
	if l, _ := one.body["runs"].([]any); one.status != http.StatusOK || len(l) != 1 {
		t.Fatalf("runs?limit=1: %s", one.raw)
	}
	expect(t, "runs with limit 0", b.call(t, http.MethodGet, "/api/v1/tasks/web/runs?limit=0", ""), http.StatusBadRequest, "limit")
	expect(t, "runs with limit abc", b.call(t, http.MethodGet, "/api/v1/tasks/web/runs?limit=abc", ""), http.StatusBadRequest, "limit")

	// Delete.
	expect(t, "delete", b.call(t, http.MethodDelete, "/api/v1/tasks/web?reason=done", ""), http.StatusAccepted, "")
	expect(t, "get after delete", b.call(t, http.MethodGet, "/api/v1/tasks/web", ""), http.StatusNotFound, "id")
	expect(t, "delete again", b.call(t, http.MethodDelete, "/api/v1/tasks/web", ""), http.StatusNotFound, "id")
}

func TestDeadLetterRuntimeAndHealthRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusNotFound) // a 404 is permanent: one call, then dead-lettered
	expect(t, "create", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("gone", "")), http.StatusAccepted, "")

	var list []any
	natstest.Eventually(t, 10*time.Second, "a dead letter for gone", func() bool {
		l := b.call(t, http.MethodGet, "/api/v1/deadletter?task=gone", "")
		list, _ = l.body["deadLetters"].([]any)
		return len(list) == 1
	})
	entry := list[0].(map[string]any)
	seq := int(entry["seq"].(float64))
	if e := entry["entry"].(map[string]any); e["taskId"] != "gone" || e["reason"] != "permanent" {
		t.Fatalf("dead letter: %v", entry)
	}
	expect(t, "list with a bad task", b.call(t, http.MethodGet, "/api/v1/deadletter?task=a.b", ""), http.StatusBadRequest, "task")
	expect(t, "list with limit 5000", b.call(t, http.MethodGet, "/api/v1/deadletter?limit=5000", ""), http.StatusBadRequest, "limit")
	if l := b.call(t, http.MethodGet, "/api/v1/deadletter?task=other", ""); l.status != http.StatusOK || len(l.body["deadLetters"].([]any)) != 0 {
		t.Fatalf("list of another task: %s", l.raw)
	}
	one := b.call(t, http.MethodGet, fmt.Sprintf("/api/v1/deadletter/%d", seq), "")
	if one.status != http.StatusOK || one.str("entry", "taskId") != "gone" {
		t.Fatalf("get dead letter: %s", one.raw)
	}
	expect(t, "get seq 0", b.call(t, http.MethodGet, "/api/v1/deadletter/0", ""), http.StatusBadRequest, "seq")
	expect(t, "get seq abc", b.call(t, http.MethodGet, "/api/v1/deadletter/abc", ""), http.StatusBadRequest, "seq")
	expect(t, "get a missing seq", b.call(t, http.MethodGet, "/api/v1/deadletter/999", ""), http.StatusNotFound, "seq")
	expect(t, "retry a missing seq", b.call(t, http.MethodPost, "/api/v1/deadletter/999/retry", ""), http.StatusNotFound, "seq")
	// Health and runtime before the retry: the requeued run is called and
	// dead-lettered again within milliseconds, so a health read after the
	// retry may count one dead letter or two.
	h := b.call(t, http.MethodGet, "/api/v1/scheduler/health", "")
	expect(t, "health", h, http.StatusOK, "")
	var health struct {
		Enabled bool `json:"enabled"`
		Queue   struct {
			Depth   *int           `json:"depth"`
			PerType map[string]int `json:"perType"`
		} `json:"queue"`
		DeadLetter struct {
			Count uint64 `json:"count"`
			Tasks []struct {
				TaskID    string `json:"taskId"`
				LastError string `json:"lastError"`
			} `json:"tasks"`
		} `json:"deadLetter"`
		Breakers  []any `json:"breakers"`
		Staleness []struct {
			TaskID string  `json:"taskId"`
			Score  float64 `json:"score"`
		} `json:"staleness"`
	}
	if err := json.Unmarshal(h.raw, &health); err != nil {
		t.Fatal(err)
	}
	if !health.Enabled || health.Queue.Depth == nil || health.DeadLetter.Count != 1 || len(health.DeadLetter.Tasks) != 1 ||
		health.DeadLetter.Tasks[0].TaskID != "gone" || !strings.Contains(health.DeadLetter.Tasks[0].LastError, "404") ||
		health.Breakers == nil || len(health.Staleness) != 1 || health.Staleness[0].TaskID != "gone" {
		t.Fatalf("health: %s", h.raw)
	}

	rt := b.call(t, http.MethodGet, "/api/v1/runtime", "")
	expect(t, "runtime", rt, http.StatusOK, "")
	kinds := map[string]bool{}
	for _, in := range rt.body["instances"].([]any) {
		m := in.(map[string]any)
		if m["status"] == "online" {
			kinds[m["kind"].(string)] = true
		}
	}
	for _, k := range stack.All {
		if !kinds[k] {
			t.Errorf("runtime: no online %s instance in %s", k, rt.raw)
		}
	}

	retry := b.call(t, http.MethodPost, fmt.Sprintf("/api/v1/deadletter/%d/retry", seq), `{"reason":"fixed"}`)
	expect(t, "retry", retry, http.StatusAccepted, "")
	if retry.str("accepted", "command") != "io.flyball.task.requeued" {
		t.Fatalf("retry: %s", retry.raw)
	}
	// The requeue named the task the entry is of, which the governor
	// found to be the task of this ID now.
	created := entry["entry"].(map[string]any)["dispatch"].(map[string]any)["taskCreatedAt"]
	if rq, raw := lastRequeue(t, b.js, "gone"); created == nil || rq.TaskCreatedAt.Format(time.RFC3339Nano) != created {
		t.Fatalf("retry stored %s, want taskCreatedAt %v (the entry's dispatch's)", raw, created)
	}

	// Once the task is deleted, a retry is "no such task" (404, as the
	// docs promise), not the governor's rejection of the requeue (422).
	expect(t, "delete the dead-lettered task", b.call(t, http.MethodDelete, "/api/v1/tasks/gone", ""), http.StatusAccepted, "")
	expect(t, "retry after the task was deleted", b.call(t, http.MethodPost, fmt.Sprintf("/api/v1/deadletter/%d/retry", seq), ""), http.StatusNotFound, "seq")
}

// TestDeleteWithABodyIsRefused: DELETE reads its reason from ?reason=. A
// body such as {"reason":"…"} (the way pause and resume take it) was
// dropped without a word, and the task deleted with no reason recorded.
func TestDeleteWithABodyIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, 200)
	expect(t, "create", b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", "")), http.StatusAccepted, "")
	expect(t, "delete with a body", b.call(t, http.MethodDelete, "/api/v1/tasks/web", `{"reason":"retired"}`), http.StatusBadRequest, "body")
	expect(t, "get after the refused delete", b.call(t, http.MethodGet, "/api/v1/tasks/web", ""), http.StatusOK, "")
	expect(t, "delete", b.call(t, http.MethodDelete, "/api/v1/tasks/web?reason=retired", ""), http.StatusAccepted, "")
}

// TestA400ListsEveryProblem: the errors of a 400 list every problem of
// the request, as the OpenAPI BadRequest says, but a pause with a
// negative for and an oversized reason named only for, an update with a
// mismatched id and a 1ms interval only id, and a dead letter's retry
// with an oversized reason and ?force=maybe only reason.
func TestA400ListsEveryProblem(t *testing.T) {
	t.Parallel()
	b, _, _ := startAPIOnly(t)
	long := strings.Repeat("x", 3000)
	for _, c := range []struct {
		method, path, body string
		fields             []string
	}{
		{http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"-1h","reason":"` + long + `"}`, []string{"for", "reason"}},
		{http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"1h","until":"2000-01-01T00:00:00Z","reason":"` + long + `"}`, []string{"for", "reason", "until"}},
		{http.MethodPut, "/api/v1/tasks/web", `{"id":"other","target":{"http":{"url":"https://orders.example/x"}},"schedule":{"interval":"1ms"}}`, []string{"id", "schedule.interval"}},
		{http.MethodPost, "/api/v1/deadletter/1/retry?force=maybe", `{"reason":"` + long + `"}`, []string{"reason", "force"}},
	} {
		what := c.method + " " + c.path
		r := b.call(t, c.method, c.path, c.body)
		expect(t, what, r, http.StatusBadRequest, c.fields[0])
		var got []string
		for _, e := range r.body["errors"].([]any) {
			got = append(got, e.(map[string]any)["field"].(string))
		}
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s: errors name %q, want %q: %s", what, got, c.fields, r.raw[:min(len(r.raw), 600)])
		}
	}
}
