package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// apiOnly starts NATS and only the API service: enough for requests
// refused before anything is published, and for reads of what the test
// itself stored (its dead letters are the only ones).
func apiOnly(t *testing.T) (*bundle, jetstream.JetStream) {
	t.Helper()
	b, js, _ := startAPIOnly(t)
	return b, js
}

func putDeadLetter(t *testing.T, js jetstream.JetStream, task string, n int) {
	t.Helper()
	now := time.Now().UTC()
	d := events.DeadLetter{
		TaskID: task, Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: now,
		Dispatch: events.Dispatch{DispatchID: fmt.Sprintf("%s:%d", task, n), TaskID: task, ScheduledAt: now},
	}
	if err := jsutil.PublishEvent(context.Background(), js, events.DeadLetterSubject(task), fmt.Sprintf("dl-%s-%d", task, n),
		events.TypeDeadLettered, "test", task, d, now); err != nil {
		t.Fatal(err)
	}
}

// TestDeadLetterListAfterTaskPurge: after one task's dead letters are
// purged (flyball dlq purge --task), the unfiltered list and the health
// summary still return the newest remaining entries, not the few (or none)
// left in the last `limit` sequences.
func TestDeadLetterListAfterTaskPurge(t *testing.T) {
	b, js := apiOnly(t)
	for i := range 3 {
		putDeadLetter(t, js, "keep", i)
	}
	for i := range 3 {
		putDeadLetter(t, js, "gone", i)
	}
	st, err := js.Stream(context.Background(), streams.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background(), jetstream.WithPurgeSubject(events.DeadLetterSubject("gone"))); err != nil {
		t.Fatal(err)
	}
	l := b.call(t, http.MethodGet, "/api/v1/deadletter?limit=3", "")
	list, _ := l.body["deadLetters"].([]any)
	if l.status != http.StatusOK || len(list) != 3 {
		t.Fatalf("GET /api/v1/deadletter?limit=3 after purging another task: %d entries, want 3 (3 of task keep remain): %s", len(list), l.raw)
	}
	for i, e := range list {
		if task, _ := e.(map[string]any)["entry"].(map[string]any)["taskId"].(string); task != "keep" {
			t.Errorf("entry %d is of task %q, want keep: %s", i, task, l.raw)
		}
	}
	h := b.call(t, http.MethodGet, "/api/v1/scheduler/health", "")
	dl, _ := h.body["deadLetter"].(map[string]any)
	tasks, _ := dl["tasks"].([]any)
	if dl["count"] != float64(3) || len(tasks) != 3 {
		t.Fatalf("health deadLetter: count %v, %d newest listed, want 3 and 3: %s", dl["count"], len(tasks), h.raw)
	}
}

// TestRetryOfARecreatedTasksDeadLetterIsAConflict: a dead letter of a task
// deleted and created again under the same ID since is not the new task's.
// Its retry requeued the new task, which ran once; it is now a 409 naming
// the recreation, unless ?force=true asks for that run.
func TestRetryOfARecreatedTasksDeadLetterIsAConflict(t *testing.T) {
	b, js := apiOnly(t)
	ctx := context.Background()
	was := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	now := was.Add(time.Hour)
	d := events.DeadLetter{
		TaskID: "web", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: was.Add(time.Minute),
		Dispatch: events.Dispatch{DispatchID: "web:1", TaskID: "web", ScheduledAt: was, TaskCreatedAt: was},
	}
	if err := jsutil.PublishEvent(ctx, js, events.DeadLetterSubject("web"), "dl-web", events.TypeDeadLettered, "test", "web", d, was); err != nil {
		t.Fatal(err)
	}
	spec := events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	natstest.PutJSON(t, js, streams.BucketTasks, "web", spec)
	natstest.PutJSON(t, js, streams.BucketSchedules, "web", gov.State{TaskID: "web", CreatedAt: now, NextRunAt: now.Add(time.Hour)})

	r := b.call(t, http.MethodPost, "/api/v1/deadletter/1/retry", "")
	expect(t, "retry of the deleted task's dead letter", r, http.StatusConflict, "seq")
	if !strings.Contains(r.str("detail"), "created again at "+now.Format(time.RFC3339Nano)) {
		t.Fatalf("retry of the deleted task's dead letter: %s, want a detail naming the recreation", r.raw)
	}
	expect(t, "retry with force=maybe", b.call(t, http.MethodPost, "/api/v1/deadletter/1/retry?force=maybe", ""), http.StatusBadRequest, "force")
	// No governor runs: the forced requeue is stored, and pending. It
	// names no task creation: it runs the task of this ID now.
	expect(t, "forced retry", b.call(t, http.MethodPost, "/api/v1/deadletter/1/retry?force=true", ""), http.StatusAccepted, "")
	if rq, raw := lastRequeue(t, js, "web"); rq.DeadLetterSeq != 1 || !rq.TaskCreatedAt.IsZero() || strings.Contains(raw, "taskCreatedAt") {
		t.Fatalf("forced retry stored %s, want deadLetterSeq 1 and no taskCreatedAt", raw)
	}
}

// lastRequeue is the data of the last task.requeued of task id on TASKS,
// decoded and as stored.
func lastRequeue(t *testing.T, js jetstream.JetStream, id string) (events.TaskRequeue, string) {
	t.Helper()
	var rq events.TaskRequeue
	raw := natstest.LastData(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRequeued, id), &rq)
	return rq, raw
}

// TestRetryNamesTheDeadLettersTask: the requeue a retry publishes names
// the task creation the dead letter is of (its dispatch's taskCreatedAt),
// so the governor rejects it if the task is deleted and created again
// after the API's check (which a task.requeued published directly never
// had). A forced retry names none, and runs the task of the ID then.
func TestRetryNamesTheDeadLettersTask(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	ctx := context.Background()
	created := time.Date(2026, 11, 29, 9, 0, 0, 123456789, time.UTC)
	d := events.DeadLetter{
		TaskID: "web", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: created.Add(time.Minute),
		Dispatch: events.Dispatch{DispatchID: "web:1", TaskID: "web", ScheduledAt: created, TaskCreatedAt: created},
	}
	if err := jsutil.PublishEvent(ctx, js, events.DeadLetterSubject("web"), "dl-web", events.TypeDeadLettered, "test", "web", d, created); err != nil {
		t.Fatal(err)
	}
	spec := events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	natstest.PutJSON(t, js, streams.BucketTasks, "web", spec)
	natstest.PutJSON(t, js, streams.BucketSchedules, "web", gov.State{TaskID: "web", CreatedAt: created, NextRunAt: created.Add(time.Hour)})

	// No governor runs: each requeue is stored, and pending.
	expect(t, "retry", b.call(t, http.MethodPost, "/api/v1/deadletter/1/retry", `{"reason":"fixed"}`), http.StatusAccepted, "")
	if rq, raw := lastRequeue(t, js, "web"); rq.DeadLetterSeq != 1 || rq.Reason != "fixed" || !rq.TaskCreatedAt.Equal(created) {
		t.Fatalf("retry stored %s, want deadLetterSeq 1 and taskCreatedAt %s", raw, created.Format(time.RFC3339Nano))
	}
	expect(t, "forced retry", b.call(t, http.MethodPost, "/api/v1/deadletter/1/retry?force=true", ""), http.StatusAccepted, "")
	if rq, raw := lastRequeue(t, js, "web"); rq.DeadLetterSeq != 1 || !rq.TaskCreatedAt.IsZero() || strings.Contains(raw, "taskCreatedAt") {
		t.Fatalf("forced retry stored %s, want deadLetterSeq 1 and no taskCreatedAt", raw)
	}
}
