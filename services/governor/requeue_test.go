package governor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// requeueJSON publishes a task.requeued of task id with event id cmdID,
// its data written out as JSON (as `nats pub` sends it), and waits until
// the governor has acked it. A non-zero createdAt is sent as its
// taskCreatedAt.
func requeueJSON(t *testing.T, js jetstream.JetStream, id, cmdID string, createdAt time.Time) uint64 {
	t.Helper()
	data := fmt.Sprintf(`{"id":%q,"deadLetterSeq":1`, id)
	if !createdAt.IsZero() {
		data += fmt.Sprintf(`,"taskCreatedAt":%q`, createdAt.UTC().Format(time.RFC3339Nano))
	}
	body, err := events.Marshal(events.TypeTaskRequeued, "test", id, json.RawMessage(data+"}"), time.Now(), cmdID)
	if err != nil {
		t.Fatal(err)
	}
	seq := publishRaw(t, js, events.TaskSubject(events.VerbRequeued, id), body)
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, seq)
	return seq
}

// deadLettered has the current task id fail for good (its final
// run.failed, as the executor publishes it) and returns its schedule,
// held for the dead-letter recheck.
func deadLettered(t *testing.T, s *Service, js jetstream.JetStream, id string) gov.State {
	t.Helper()
	st := storedState(t, s, id)
	publishRunAndWait(t, js, events.OutcomeFailed, finalFailureOf(id, st.NextRunAt, st.CreatedAt))
	held := storedState(t, s, id)
	if held.Source != gov.SourceDeadLetterRecheck || held.DeadLetter == nil || held.Failures == 0 {
		t.Fatalf("after a final failure: next %v (%s), dead letter %+v, failures %d; want the recheck hold", held.NextRunAt, held.Source, held.DeadLetter, held.Failures)
	}
	return held
}

// requeued reports whether the governor answered command cmdID of task id
// with task.accepted.
func requeued(t *testing.T, js jetstream.JetStream, id, cmdID string) bool {
	t.Helper()
	_, commands := answers(t, js, id)
	return slices.Contains(commands, cmdID)
}

// TestRequeueMeantForADeletedTaskIsRejected: a dead letter of task "q"
// is retried after "q" was deleted and created again. The API and the
// CLI refuse that retry (409) unless forced, but a task.requeued sent
// directly over NATS (or by an API whose check raced a delete and a
// create) reached the governor unchecked, and ran the new task and
// cleared its dead-letter mark. The requeue now names the creation it is
// meant for (taskCreatedAt): one naming the deleted task is rejected
// naming the field, and changes nothing.
func TestRequeueMeantForADeletedTaskIsRejected(t *testing.T) {
	s, js := startGovernor(t)
	const id = "q"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", *minuteSpec(id))
	old := deadLettered(t, s, js, id)
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-2", *minuteSpec(id))
	held := deadLettered(t, s, js, id)
	if !gov.OtherCreatedAt(old.CreatedAt, held.CreatedAt) {
		t.Fatalf("the task created again has createdAt %v, the deleted one had %v: want two", held.CreatedAt, old.CreatedAt)
	}

	// The deleted task's dead letter, retried straight over NATS.
	requeueJSON(t, js, id, "requeue-stale", old.CreatedAt)
	rs := lastRejection(t, js, id)
	if len(rs) != 1 || rs[0].Field != "taskCreatedAt" || strings.HasPrefix(rs[0].Rule, "unknown field") ||
		!strings.Contains(rs[0].Rule, held.CreatedAt.Format(time.RFC3339Nano)) {
		t.Fatalf("requeue of the deleted task: reasons %+v, want one naming taskCreatedAt and the task's createdAt %s", rs, held.CreatedAt.Format(time.RFC3339Nano))
	}
	if requeued(t, js, id, "requeue-stale") {
		t.Fatal("the requeue of the deleted task was answered task.accepted too")
	}
	got := storedState(t, s, id)
	if !got.RequeuedAt.IsZero() || got.DeadLetter == nil || got.Failures != held.Failures || got.Source != gov.SourceDeadLetterRecheck ||
		!got.NextRunAt.Equal(held.NextRunAt) || got.LastCommandID != "create-2" || got.LastCommandSeq != held.LastCommandSeq {
		t.Fatalf("the rejected requeue changed the schedule: requeuedAt %v, dead letter %+v, failures %d (was %d), next %v (%s; was %v), last command %q at %d (was %d)",
			got.RequeuedAt, got.DeadLetter, got.Failures, held.Failures, got.NextRunAt, got.Source, held.NextRunAt, got.LastCommandID, got.LastCommandSeq, held.LastCommandSeq)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("field:taskCreatedAt")); n != 1 {
		t.Fatalf("flyball_rejected_events_total{reason=\"field:taskCreatedAt\"} = %v, want 1", n)
	}

	// Delivered again (its ack lost), it is rejected again, and still
	// changes nothing.
	s.handleCommand(t.Context(), redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRequeued, id)))
	if got := storedState(t, s, id); !got.RequeuedAt.IsZero() || got.DeadLetter == nil || got.LastCommandSeq != held.LastCommandSeq {
		t.Fatalf("the rejected requeue, delivered again, changed the schedule: requeuedAt %v, dead letter %+v, lastCommandSeq %d (was %d)",
			got.RequeuedAt, got.DeadLetter, got.LastCommandSeq, held.LastCommandSeq)
	}
}

