package governor

import (
	"fmt"
	"testing"
	"time"

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
// it, and replaces the value at its revision.
func TestASignalRebuildsAScheduleOnlyTheGovernorCannotRead(t *testing.T) {
	s, js := startGovernor(t)
	corrupt := func(t *testing.T, id string, slot time.Time) {
		t.Helper()
		body := fmt.Sprintf(`{"taskId":%q,"nextRunAt":%q,"source":"baseline-interval","failures":"two"}`, id, slot.Format(time.RFC3339Nano))
		if _, err := s.schedules.PutString(t.Context(), id, body); err != nil {
			t.Fatal(err)
		}
		s.states.drop(id)
	}

	t.Run("success", func(t *testing.T) {
		const id = "governor-unreadable"
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
		const id = "governor-unreadable-created"
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
		const id = "governor-unreadable-namesake"
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
