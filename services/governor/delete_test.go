package governor

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestRecreationWithTheSameCommandIDIsScheduled: a decision racing a
// delete (a breaker transition read on HEALTH while TASKS applied the
// delete) could cache the deleted task's state after the delete dropped
// it. A re-creation sending the same command id (a script that replays
// one create) was then judged on that copy, taken for a redelivery of
// the first creation and ignored: accepted, and never scheduled.
func TestRecreationWithTheSameCommandIDIsScheduled(t *testing.T) {
	s, js := startGovernor(t)
	const id = "again"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-again", minuteSpec(id))
	old, rev, ok := s.states.get(id)
	if !ok || old.LastCommandID != "create-again" {
		t.Fatalf("cached state after the creation: %+v (cached %v)", old, ok)
	}
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-again", events.TaskRef{ID: id})
	if _, ok := s.loadState(t.Context(), id); ok {
		t.Fatal("the schedule outlived the delete")
	}
	s.states.put(id, old, rev) // what the racing decision left behind

	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-again", minuteSpec(id))
	st, ok := s.loadState(t.Context(), id)
	if !ok {
		t.Fatal("the task created again has no schedule: its creation was ignored as a redelivery")
	}
	if !st.CreatedAt.After(old.CreatedAt) || st.NextRunAt.IsZero() {
		t.Fatalf("schedule of the task created again: %+v; want a later createdAt than %s and a next run", st, old.CreatedAt)
	}
}

// TestDeleteRemovesTheSpecBeforeTheSchedule: a signal decided while a
// delete is applied writes a schedule only if the spec is there
// (decide), so the delete removes the spec first. Removing the schedule
// first left a moment in which an outcome or a breaker transition wrote
// a fresh schedule for the deleted task, which outlived the delete.
func TestDeleteRemovesTheSpecBeforeTheSchedule(t *testing.T) {
	s, js := startGovernor(t)
	const id = "ordered"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-ordered", minuteSpec(id))
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-ordered", events.TaskRef{ID: id})
	deletedAt := func(kv jetstream.KeyValue) jetstream.KeyValueEntry {
		t.Helper()
		hist, err := kv.History(t.Context(), id)
		if err != nil {
			t.Fatalf("%s history: %v", kv.Bucket(), err)
		}
		last := hist[len(hist)-1]
		if last.Operation() != jetstream.KeyValueDelete {
			t.Fatalf("%s: the last entry of %s is a %s, want its delete", kv.Bucket(), id, last.Operation())
		}
		return last
	}
	spec, schedule := deletedAt(s.tasks), deletedAt(s.schedules)
	if !spec.Created().Before(schedule.Created()) {
		t.Fatalf("the spec was deleted at %s, the schedule at %s: want the spec first", spec.Created(), schedule.Created())
	}
}