// TestRequeueOfTheCurrentTaskApplies: a requeue naming the task's own
// createdAt applies, and so does one naming none (as every requeue did
// before taskCreatedAt, and as a forced retry sends it).
func TestRequeueOfTheCurrentTaskApplies(t *testing.T) {
	s, js := startGovernor(t)
	for _, c := range []struct {
		id      string
		current bool
	}{
		{"with-created-at", true},
		{"without-created-at", false},
	} {
		id, cmdID := c.id, "requeue-"+c.id
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-"+id, *minuteSpec(id))
		held := deadLettered(t, s, js, id)
		var createdAt time.Time
		if c.current {
			createdAt = held.CreatedAt
		}
		seq := requeueJSON(t, js, id, cmdID, createdAt)
		if !requeued(t, js, id, cmdID) {
			t.Fatalf("requeue %s: not accepted; rejected with %+v", id, lastRejection(t, js, id))
		}
		got := storedState(t, s, id)
		if got.RequeuedAt.IsZero() || got.DeadLetter != nil || got.Failures != 0 || got.Source != gov.SourceRequeue ||
			got.LastCommandID != cmdID || got.LastCommandSeq != seq {
			t.Fatalf("requeue %s: requeuedAt %v, dead letter %+v, failures %d, source %s, last command %q at %d; want it applied (at %d)",
				id, got.RequeuedAt, got.DeadLetter, got.Failures, got.Source, got.LastCommandID, got.LastCommandSeq, seq)
		}
	}
}

// TestRequeueIsJudgedOnTheStoredSchedule: this replica's copy of the
// schedule is not the stored one; another replica deleted the task and
// created it again. A requeue is judged on the stored schedule: one
// meant for the old task (which the copy names) is rejected, one meant
// for the new task (which the copy does not name) applies.
func TestRequeueIsJudgedOnTheStoredSchedule(t *testing.T) {
	s, js := startGovernor(t)
	const id = "r"
	recreated := func() (old, fresh time.Time) {
		t.Helper()
		if _, _, ok := s.states.get(id); !ok {
			t.Fatal("the last decision's state was not remembered")
		}
		cur := storedState(t, s, id)
		if err := s.schedules.Delete(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		fresh = cur.CreatedAt.Add(time.Minute)
		body, err := json.Marshal(gov.State{TaskID: id, NextRunAt: fresh, Source: gov.SourceBaselineInterval, CreatedAt: fresh})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.schedules.Create(t.Context(), id, body); err != nil {
			t.Fatal(err)
		}
		return cur.CreatedAt, fresh
	}
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", *minuteSpec(id))

	old, fresh := recreated()
	requeueJSON(t, js, id, "requeue-old", old)
	if rs := lastRejection(t, js, id); len(rs) != 1 || rs[0].Field != "taskCreatedAt" || !strings.Contains(rs[0].Rule, fresh.Format(time.RFC3339Nano)) {
		t.Fatalf("requeue of the task the copy names, created again since: reasons %+v, want one naming taskCreatedAt and %s", rs, fresh.Format(time.RFC3339Nano))
	}
	if got := storedState(t, s, id); !got.RequeuedAt.IsZero() || !got.CreatedAt.Equal(fresh) {
		t.Fatalf("the rejected requeue was applied: requeuedAt %v, createdAt %v (want %v)", got.RequeuedAt, got.CreatedAt, fresh)
	}

	command(t, js, events.VerbHinted, events.TypeTaskHinted, id, "hint-1", events.TaskHint{ID: id, Interval: events.Duration(2 * time.Minute)})
	_, fresh = recreated()
	requeueJSON(t, js, id, "requeue-new", fresh)
	if !requeued(t, js, id, "requeue-new") {
		t.Fatalf("requeue of the stored task, which the copy does not name: rejected with %+v", lastRejection(t, js, id))
	}
	if got := storedState(t, s, id); got.RequeuedAt.IsZero() || !got.CreatedAt.Equal(fresh) || got.LastCommandID != "requeue-new" {
		t.Fatalf("requeue of the stored task: requeuedAt %v, createdAt %v (want %v), last command %q", got.RequeuedAt, got.CreatedAt, fresh, got.LastCommandID)
	}
}
