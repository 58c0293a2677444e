package governor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// loadState reads a task's stored schedule state: ok is false when
// there is none, or it cannot be read or decoded.
func (s *Service) loadState(ctx context.Context, id string) (gov.State, bool) {
	ent, err := s.schedules.Get(ctx, id)
	if err != nil {
		return gov.State{}, false
	}
	var st gov.State
	if json.Unmarshal(ent.Value(), &st) != nil {
		return gov.State{}, false
	}
	return st, true
}

func storedState(t *testing.T, s *Service, id string) gov.State {
	t.Helper()
	st, ok := s.loadState(t.Context(), id)
	if !ok {
		t.Fatalf("no readable schedule for %s", id)
	}
	return st
}

// publishRunAndWait publishes run as outcome and waits until the governor
// has acked it.
func publishRunAndWait(t *testing.T, js jetstream.JetStream, outcome events.Outcome, run events.Run) {
	t.Helper()
	body, err := events.Marshal(outcome.Type(), "test", run.TaskID, run, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerGovernor, publishRaw(t, js, events.RunSubject(outcome, run.TaskID), body))
}

// finalFailureOf is the final run.failed of the slot of the task created
// at createdAt, as the executor publishes it.
func finalFailureOf(id string, slot, createdAt time.Time) events.Run {
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, TaskCreatedAt: createdAt}
	now := time.Now().UTC()
	return events.Run{
		DispatchID: d.DispatchID, TaskID: id, ScheduledAt: slot, Attempt: 3, StartedAt: now, FinishedAt: now, Status: 503,
		Error: "HTTP 503", ErrorKind: events.ErrorTransient, Final: true, Dispatch: &d, TaskCreatedAt: createdAt,
	}
}

// TestRunsOfADeletedTaskDoNotReachItsNamesake: a task deleted and created
// again under the same ID. The old task's final failure and dead letter,
// read after the new task's creation, held the new task for the 30-minute
// dead-letter recheck before its first run.
func TestRunsOfADeletedTaskDoNotReachItsNamesake(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "n", "create-1", *minuteSpec("n"))
	old := storedState(t, s, "n")
	if old.CreatedAt.IsZero() {
		t.Fatal("a created task's schedule has no createdAt")
	}
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "n", "delete-1", events.TaskRef{ID: "n"})
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "n", "create-2", *minuteSpec("n"))
	fresh := storedState(t, s, "n")
	if !fresh.CreatedAt.After(old.CreatedAt) {
		t.Fatalf("the new task's createdAt %v is not after the old one's %v", fresh.CreatedAt, old.CreatedAt)
	}

	// The old task's last run fails for good, and is dead-lettered.
	run := finalFailureOf("n", old.NextRunAt, old.CreatedAt)
	publishRunAndWait(t, js, events.OutcomeFailed, run)
	entry := events.DeadLetter{
		TaskID: "n", Reason: events.DeadLetterMaxAttempts, Dispatch: *run.Dispatch, Attempts: 3,
		FirstFailedAt: run.FinishedAt, DeadLetteredAt: run.FinishedAt,
	}
	body, err := events.Marshal(events.TypeDeadLettered, "test", "n", entry, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamDeadLetter, streams.ConsumerGovernor, publishRaw(t, js, events.DeadLetterSubject("n"), body))

	got := storedState(t, s, "n")
	if got.DeadLetter != nil || got.Source == gov.SourceDeadLetterRecheck || !got.NextRunAt.Equal(fresh.NextRunAt) || got.Failures != 0 || got.LastDispatchID != "" {
		t.Fatalf("the new task took the old one's runs: next %v (%s; want %v), dead letter %+v, failures %d, last dispatch %q",
			got.NextRunAt, got.Source, fresh.NextRunAt, got.DeadLetter, got.Failures, got.LastDispatchID)
	}

	// Its own final failure holds it, as before.
	publishRunAndWait(t, js, events.OutcomeFailed, finalFailureOf("n", fresh.NextRunAt, fresh.CreatedAt))
	if got := storedState(t, s, "n"); got.Source != gov.SourceDeadLetterRecheck || got.DeadLetter == nil {
		t.Fatalf("the task's own final failure: next %v (%s), dead letter %+v; want the recheck hold", got.NextRunAt, got.Source, got.DeadLetter)
	}
}

