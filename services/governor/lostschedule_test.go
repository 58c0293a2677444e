package governor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestASignalDoesNotCreateALostSchedule: the governor crashed between a
// task.created's spec write and its schedule write, so the task has a
// spec (with its createdAt) and no schedule. Before the creation is
// redelivered, a late final failure of a deleted task of the same ID
// arrives (naming that task's createdAt), and one naming none. A signal
// used to create the missing schedule from a zero state: the failures
// counted and the dead-letter hold taken on, no createdAt and no
// lastCommandId, so the redelivered creation was answered task.rejected
// ("already exists") while its spec stayed stored and ran. A signal now
// never creates a schedule: the redelivered creation writes it, with
// its createdAt.
func TestASignalDoesNotCreateALostSchedule(t *testing.T) {
	s, js := startGovernor(t)
	const id = "lost"
	created := events.TaskSubject(events.VerbCreated, id)
	seq := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-lost", *minuteSpec(id))
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, seq)
	createdAt := storedSpecCreatedAt(t, s, id)
	if createdAt.IsZero() {
		t.Fatal("the stored spec has no createdAt")
	}
	// The crash between the creation's two writes: the spec, no schedule.
	if err := s.schedules.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	s.states.drop(id)

	slot := time.Now().UTC().Truncate(time.Second)
	publishRunAndWait(t, js, events.OutcomeFailed, finalFailureOf(id, slot, createdAt.Add(-time.Hour)))
	publishRunAndWait(t, js, events.OutcomeFailed, finalFailureOf(id, slot.Add(-time.Minute), time.Time{}))
	if st, ok := s.loadState(t.Context(), id); ok {
		t.Errorf("a signal created the missing schedule: createdAt %v, lastCommandId %q, failures %d, dead letter %v, source %s",
			st.CreatedAt, st.LastCommandID, st.Failures, st.DeadLetter != nil, st.Source)
	}

	s.handleCommand(t.Context(), redeliverSeq(t, js, streams.StreamTasks, created, seq))
	if rej := natstest.Read(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRejected, id)); len(rej) != 0 {
		var body events.TaskRejected
		e, _ := events.Decode(rej[0].Headers(), rej[0].Data())
		_ = events.DecodeData(e, &body)
		t.Fatalf("the redelivered creation was rejected: %+v", body.Reasons)
	}
	// Its task.accepted has the first delivery's id (accepted:create-lost),
	// which TASKS's duplicate window keeps once.
	if _, commands := answers(t, js, id); len(commands) != 1 || commands[0] != "create-lost" {
		t.Fatalf("task.accepted answers %v, want the creation's", commands)
	}
	st := storedState(t, s, id)
	if !st.CreatedAt.Equal(createdAt) || st.LastCommandID != "create-lost" || st.Failures != 0 || st.DeadLetter != nil || st.NextRunAt.IsZero() {
		t.Fatalf("schedule after the redelivered creation: createdAt %v (spec's %v), lastCommandId %q, failures %d, dead letter %+v, next %v",
			st.CreatedAt, createdAt, st.LastCommandID, st.Failures, st.DeadLetter, st.NextRunAt)
	}
}

// TestASignalRacingADeleteLeavesNoPauseHint: a signal of a paused task is
// decided on a cached copy of its schedule while task.deleted removes
// the spec, the schedule and the pause hint. The signal writes the hint
// again (the view has seen it go), its schedule write then fails (the key
// is deleted), and it finds the task gone. The hint it wrote used to
// outlive the task for ever (nothing purges flyball-pauses): it now
// removes it.
func TestASignalRacingADeleteLeavesNoPauseHint(t *testing.T) {
	s, js := startGovernor(t)
	<-s.pauseHints.Ready()
	const id = "paused-gone"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-pg", *minuteSpec(id))
	command(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-pg", events.TaskPause{ID: id, Reason: "deploy"})
	old, rev, ok := s.states.get(id)
	if !ok || !old.Paused || hint(t, s, id) == nil {
		t.Fatalf("after the pause: cached %v, state %+v, hint %+v", ok, old, hint(t, s, id))
	}
	spec, _, err := s.specs.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}

	// The delete, applied while the signal is being decided: spec,
	// schedule and hint go, and this replica's views see them go.
	if err := s.tasks.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := s.schedules.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := s.pauses.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the views see the spec and the hint gone", func() bool {
		return !s.pauseHints.Lookup(id).Found && !s.specs.Lookup(id).Found
	})
	// The signal read the spec before the delete, and decides on the
	// state it cached.
	s.specs.Put(id, 1<<40, raw)
	s.states.put(id, old, rev)

	body, err := events.Marshal(events.OutcomeFailed.Type(), "test", id, finalFailureOf(id, old.NextRunAt, old.CreatedAt), time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	step, err := Translate(events.RunSubject(events.OutcomeFailed, id), nil, body, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.decide(t.Context(), spec, step); err == nil {
		t.Fatal("the signal of a deleted task was decided")
	}
	if h := hint(t, s, id); h != nil {
		t.Fatalf("the deleted task has a pause hint: %+v", h)
	}
	if _, ok := s.loadState(t.Context(), id); ok {
		t.Fatal("the deleted task has a schedule")
	}
}
