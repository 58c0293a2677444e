package governor

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

func startGovernor(t *testing.T) (*Service, jetstream.JetStream) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	return runGovernor(t, srv.JS), srv.JS
}

// runGovernor starts a governor on js, stopped in t.Cleanup, once its
// view of the specs has loaded.
func runGovernor(t *testing.T, js jetstream.JetStream) *Service {
	t.Helper()
	return runGovernorWith(t, Config{JS: js})
}

// runGovernorWith is runGovernor with cfg.
func runGovernorWith(t *testing.T, cfg Config) *Service {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	<-s.specs.Ready()
	return s
}

// storeTask stores the spec of an interval task and its schedule, due
// at the slot it returns (now, to the second), as a creation would.
func storeTask(t *testing.T, s *Service, id string, every time.Duration) time.Time {
	t.Helper()
	spec := events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(every)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	spec.Normalize()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.tasks.Put(t.Context(), id, raw); err != nil {
		t.Fatal(err)
	}
	slot := time.Now().UTC().Truncate(time.Second)
	body, _ := json.Marshal(gov.State{TaskID: id, NextRunAt: slot, Source: gov.SourceBaselineInterval})
	if _, err := s.schedules.Create(t.Context(), id, body); err != nil {
		t.Fatal(err)
	}
	return slot
}

// succeeded publishes a run.succeeded for task id and waits until the
// governor has acked it.
func succeeded(t *testing.T, js jetstream.JetStream, id string, slot time.Time) {
	t.Helper()
	run := events.Run{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1, FinishedAt: time.Now().UTC(), Status: 200}
	body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", id, run, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), events.RunSubject(events.OutcomeSucceeded, id), body)
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerGovernor, ack.Sequence)
}