// TestOwnRunIsAppliedOverAStaleCopyOfADeletedTask: this replica's copy of
// a schedule is of the old task (another replica applied the delete and
// the creation). A run of the new task must re-read KV, not be ignored as
// another task's.
func TestOwnRunIsAppliedOverAStaleCopyOfADeletedTask(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "n", "create-1", *minuteSpec("n"))
	if _, _, ok := s.states.get("n"); !ok {
		t.Fatal("the creation's state was not remembered")
	}
	// Another replica deletes the task and creates it again.
	cur := storedState(t, s, "n")
	if err := s.schedules.Delete(t.Context(), "n"); err != nil {
		t.Fatal(err)
	}
	created := cur.CreatedAt.Add(time.Minute)
	body, err := json.Marshal(gov.State{TaskID: "n", NextRunAt: created, Source: gov.SourceBaselineInterval, CreatedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.schedules.Create(t.Context(), "n", body); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	run := events.Run{
		DispatchID: events.DispatchID("n", created), TaskID: "n", ScheduledAt: created, Attempt: 1,
		StartedAt: now, FinishedAt: now, Status: 200, TaskCreatedAt: created,
	}
	publishRunAndWait(t, js, events.OutcomeSucceeded, run)
	if got := storedState(t, s, "n"); got.LastDispatchID != run.DispatchID || !got.CreatedAt.Equal(created) {
		t.Fatalf("the new task's run was not applied: last dispatch %q (want %q), createdAt %v (want %v)", got.LastDispatchID, run.DispatchID, got.CreatedAt, created)
	}
}

// TestReplayNamesARunOfTheDeletedTask: explain's replay reaches the same
// decision, and says why the old task's run changed nothing.
func TestReplayNamesARunOfTheDeletedTask(t *testing.T) {
	spec := minuteSpec("n")
	t1 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	t2 := t1.Add(10 * time.Second)
	slot := t1 // the old task's first run
	steps := []Step{
		{TaskID: "n", At: t1, Spec: spec, CommandID: "c1", CommandType: events.TypeTaskCreated, Input: gov.Input{Kind: gov.KindAccepted}},
		{TaskID: "n", At: t1.Add(5 * time.Second), CommandID: "d1", CommandType: events.TypeTaskDeleted, Input: gov.Input{Kind: gov.KindDeleted}},
		{TaskID: "n", At: t2, Spec: spec, CommandID: "c2", CommandType: events.TypeTaskCreated, Input: gov.Input{Kind: gov.KindAccepted}},
		{TaskID: "n", At: t2.Add(time.Second), Input: gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
			DispatchID: events.DispatchID("n", slot), ScheduledAt: slot, Result: "failed", FinishedAt: t2, DeadLetterReason: events.DeadLetterMaxAttempts, TaskCreatedAt: t1,
		}}},
	}
	entries := ReplayAnswers(steps, func(int) Answer { return Answer{Accepted: true, Known: true} })
	if len(entries) != 4 {
		t.Fatalf("%d entries, want 4", len(entries))
	}
	last := entries[3]
	if !last.Decision.Ignored || !strings.Contains(last.NoChange, "created at 2026-11-27T03:00:00Z, deleted since") {
		t.Fatalf("the old task's final failure: ignored %v, %q", last.Decision.Ignored, last.NoChange)
	}
	if last.Decision.Source == gov.SourceDeadLetterRecheck {
		t.Fatalf("the replay holds the new task for the old one's dead letter: %s", last.Decision.Trail)
	}
}

// storedSpecCreatedAt reads the createdAt stored with task id's spec.
func storedSpecCreatedAt(t *testing.T, s *Service, id string) time.Time {
	t.Helper()
	ent, err := s.tasks.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var stored gov.StoredSpec
	if err := json.Unmarshal(ent.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	if stored.TaskSpec == nil || stored.ID != id {
		t.Fatalf("flyball-tasks %s holds no spec of it: %s", id, ent.Value())
	}
	return stored.CreatedAt
}

// TestTheStoredSpecNamesItsTasksCreatedAt: the executor tells a dispatch
// of a deleted task from one of its namesake by the createdAt stored with
// the spec, which must be the schedule's (the dispatch's), be kept by an
// update, and change with a re-creation.
func TestTheStoredSpecNamesItsTasksCreatedAt(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "c", "create-1", *minuteSpec("c"))
	first := storedState(t, s, "c").CreatedAt
	if got := storedSpecCreatedAt(t, s, "c"); first.IsZero() || !got.Equal(first) {
		t.Fatalf("after task.created the spec names createdAt %v, the schedule %v", got, first)
	}
	updated := minuteSpec("c")
	updated.Schedule.Interval = events.Duration(2 * time.Minute)
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "c", "update-1", *updated)
	if got := storedSpecCreatedAt(t, s, "c"); !got.Equal(first) {
		t.Fatalf("after task.updated the spec names createdAt %v, want the task's %v", got, first)
	}
	if st := storedState(t, s, "c"); !st.CreatedAt.Equal(first) {
		t.Fatalf("after task.updated the schedule names createdAt %v, want %v", st.CreatedAt, first)
	}
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "c", "delete-1", events.TaskRef{ID: "c"})
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "c", "create-2", *minuteSpec("c"))
	second := storedState(t, s, "c").CreatedAt
	if got := storedSpecCreatedAt(t, s, "c"); !second.After(first) || !got.Equal(second) {
		t.Fatalf("after the re-creation the spec names createdAt %v and the schedule %v; the old task's was %v", got, second, first)
	}
}

