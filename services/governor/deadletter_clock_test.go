package governor

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestSkewedDeadLetterClockDoesNotUndoARequeue: a max-deliveries entry
// written by a dead-letter host whose clock runs 10 minutes ahead of the
// NATS server's is applied, and the task is requeued after it. The entry
// comes again (its ack was lost). Its deadLetteredAt, by the host's
// clock, is after the requeue's requeuedAt, by the server's: the governor
// took the entry for a dead letter since the requeue, held the task
// again for its recheck and dropped the requeue. It is judged by when
// DEADLETTER stored it now, and the requeue stands.
func TestSkewedDeadLetterClockDoesNotUndoARequeue(t *testing.T) {
	s, js := startGovernor(t)
	const id = "skewed"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", *minuteSpec(id))
	st := storedState(t, s, id)
	d := events.Dispatch{
		DispatchID: events.DispatchID(id, st.NextRunAt), TaskID: id, ScheduledAt: st.NextRunAt,
		FiredAt: st.NextRunAt, TaskCreatedAt: st.CreatedAt,
	}
	entry := events.DeadLetter{
		TaskID: id, Reason: events.DeadLetterMaxDeliveries, Dispatch: d, Attempts: 1,
		DeadLetteredAt: time.Now().Add(10 * time.Minute).UTC(), // the host's clock, ahead
	}
	body, err := events.Marshal(events.TypeDeadLettered, "test", id, entry, entry.DeadLetteredAt, "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamDeadLetter, streams.ConsumerGovernor, publishRaw(t, js, events.DeadLetterSubject(id), body))
	if held := storedState(t, s, id); held.DeadLetter == nil || held.Source != gov.SourceDeadLetterRecheck {
		t.Fatalf("the entry did not hold the task: dead letter %+v, next %v (%s)", held.DeadLetter, held.NextRunAt, held.Source)
	}
	requeueJSON(t, js, id, "requeue", st.CreatedAt)
	if !requeued(t, js, id, "requeue") {
		t.Fatalf("requeue not accepted; rejected with %+v", lastRejection(t, js, id))
	}
	before := storedState(t, s, id)
	if before.RequeuedAt.IsZero() || before.DeadLetter != nil {
		t.Fatalf("after the requeue: requeuedAt %v, dead letter %+v", before.RequeuedAt, before.DeadLetter)
	}

	// The entry again, stored before the requeue.
	s.handleSignal(t.Context(), redeliver(t, js, streams.StreamDeadLetter, events.DeadLetterSubject(id)))
	got := storedState(t, s, id)
	if got.DeadLetter != nil || !got.RequeuedAt.Equal(before.RequeuedAt) || got.Source != gov.SourceRequeue {
		t.Fatalf("an entry stored before the requeue (deadLetteredAt %v by a clock 10m ahead) undid it: requeuedAt %v (was %v), dead letter %+v, next %v (%s)",
			entry.DeadLetteredAt, got.RequeuedAt, before.RequeuedAt, got.DeadLetter, got.NextRunAt, got.Source)
	}
}

// TestLateEntryOfAFailureDoesNotUndoARequeue: the final failure of a run
// holds the task; the operator requeues it (flyball dlq retry --all
// --task sends a requeue when no entry is stored yet); the dead-letter
// service, down or behind, stores the run's entry only then. The entry
// was stored after the requeue, so the governor took it for a dead
// letter since, held the task for another recheck and dropped the
// requeue. Its hold was applied with the failure: it changes nothing.
func TestLateEntryOfAFailureDoesNotUndoARequeue(t *testing.T) {
	s, js := startGovernor(t)
	const id = "late"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", *minuteSpec(id))
	held := deadLettered(t, s, js, id)
	requeueJSON(t, js, id, "requeue", held.CreatedAt)
	if !requeued(t, js, id, "requeue") {
		t.Fatalf("requeue not accepted; rejected with %+v", lastRejection(t, js, id))
	}
	before := storedState(t, s, id)
	d := events.Dispatch{
		DispatchID: held.DeadLetter.DispatchID, TaskID: id, ScheduledAt: held.LastScheduledAt,
		FiredAt: held.LastScheduledAt, TaskCreatedAt: held.CreatedAt,
	}
	entry := events.DeadLetter{TaskID: id, Reason: held.DeadLetter.Reason, Dispatch: d, Attempts: 1, DeadLetteredAt: time.Now().UTC()}
	body, err := events.Marshal(events.TypeDeadLettered, "test", id, entry, entry.DeadLetteredAt, "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamDeadLetter, streams.ConsumerGovernor, publishRaw(t, js, events.DeadLetterSubject(id), body))
	got := storedState(t, s, id)
	if got.DeadLetter != nil || !got.RequeuedAt.Equal(before.RequeuedAt) || got.Source != gov.SourceRequeue {
		t.Fatalf("the entry of the failure already applied, stored after the requeue, undid it: requeuedAt %v (was %v), dead letter %+v, next %v (%s)",
			got.RequeuedAt, before.RequeuedAt, got.DeadLetter, got.NextRunAt, got.Source)
	}
}
