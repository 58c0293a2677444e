package governor

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestACreationStoredAgainKeepsTheTaskItsCreatedAt: the same task.created
// (same event id) stored a second time, as `nats pub` run twice with the
// README's example or an HTTP retry with one Idempotency-Key after the
// duplicate window, is a command already applied: its decision is
// ignored, so the schedule keeps the task's createdAt. The spec must keep
// it too. It was written again with the second copy's time, and the
// executor, which compares every dispatch's createdAt (the schedule's)
// with the spec's, read the schedule and the spec again before every run.
func TestACreationStoredAgainKeepsTheTaskItsCreatedAt(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	s := runGovernor(t, srv.JS)
	const id = "twice"
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	st, _, err := s.readState(t.Context(), id)
	if err != nil || st.CreatedAt.IsZero() {
		t.Fatalf("schedule after the creation: %+v, %v", st, err)
	}
	// The second copy is stored later, so its time is another createdAt.
	natstest.Eventually(t, 10*time.Second, "a later millisecond", func() bool { return gov.CreatedAt(time.Now()).After(st.CreatedAt) })
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))

	again, _, err := s.readState(t.Context(), id)
	if err != nil || !again.CreatedAt.Equal(st.CreatedAt) {
		t.Fatalf("schedule's createdAt after the copy: %v (%v), want %v", again.CreatedAt, err, st.CreatedAt)
	}
	spec := storedSpecCreatedAt(t, s, id)
	if !spec.Equal(st.CreatedAt) {
		t.Fatalf("spec's createdAt after the copy = %v, the schedule's %v: the executor checks every dispatch (which names the schedule's) against KV again",
			spec, st.CreatedAt)
	}
}