// TestReplaySaysWhyARepeatedOutcomeChangedNothing: flyball explain lists
// every input that changed nothing with the reason. A second outcome of
// the slot last applied (a redelivery, or the executor's run.skipped of
// the slot dispatched again after it ran), an outcome of a run that
// finished before the last slot began, and a redelivered outcome of a run
// that overlapped the last slot read differently.
func TestReplaySaysWhyARepeatedOutcomeChangedNothing(t *testing.T) {
	spec := minuteSpec("r")
	t1 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	outcome := func(slot time.Time, result string, finished time.Time) Step {
		return Step{TaskID: "r", At: finished, Input: gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
			DispatchID: events.DispatchID("r", slot), ScheduledAt: slot, Result: result, FinishedAt: finished, TaskCreatedAt: t1,
		}}}
	}
	steps := []Step{
		{TaskID: "r", At: t1, Spec: spec, CommandID: "c1", CommandType: events.TypeTaskCreated, Input: gov.Input{Kind: gov.KindAccepted}},
		outcome(t1, "succeeded", t1.Add(time.Second)),
		outcome(t1, "skipped", t1.Add(3*time.Minute)),
		outcome(t1.Add(-time.Minute), "succeeded", t1.Add(-50*time.Second)),
		// A run-now slot a second after t1, while t1's run was in flight:
		// t1's outcome, redelivered after it, ended as it began.
		outcome(t1.Add(time.Second), "failed", t1.Add(4*time.Second)),
		outcome(t1, "succeeded", t1.Add(time.Second)),
	}
	entries := ReplayAnswers(steps, func(int) Answer { return Answer{Accepted: true, Known: true} })
	if len(entries) != 6 || entries[1].Decision.Ignored || entries[4].Decision.Ignored {
		t.Fatalf("entries %+v: want 6, the first outcome and the run-now slot's applied", entries)
	}
	for i, want := range map[int]string{
		2: "the slot's outcome is applied already",
		3: "the run finished before the slot of 2026-11-27T06:00:00Z began",
		5: "the slot's outcome was applied before the outcome of r:1795759201000 (this one is a redelivery after later outcomes",
	} {
		if e := entries[i]; !e.Decision.Ignored || !strings.Contains(e.NoChange, want) {
			t.Errorf("entry %d: ignored %v, %q; want it ignored, saying %q", i, e.Decision.Ignored, e.NoChange, want)
		}
	}
}

// TestReplaySaysALateDeadLetterWasHeldAlready: the dead-letter service
// down longer than the recheck, a slot fails for good, its recheck slot
// fails for good, and only then does the first slot's entry arrive. Its
// final failure held the task already, and the hold is now the recheck
// slot's; the task was neither requeued nor did a run succeed. explain
// said "a run succeeded since".
func TestReplaySaysALateDeadLetterWasHeldAlready(t *testing.T) {
	spec := minuteSpec("l")
	t1 := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	s2 := t1.Add(events.DefaultRecheckAfter + time.Second) // the recheck slot
	failed := func(slot time.Time) Step {
		return Step{TaskID: "l", At: slot.Add(time.Second), Input: gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
			DispatchID: events.DispatchID("l", slot), ScheduledAt: slot, Result: "failed", FinishedAt: slot.Add(time.Second),
			DeadLetterReason: events.DeadLetterMaxAttempts, TaskCreatedAt: t1,
		}}}
	}
	steps := []Step{
		{TaskID: "l", At: t1, Spec: spec, CommandID: "c1", CommandType: events.TypeTaskCreated, Input: gov.Input{Kind: gov.KindAccepted}},
		failed(t1),
		failed(s2),
		{TaskID: "l", At: s2.Add(time.Minute), Input: gov.Input{Kind: gov.KindDeadLettered, DeadLetter: &gov.DeadLetterSignal{
			DispatchID: events.DispatchID("l", t1), Reason: events.DeadLetterMaxAttempts, At: s2.Add(time.Minute), TaskCreatedAt: t1, ScheduledAt: t1,
		}}},
	}
	entries := ReplayAnswers(steps, func(int) Answer { return Answer{Accepted: true, Known: true} })
	if len(entries) != 4 || entries[2].Decision.State.DeadLetter == nil || entries[2].Decision.State.DeadLetter.DispatchID != events.DispatchID("l", s2) {
		t.Fatalf("entries %+v: want 4, the recheck slot's failure holding the task", entries)
	}
	want := "no change: this run's final failure held the task already"
	if e := entries[3]; !e.Decision.Ignored || !strings.HasPrefix(e.NoChange, want) {
		t.Fatalf("the late entry: ignored %v, %q; want it ignored, saying %q", e.Decision.Ignored, e.NoChange, want)
	}
}
