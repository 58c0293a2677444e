package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/streams"
)

// pageOf reads one page of a listing: the value of field at key in each
// item (a task's spec.id, a record's seq) and the next cursor ("" on the
// last page).
func pageOf(t *testing.T, b *bundle, path, list string, key func(map[string]any) string) ([]string, string) {
	t.Helper()
	r := b.call(t, http.MethodGet, path, "")
	expect(t, "GET "+path, r, http.StatusOK, "")
	items, ok := r.body[list].([]any)
	if !ok {
		t.Fatalf("GET %s: no %s list: %s", path, list, r.raw)
	}
	got := []string{}
	for _, it := range items {
		got = append(got, key(it.(map[string]any)))
	}
	next := ""
	if v, ok := r.body["next"]; ok {
		next = fmt.Sprint(v)
	}
	return got, next
}

func seqKey(m map[string]any) string { return fmt.Sprint(m["seq"]) }

// specID is the key of a task in the API's task list.
func specID(m map[string]any) string { return m["spec"].(map[string]any)["id"].(string) }

// putSpecs stores a spec of each id (the id alone) in flyball-tasks, as
// the governor would, and returns the bucket.
func putSpecs(t *testing.T, js jetstream.JetStream, ids ...string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := kv.Put(t.Context(), id, fmt.Appendf(nil, `{"id":%q}`, id)); err != nil {
			t.Fatal(err)
		}
	}
	return kv
}

// TestListingsPageWithANextCursor: each listing, asked for 2 of 3 items,
// returns 2 and a next cursor, and the cursor returns the third with no
// next. Before pages, an operator could not see past the newest 1,000
// runs or dead letters.
func TestListingsPageWithANextCursor(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	putSpecs(t, js, "c", "a", "b")
	for i := range 3 {
		putRun(t, js, "web", i+1) // RUNS seqs 1, 2, 3
		putDeadLetter(t, js, "web", i)
	}

	for _, c := range []struct {
		name, first, list string
		key               func(map[string]any) string
		want1, want2      []string
		next              string
		second            string
	}{
		{"tasks", "/api/v1/tasks?limit=2", "tasks", specID, []string{"a", "b"}, []string{"c"}, "b", "/api/v1/tasks?limit=2&after=b"},
		{"runs", "/api/v1/tasks/web/runs?limit=2", "runs", seqKey, []string{"2", "3"}, []string{"1"}, "2", "/api/v1/tasks/web/runs?limit=2&before=2"},
		{"dead letters", "/api/v1/deadletter?limit=2", "deadLetters", seqKey, []string{"2", "3"}, []string{"1"}, "2", "/api/v1/deadletter?limit=2&before=2"},
		{"one task's dead letters", "/api/v1/deadletter?task=web&limit=2", "deadLetters", seqKey, []string{"2", "3"}, []string{"1"}, "2", "/api/v1/deadletter?task=web&limit=2&before=2"},
	} {
		got, next := pageOf(t, b, c.first, c.list, c.key)
		if !slices.Equal(got, c.want1) || next != c.next {
			t.Errorf("%s: GET %s = %v, next %q; want %v, next %q", c.name, c.first, got, next, c.want1, c.next)
		}
		got, next = pageOf(t, b, c.second, c.list, c.key)
		if !slices.Equal(got, c.want2) || next != "" {
			t.Errorf("%s: GET %s = %v, next %q; want %v and no next", c.name, c.second, got, next, c.want2)
		}
	}
	// Without limit, a default page, here holding every task.
	if got, next := pageOf(t, b, "/api/v1/tasks", "tasks", specID); !slices.Equal(got, []string{"a", "b", "c"}) || next != "" {
		t.Errorf("GET /api/v1/tasks = %v, next %q; want every task and no next", got, next)
	}
}

// TestTaskListWithoutLimitIsOnePage: GET /api/v1/tasks without limit
// answers the first 1,000 tasks and a next cursor, which returns the
// rest. It answered every task in one response: at a million tasks,
// hundreds of MB held by the API and sent at once.
func TestTaskListWithoutLimitIsOnePage(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	const tasks = 1002
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%04d", i)
	}
	putSpecs(t, js, ids...)
	got, next := pageOf(t, b, "/api/v1/tasks", "tasks", specID)
	if len(got) != 1000 || got[0] != "t0000" || got[999] != "t0999" || next != "t0999" {
		t.Fatalf("GET /api/v1/tasks: %d tasks (%v … %v), next %q; want t0000 … t0999 and next t0999", len(got), got[:min(len(got), 1)], got[max(len(got)-1, 0):], next)
	}
	got, next = pageOf(t, b, "/api/v1/tasks?after="+next, "tasks", specID)
	if !slices.Equal(got, []string{"t1000", "t1001"}) || next != "" {
		t.Errorf("GET /api/v1/tasks?after=t0999 = %v, next %q; want t1000, t1001 and no next", got, next)
	}
}

