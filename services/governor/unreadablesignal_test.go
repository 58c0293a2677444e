package governor

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestASignalRebuildsAScheduleOnlyTheGovernorCannotRead: a schedule with a
// wrong type in a field only the governor reads (failures, written by
// hand or by another version) decodes for the timer and the sweeper, so
// the timer dispatches its slot and the sweeper never repairs it. The
// governor took it for a missing schedule and acked the run's outcome
// without effect: the slot stayed due, the sweeper's zombie check
// dispatched it again, the executor skipped it as already run, and the
// governor dropped the skip, for ever. A signal now rebuilds the
// schedule as its creation writes it (the spec's createdAt), applies to
// it, and replaces the value at its revision. So does a value that names
// no decision (JSON null, {}), to which a signal was applied as to a zero
// state: the schedule written named no taskId and no createdAt.
func TestASignalRebuildsAScheduleOnlyTheGovernorCannotRead(t *testing.T) {
	s, js := startGovernor(t)
	for _, v := range []struct {
		name string
		body func(id string, slot time.Time) string
	}{
		{"wrong-type", func(id string, slot time.Time) string {
			return fmt.Sprintf(`{"taskId":%q,"nextRunAt":%q,"source":"baseline-interval","failures":"two"}`, id, slot.Format(time.RFC3339Nano))
		}},
		// A value that names no decision: every reader takes it for a
		// task with no next run, and the governor applied the signal to
		// a zero state, without the task's createdAt.
		{"null", func(string, time.Time) string { return "null" }},
		{"empty", func(string, time.Time) string { return "{}" }},
	} {
		t.Run(v.name, func(t *testing.T) {
			signalsRebuild(t, s, js, v.name, func(t *testing.T, id string, slot time.Time) {
				t.Helper()
				if _, err := s.schedules.PutString(t.Context(), id, v.body(id, slot)); err != nil {
					t.Fatal(err)
				}
				s.states.drop(id)
			})
		})
	}
}

// signalsRebuild runs the signal cases of
// TestASignalRebuildsAScheduleOnlyTheGovernorCannotRead, corrupt writing
// the value the governor must rebuild over a task's schedule.
func signalsRebuild(t *testing.T, s *Service, js jetstream.JetStream, prefix string, corrupt func(t *testing.T, id string, slot time.Time)) {
	t.Run("success", func(t *testing.T) {
		id := prefix + "-governor-unreadable"
		slot := storeTask(t, s, id, time.Minute)
		corrupt(t, id, slot)
		succeeded(t, js, id, slot)
		st := storedState(t, s, id)
		if st.TaskID != id || !st.LastScheduledAt.Equal(slot) || st.Runs != 1 || !st.NextRunAt.After(slot) {
			t.Fatalf("schedule after the outcome of slot %v: taskId %q, lastScheduledAt %v, runs %d, next %v",
				slot, st.TaskID, st.LastScheduledAt, st.Runs, st.NextRunAt)
		}
	})

	t.Run("final-failure-of-a-created-task", func(t *testing.T) {
		id := prefix + "-governor-unreadable-created"
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-"+id, *minuteSpec(id))
		createdAt := storedSpecCreatedAt(t, s, id)
		slot := storedState(t, s, id).NextRunAt
		corrupt(t, id, slot)
		publishRunAndWait(t, js, events.OutcomeFailed, finalFailureOf(id, slot, createdAt))
		st := storedState(t, s, id)
		if st.TaskID != id || !st.CreatedAt.Equal(createdAt) || !st.LastScheduledAt.Equal(slot) || st.Failures != 1 || !st.NextRunAt.After(slot) {
			t.Fatalf("schedule after the final failure of slot %v: taskId %q, createdAt %v (spec's %v), lastScheduledAt %v, failures %d, next %v",
				slot, st.TaskID, st.CreatedAt, createdAt, st.LastScheduledAt, st.Failures, st.NextRunAt)
		}
	})

	// A deleted namesake's late outcome is ignored, and the value is
	// rebuilt all the same.
	t.Run("outcome-of-a-deleted-namesake", func(t *testing.T) {
		id := prefix + "-governor-unreadable-namesake"
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-"+id, *minuteSpec(id))
		createdAt := storedSpecCreatedAt(t, s, id)
		slot := storedState(t, s, id).NextRunAt
		corrupt(t, id, slot)
		publishRunAndWait(t, js, events.OutcomeFailed, finalFailureOf(id, slot, createdAt.Add(-time.Hour)))
		st := storedState(t, s, id)
		if st.TaskID != id || !st.CreatedAt.Equal(createdAt) || st.Failures != 0 || st.NextRunAt.IsZero() {
			t.Fatalf("schedule after a namesake's outcome: taskId %q, createdAt %v (spec's %v), failures %d, next %v",
				st.TaskID, st.CreatedAt, createdAt, st.Failures, st.NextRunAt)
		}
	})
}