// TestStaleSpecViewDoesNotResurrectADeletedTask: the spec view can lag a
// deletion; an outcome arriving in that moment must not write a fresh
// schedule (the timer would dispatch a deleted task forever).
func TestStaleSpecViewDoesNotResurrectADeletedTask(t *testing.T) {
	s, js := startGovernor(t)
	spec := events.TaskSpec{ID: "gone", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	spec.Normalize()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The view believes the task exists; the bucket has neither spec nor schedule.
	s.specs.Put("gone", 1<<40, raw)
	succeeded(t, js, "gone", time.Now().UTC().Truncate(time.Second))
	if _, err := s.schedules.Get(t.Context(), "gone"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("schedule of a deleted task: err = %v, want ErrKeyNotFound", err)
	}
}

// TestDecisionsUseTheRememberedRevision: after the first decision the
// governor writes at the revision it remembers; a write by someone else
// in between costs one conflict and a re-read, never a lost update.
func TestDecisionsUseTheRememberedRevision(t *testing.T) {
	s, js := startGovernor(t)
	slot := storeTask(t, s, "t", time.Minute)
	succeeded(t, js, "t", slot)
	_, rev1, ok := s.states.get("t")
	if !ok {
		t.Fatal("the decision's state was not remembered")
	}
	// Someone else rewrites the schedule: the remembered revision is stale.
	ent, err := s.schedules.Get(t.Context(), "t")
	if err != nil || ent.Revision() != rev1 {
		t.Fatalf("stored revision %v, remembered %d (err %v)", ent, rev1, err)
	}
	var cur gov.State
	if err := json.Unmarshal(ent.Value(), &cur); err != nil {
		t.Fatal(err)
	}
	next := cur.NextRunAt
	if _, err := s.schedules.Put(t.Context(), "t", ent.Value()); err != nil {
		t.Fatal(err)
	}
	succeeded(t, js, "t", next)
	ent, err = s.schedules.Get(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ent.Value(), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.LastScheduledAt.Before(next) || !cur.NextRunAt.After(next) {
		t.Fatalf("the second outcome was lost after a conflict: %+v", cur)
	}
	if _, rev, _ := s.states.get("t"); rev != ent.Revision() {
		t.Fatalf("remembered revision %d, stored %d", rev, ent.Revision())
	}
}

// command publishes a task command with the given CloudEvents id and waits
// until the governor has acked it.
func command(t *testing.T, js jetstream.JetStream, verb events.Verb, typ, id, eventID string, data any) {
	t.Helper()
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publish(t, js, verb, typ, id, eventID, data))
}

// hint returns the task's flyball-pauses entry, or nil when it has none.
func hint(t *testing.T, s *Service, id string) *pauseHint {
	t.Helper()
	ent, err := s.pauses.Get(t.Context(), id)
	if jsutil.IsKeyMissing(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var h pauseHint
	if err := json.Unmarshal(ent.Value(), &h); err != nil {
		t.Fatalf("pause hint %s: %v (%s)", id, err, ent.Value())
	}
	return &h
}

// TestPauseHintFollowsThePause: flyball-pauses holds a key exactly while a
// task's schedule is paused: written on pause (with its end and reason),
// rewritten when the pause changes, deleted on resume and on deletion, and
// a hint left by a crash is mended by the task's next decision.
func TestPauseHintFollowsThePause(t *testing.T) {
	s, js := startGovernor(t)
	<-s.pauseHints.Ready()
	create := func(id string) {
		spec := events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-"+id, spec)
	}
	paused := func(id string) bool {
		st, _, _, err := s.readState(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return st.Paused
	}
	create("p")
	if h := hint(t, s, "p"); h != nil {
		t.Fatalf("a new task has a pause hint: %+v", h)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	command(t, js, events.VerbPaused, events.TypeTaskPaused, "p", "pause-1", events.TaskPause{ID: "p", Until: &until, Reason: "deploy"})
	if h := hint(t, s, "p"); !paused("p") || h == nil || h.TaskID != "p" || !h.PausedUntil.Equal(until) || h.Reason != "deploy" {
		t.Fatalf("after pause: paused=%v, hint %+v", paused("p"), h)
	}
	command(t, js, events.VerbPaused, events.TypeTaskPaused, "p", "pause-2", events.TaskPause{ID: "p", Reason: "indefinitely"})
	if h := hint(t, s, "p"); h == nil || !h.PausedUntil.IsZero() || h.Reason != "indefinitely" {
		t.Fatalf("after a second pause: hint %+v", h)
	}
	command(t, js, events.VerbResumed, events.TypeTaskResumed, "p", "resume-1", events.TaskRef{ID: "p"})
	if h := hint(t, s, "p"); paused("p") || h != nil {
		t.Fatalf("after resume: paused=%v, hint %+v", paused("p"), h)
	}

	// A crash after the unpaused schedule was written left the hint: the
	// next decision for the task deletes it.
	if _, err := s.pauses.Put(t.Context(), "p", []byte(`{"taskId":"p"}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the governor's view sees the stale hint", func() bool { return s.pauseHints.Lookup("p").Found })
	command(t, js, events.VerbHinted, events.TypeTaskHinted, "p", "hint-1", events.TaskHint{ID: "p", Interval: events.Duration(30 * time.Minute)})
	if h := hint(t, s, "p"); h != nil {
		t.Fatalf("a stale hint survived the next decision: %+v", h)
	}

	// The paused schedule is stored but its hint is gone (deleted by hand
	// here). The command redelivered (its decision is ignored: it is the
	// last one applied) writes the hint again.
	pause3 := publish(t, js, events.VerbPaused, events.TypeTaskPaused, "p", "pause-3", events.TaskPause{ID: "p"})
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, pause3)
	if err := s.pauses.Delete(t.Context(), "p"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the governor's view sees the hint gone", func() bool { return !s.pauseHints.Lookup("p").Found })
	if _, err := s.applyCommand(t.Context(), stepOf(t, redeliverSeq(t, js, streams.StreamTasks, events.TaskSubject(events.VerbPaused, "p"), pause3))); err != nil {
		t.Fatal(err)
	}
	if h := hint(t, s, "p"); h == nil {
		t.Fatal("the redelivered pause did not restore its hint")
	}

	// Deleting a paused task deletes its hint.
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "p", "delete-1", events.TaskRef{ID: "p"})
	if h := hint(t, s, "p"); h != nil {
		t.Fatalf("a deleted task kept its pause hint: %+v", h)
	}
	// A task never paused gets no delete marker in flyball-pauses.
	create("q")
	command(t, js, events.VerbResumed, events.TypeTaskResumed, "q", "resume-q", events.TaskRef{ID: "q"})
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "q", "delete-q", events.TaskRef{ID: "q"})
	if _, err := s.pauses.Get(t.Context(), "q"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("flyball-pauses has an entry for a task never paused: err = %v", err)
	}
}

// TestFinalFailureHoldsTheTaskWithoutItsDeadLetter: the governor holds a
// task for its dead-letter recheck on the final run.failed itself. It
// planned the next slot from the failure (failure-backoff) and held the
// task only when the dead-letter entry arrived, so with the dead-letter
// service down or behind (as here: it is not running) the failing target
// was called again on the backoff grid, past maxAttempts.
func TestFinalFailureHoldsTheTaskWithoutItsDeadLetter(t *testing.T) {
	s, js := startGovernor(t)
	slot := storeTask(t, s, "t", 5*time.Second)
	d := events.Dispatch{DispatchID: events.DispatchID("t", slot), TaskID: "t", ScheduledAt: slot}
	finished := time.Now().UTC()
	run := events.Run{
		DispatchID: d.DispatchID, TaskID: "t", ScheduledAt: slot, Attempt: 5, StartedAt: finished, FinishedAt: finished, Status: 503,
		Error: "HTTP 503", ErrorKind: events.ErrorTransient, Final: true, Dispatch: &d,
	}
	ev, err := events.Marshal(events.OutcomeFailed.Type(), "test", "t", run, finished, "")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), events.RunSubject(events.OutcomeFailed, "t"), ev)
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerGovernor, ack.Sequence)
	ent, err := s.schedules.Get(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var st gov.State
	if err := json.Unmarshal(ent.Value(), &st); err != nil {
		t.Fatal(err)
	}
	recheck := finished.Add(events.DefaultRecheckAfter)
	if st.Source != gov.SourceDeadLetterRecheck || st.NextRunAt.Before(recheck.Add(-time.Second)) || st.DeadLetter == nil || st.DeadLetter.Reason != events.DeadLetterMaxAttempts {
		t.Fatalf("after a final failure: next %s (%s), dead letter %+v; want the recheck near %s", st.NextRunAt, st.Source, st.DeadLetter, recheck)
	}
}

// TestBreakerTransitionOfADeletedTaskIsIgnored: a task's breaker opened
// (breaker.open on HEALTH, retryAt 10 min ahead) just before the task was
// deleted and created again under its ID; the governor reads HEALTH apart
// from TASKS, and applies the transition after the re-creation. It names
// the old task's createdAt, so it changes nothing. Before, it held the new
// task until the old task's retryAt, and since the breaker service deleted
// the old record with the task, no breaker.closed ever lifted the hold.
func TestBreakerTransitionOfADeletedTaskIsIgnored(t *testing.T) {
	s, js := startGovernor(t)
	const id = "reborn"
	spec := events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", spec)
	old, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now().UTC()
	retryAt := opened.Add(10 * time.Minute)
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-2", spec)
	st, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	created := st.CreatedAt
	if !gov.OtherCreatedAt(created, old.CreatedAt) {
		t.Fatalf("the new task's createdAt %s does not tell it from the old one's %s", created, old.CreatedAt)
	}
	t.Logf("new task created at %s, first run %s", created.Format(time.RFC3339Nano), st.NextRunAt.Format(time.RFC3339Nano))

	// The old task's breaker.open, from before the deletion, reaches the
	// governor now.
	tr := events.BreakerTransition{Key: id, TaskID: id, From: events.BreakerClosed, To: events.BreakerOpen, Failures: 3, RetryAt: &retryAt, OpenDelay: events.Duration(10 * time.Minute), At: opened, TaskCreatedAt: old.CreatedAt}
	body, err := events.Marshal(events.TypeBreakerOpen, "flyball/breaker/test", id, tr, opened, "breaker:"+id+":open:1")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishRaw(t, js, events.BreakerSubject(events.BreakerOpen, id), body))

	st, _, _, err = s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the old breaker.open (at %s): nextRunAt %s source %s breakerOpenUntil %s", opened.Format(time.RFC3339Nano), st.NextRunAt.Format(time.RFC3339Nano), st.Source, st.BreakerOpenUntil.Format(time.RFC3339Nano))
	// The new task's first run succeeds (its own breaker is closed: the
	// breaker service deleted the old record with the task).
	slot := st.NextRunAt
	publishRunAndWait(t, js, events.OutcomeSucceeded, events.Run{
		DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1, StartedAt: slot, FinishedAt: time.Now().UTC(), Status: 200, TaskCreatedAt: created,
	})
	st, _, _, err = s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the new task's first success: nextRunAt %s source %s (interval 1m)", st.NextRunAt.Format(time.RFC3339Nano), st.Source)
	if !st.NextRunAt.Before(retryAt) {
		t.Fatalf("the new task (created %s) is held until %s by the breaker.open of the task deleted before it (at %s)",
			created.Format(time.RFC3339Nano), st.NextRunAt.Format(time.RFC3339Nano), opened.Format(time.RFC3339Nano))
	}
}