// TestBadCursorsAreRefused: a cursor or limit that is not one is a 400
// naming the parameter and saying what it takes, not an empty or a first
// page.
func TestBadCursorsAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, c := range []struct{ path, field, want string }{
		{"/api/v1/tasks?after=a.b", "after", `must be a task id`},
		{"/api/v1/tasks?limit=0", "limit", `must be an integer in [1, 1000], got "0"`},
		{"/api/v1/tasks?limit=1001", "limit", `must be an integer in [1, 1000], got "1001"`},
		{"/api/v1/tasks/web/runs?before=0", "before", `must be a stream sequence (a positive integer`},
		{"/api/v1/tasks/web/runs?before=-3", "before", `got "-3"`},
		{"/api/v1/tasks/web/runs?before=abc", "before", `got "abc"`},
		{"/api/v1/deadletter?before=1.5", "before", `got "1.5"`},
		{"/api/v1/deadletter?task=web&before=18446744073709551616", "before", `must be a stream sequence`},
		// Given empty: refused, not taken for absent (a first page, every
		// task's dead letters, the default).
		{"/api/v1/tasks?after=", "after", `must be a task id`},
		{"/api/v1/tasks?limit=", "limit", `must be an integer in [1, 1000], got ""`},
		{"/api/v1/deadletter?task=", "task", `must be a task id`},
		{"/api/v1/deadletter?before=", "before", `got ""`},
		{"/api/v1/scheduler/health?staleness=", "staleness", `must be an integer`},
	} {
		r := b.call(t, http.MethodGet, c.path, "")
		expect(t, "GET "+c.path, r, http.StatusBadRequest, c.field)
		if d := r.str("detail"); !strings.Contains(d, c.want) {
			t.Errorf("GET %s: detail %q, want it to contain %q", c.path, d, c.want)
		}
	}
}

func putRun(t *testing.T, js jetstream.JetStream, task string, attempt int) {
	t.Helper()
	run := events.Run{DispatchID: fmt.Sprintf("%s:%d", task, attempt), TaskID: task, Attempt: attempt, Status: 200}
	if err := jsutil.PublishEvent(context.Background(), js, events.RunSubject(events.OutcomeSucceeded, task), "",
		events.OutcomeSucceeded.Type(), "test", task, run, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
}

// TestTaskPagesDoNotListEveryTaskKey: the API keeps an index of the task
// IDs, so that a page reads its own tasks only. Each page listed every
// key of flyball-tasks through a consumer of its own: at a million tasks,
// a million key headers read for a page of 50. Here five pages (with a
// task created and one deleted between them) create one consumer on
// KV_flyball-tasks, the index's, and still page right.
func TestTaskPagesDoNotListEveryTaskKey(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	ctx := context.Background()
	kv := putSpecs(t, js, "a", "c", "e", "g")
	put := func(id string) { t.Helper(); putSpecs(t, js, id) }
	// The server sends a consumer's advisory before its create answer,
	// over this connection too: it is pending here before a page that
	// created the consumer is answered.
	created, err := js.Conn().SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.CREATED.KV_" + streams.BucketTasks + ".*")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for path, i := "/api/v1/tasks?limit=1", 0; path != ""; i++ {
		page, next := pageOf(t, b, path, "tasks", specID)
		got = append(got, page...)
		switch i {
		case 0:
			put("f")
		case 1:
			put("b") // before the cursor, c: not listed
			if err := kv.Delete(ctx, "e"); err != nil {
				t.Fatal(err)
			}
		}
		path = ""
		if next != "" {
			path = "/api/v1/tasks?limit=1&after=" + next
		}
	}
	if want := []string{"a", "c", "f", "g"}; !slices.Equal(got, want) {
		t.Errorf("pages of 1 listed %v; want %v", got, want)
	}
	if n, _, err := created.Pending(); err != nil || n > 1 {
		t.Errorf("consumers created on KV_%s over %d pages: %d (%v); want at most 1, the index's", streams.BucketTasks, len(got), n, err)
	}
}

// TestATaskPageWithoutTheIndexIsCounted: a page the task index cannot
// answer (its watch's consumer deleted here) lists every task key, which
// at a million tasks costs seconds; the API counts each such page in
// flyball_api_task_index_fallbacks_total, so an operator sees it.
func TestATaskPageWithoutTheIndexIsCounted(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var warned []string // the err of each "task page listed every task key"
	b, js, _ := startAPIOnlyLogging(t, slog.New(logFunc(func(r slog.Record) {
		if r.Message != "task page listed every task key" {
			return
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				mu.Lock()
				warned = append(warned, a.Value.String())
				mu.Unlock()
			}
			return true
		})
	})))
	ctx := context.Background()
	putSpecs(t, js, "a")
	fallbacks := func() string {
		t.Helper()
		r := b.call(t, http.MethodGet, "/metrics", "")
		for line := range strings.Lines(string(r.raw)) {
			if v, ok := strings.CutPrefix(line, "flyball_api_task_index_fallbacks_total "); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("/metrics has no flyball_api_task_index_fallbacks_total:\n%s", r.raw)
		return ""
	}
	if page, _ := pageOf(t, b, "/api/v1/tasks?limit=10", "tasks", specID); !slices.Equal(page, []string{"a"}) || fallbacks() != "0" {
		t.Fatalf("first page %v, fallbacks %s; want [a] from the index, 0", page, fallbacks())
	}
	stream, err := js.Stream(ctx, "KV_"+streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	for name := range stream.ConsumerNames(ctx).Name() {
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	putSpecs(t, js, "b")
	if page, _ := pageOf(t, b, "/api/v1/tasks?limit=10", "tasks", specID); !slices.Equal(page, []string{"a", "b"}) {
		t.Fatalf("page after the index's watch was lost: %v, want [a b]", page)
	}
	if got := fallbacks(); got != "1" {
		t.Errorf("flyball_api_task_index_fallbacks_total %s after a page listed without the index; want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warned) != 1 || !strings.Contains(warned[0], streams.BucketTasks) {
		t.Errorf("logged \"task page listed every task key\" with err %q; want once, naming the watch of %s", warned, streams.BucketTasks)
	}
}

// logFunc is a slog.Handler that passes every record to itself.
type logFunc func(slog.Record)

func (logFunc) Enabled(context.Context, slog.Level) bool { return true }

func (f logFunc) Handle(_ context.Context, r slog.Record) error { f(r); return nil }

func (f logFunc) WithAttrs([]slog.Attr) slog.Handler { return f }

func (f logFunc) WithGroup(string) slog.Handler { return f }
