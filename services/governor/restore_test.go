package governor

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// restoredPast rewrites task id's schedule as a restored backup can hold
// it: the backup snapshots TASKS and HEALTH before the buckets
// (docs/operations.md, "Back up and restore"), so the last command and
// breaker transition the schedule applied can be past the last sequence
// of the restored TASKS and HEALTH. The schedule keeps everything else.
func restoredPast(t *testing.T, s *Service, js jetstream.JetStream, id string) gov.State {
	t.Helper()
	return restoredAt(t, s, js, id, lastSeq(t, js, streams.StreamTasks)+100, lastSeq(t, js, streams.StreamHealth)+100)
}

// restoredAt rewrites task id's schedule as restoredPast does, its last
// command at TASKS sequence commandSeq and, if it has applied a breaker
// transition, its last one at HEALTH sequence breakerSeq (zero: as it
// is). The stored times of both (lastCommandAt, lastBreakerAt) stay.
func restoredAt(t *testing.T, s *Service, js jetstream.JetStream, id string, commandSeq, breakerSeq uint64) gov.State {
	t.Helper()
	st, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if commandSeq != 0 {
		st.LastCommandID, st.LastCommandSeq = "applied-after-the-tasks-snapshot", commandSeq
	}
	if st.LastBreakerSeq != 0 && breakerSeq != 0 {
		st.LastBreakerSeq = breakerSeq
	}
	natstest.PutJSON(t, js, streams.BucketSchedules, id, st)
	return st
}

func lastSeq(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	str, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// holdFirstDeliveries pauses the governor's durable on stream for the
// rest of the test: the messages published meanwhile reach the governor
// only as the copies the test hands it (redeliver), as when their first
// delivery met a failure and the replica stopped, or died, before it
// applied them.
func holdFirstDeliveries(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	if _, err := js.PauseConsumer(t.Context(), stream, streams.ConsumerGovernor, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// TestCommandRedeliveredAfterARestoreIsApplied: the restored schedule's
// lastCommandSeq is past the restored TASKS's last sequence, and the
// commands published after the restore get the sequences after that
// last one, at or below it. A pause redelivered before it was ever
// applied was taken for a copy of a command applied before the
// schedule's last one, and acked without effect: the pause was lost. It
// was stored after that last command, so it is applied. A copy of a
// command stored before it (one TASKS was snapshotted with, delivered and
// not acked) is still ignored.
func TestCommandRedeliveredAfterARestoreIsApplied(t *testing.T) {
	s, js := startGovernor(t)
	const id = "restored"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
	command(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id})
	command(t, js, events.VerbResumed, events.TypeTaskResumed, id, "resume-2", events.TaskRef{ID: id})
	restored := restoredPast(t, s, js, id)
	holdFirstDeliveries(t, js, streams.StreamTasks)

	s.handleCommand(t.Context(), redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbPaused, id)))
	st, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused || st.LastCommandID != restored.LastCommandID {
		t.Fatalf("pause-1, stored before the restored schedule's last command, redelivered after the restore: paused=%v lastCommandId=%s", st.Paused, st.LastCommandID)
	}
	if err := js.DeleteConsumer(t.Context(), streams.StreamTasks, "copy"); err != nil {
		t.Fatal(err)
	}

	seq := publish(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-after-restore", events.TaskPause{ID: id})
	if seq > restored.LastCommandSeq {
		t.Fatalf("the pause is at sequence %d, past the restored lastCommandSeq %d: nothing to test", seq, restored.LastCommandSeq)
	}
	s.handleCommand(t.Context(), redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbPaused, id)))
	if st, _, _, err = s.readState(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.LastCommandID != "pause-after-restore" || st.LastCommandSeq != seq {
		t.Fatalf("a pause published after the restore (sequence %d, the restored lastCommandSeq %d), redelivered before it was applied: paused=%v lastCommandId=%s lastCommandSeq=%d",
			seq, restored.LastCommandSeq, st.Paused, st.LastCommandID, st.LastCommandSeq)
	}
}

// TestBreakerTransitionRedeliveredAfterARestoreIsApplied: as
// TestCommandRedeliveredAfterARestoreIsApplied, for HEALTH and
// lastBreakerSeq. The breaker.closed published after the restore was
// ignored, and the task stayed held until the open breaker's retryAt.
func TestBreakerTransitionRedeliveredAfterARestoreIsApplied(t *testing.T) {
	s, js := startGovernor(t)
	const id = "restored"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
	applyOpen(t, js, id)
	restored := restoredPast(t, s, js, id)
	if restored.BreakerOpenUntil.IsZero() || restored.LastBreakerSeq == 0 {
		t.Fatalf("after breaker.open: breakerOpenUntil %s, lastBreakerSeq %d", restored.BreakerOpenUntil, restored.LastBreakerSeq)
	}

	holdFirstDeliveries(t, js, streams.StreamHealth)
	closed := events.BreakerTransition{Key: id, TaskID: id, From: events.BreakerOpen, To: events.BreakerClosed, At: time.Now().UTC()}
	seq := publishTransition(t, js, events.TypeBreakerClosed, closed)
	if seq > restored.LastBreakerSeq {
		t.Fatalf("breaker.closed is at sequence %d, past the restored lastBreakerSeq %d: nothing to test", seq, restored.LastBreakerSeq)
	}
	s.handleSignal(t.Context(), redeliver(t, js, streams.StreamHealth, events.BreakerSubject(events.BreakerClosed, id)))
	st, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !st.BreakerOpenUntil.IsZero() || st.LastBreakerSeq != seq {
		t.Fatalf("a breaker.closed published after the restore (sequence %d, the restored lastBreakerSeq %d), redelivered before it was applied: runs held until %s, lastBreakerSeq %d",
			seq, restored.LastBreakerSeq, st.BreakerOpenUntil, st.LastBreakerSeq)
	}
}

// TestRedeliveredAfterARestoreOverAnotherMessageIsApplied: as
// TestCommandRedeliveredAfterARestoreIsApplied and
// TestBreakerTransitionRedeliveredAfterARestoreIsApplied, once the
// restored stream (or one created again) has grown past the schedule's
// last sequence: TASKS (HEALTH) holds a message at that sequence, another
// one than the schedule applied, stored at another time. The governor
// reads it, finds the sequences started over (Step.SequencesRestarted),
// and judges the redelivery by its stored time: it applies. Only the
// message stored at the schedule's lastCommandAt (lastBreakerAt) there
// would make it a copy (TestCommandCopyFromAClockAheadIsIgnored).
func TestRedeliveredAfterARestoreOverAnotherMessageIsApplied(t *testing.T) {
	t.Run("command", func(t *testing.T) {
		s, js := startGovernor(t)
		const id = "restored"
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
		command(t, js, events.VerbResumed, events.TypeTaskResumed, id, "resume-1", events.TaskRef{ID: id})
		holdFirstDeliveries(t, js, streams.StreamTasks)
		seq := publish(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-after-restore", events.TaskPause{ID: id})
		// Another task's command takes the sequence the restored schedule
		// names as its last.
		other := publish(t, js, events.VerbPaused, events.TypeTaskPaused, "other", "other-1", events.TaskPause{ID: "other"})
		restored := restoredAt(t, s, js, id, other, 0)

		s.handleCommand(t.Context(), redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbPaused, id)))
		st, _, _, err := s.readState(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Paused || st.LastCommandID != "pause-after-restore" || st.LastCommandSeq != seq {
			t.Fatalf("a pause published after the restore (sequence %d; the restored lastCommandSeq %d holds another command), redelivered before it was applied: paused=%v lastCommandId=%s lastCommandSeq=%d",
				seq, restored.LastCommandSeq, st.Paused, st.LastCommandID, st.LastCommandSeq)
		}
	})
	t.Run("breaker transition", func(t *testing.T) {
		s, js := startGovernor(t)
		const id = "restored"
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
		open := applyOpen(t, js, id)
		holdFirstDeliveries(t, js, streams.StreamHealth)
		closed := events.BreakerTransition{Key: id, TaskID: id, From: events.BreakerOpen, To: events.BreakerClosed, At: time.Now().UTC()}
		seq := publishTransition(t, js, events.TypeBreakerClosed, closed)
		other := open
		other.Key, other.TaskID = "other", "other"
		restored := restoredAt(t, s, js, id, 0, publishTransition(t, js, events.TypeBreakerOpen, other))
		if restored.BreakerOpenUntil.IsZero() {
			t.Fatalf("after breaker.open: breakerOpenUntil %s", restored.BreakerOpenUntil)
		}

		s.handleSignal(t.Context(), redeliver(t, js, streams.StreamHealth, events.BreakerSubject(events.BreakerClosed, id)))
		st, _, _, err := s.readState(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !st.BreakerOpenUntil.IsZero() || st.LastBreakerSeq != seq {
			t.Fatalf("a breaker.closed published after the restore (sequence %d; the restored lastBreakerSeq %d holds another transition), redelivered before it was applied: runs held until %s, lastBreakerSeq %d",
				seq, restored.LastBreakerSeq, st.BreakerOpenUntil, st.LastBreakerSeq)
		}
	})
}

// applyOpen stores a breaker.open of task id's own breaker (3 failures,
// retryAt 10 minutes on) on HEALTH, waits for the governor to ack it, and
// returns it.
func applyOpen(t *testing.T, js jetstream.JetStream, id string) events.BreakerTransition {
	t.Helper()
	now := time.Now().UTC()
	retryAt := now.Add(10 * time.Minute)
	open := events.BreakerTransition{Key: id, TaskID: id, From: events.BreakerClosed, To: events.BreakerOpen, Failures: 3, RetryAt: &retryAt, At: now}
	natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishTransition(t, js, events.TypeBreakerOpen, open))
	return open
}

// publishTransition stores breaker transition tr (of type typ) on HEALTH
// and returns its stream sequence.
func publishTransition(t *testing.T, js jetstream.JetStream, typ string, tr events.BreakerTransition) uint64 {
	t.Helper()
	body, err := events.Marshal(typ, "test", tr.Key, tr, tr.At, "")
	if err != nil {
		t.Fatal(err)
	}
	return publishRaw(t, js, events.BreakerSubject(tr.To, tr.Key), body)
}

// commandStep translates a command as the service does (command), with
// the stream sequence and stored time the test chooses.
func commandStep(t *testing.T, verb events.Verb, typ, id, eventID string, data any, seq uint64, at time.Time) Step {
	t.Helper()
	body, err := events.Marshal(typ, "test", id, data, at, eventID)
	if err != nil {
		t.Fatal(err)
	}
	step, err := Translate(events.TaskSubject(verb, id), nil, body, at)
	if err != nil {
		t.Fatal(err)
	}
	step.Seq = seq
	return step
}

// TestRedeliveryStoredAfterAClockStepBackIsACopy: pause-1 is stored at
// TASKS sequence 2 by a stream leader whose clock runs ahead, resume-2 at
// sequence 3 by the next leader, with an earlier timestamp; both are
// applied. pause-1's ack is lost and it comes again. It was judged by its
// stored time alone (after the schedule's lastCommandAt) and applied
// again: the task ended paused, the resume lost, lastCommandSeq back at
// 2. The stream is the same history (the service found resume-2 at
// sequence 3: Step.SequencesRestarted stays false), so the sequence
// decides: it is a copy, and ignored.
func TestRedeliveryStoredAfterAClockStepBackIsACopy(t *testing.T) {
	const id = "stepped"
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	spec := hourly(id)
	spec.Normalize()
	var st gov.State
	for _, step := range []Step{
		commandStep(t, events.VerbCreated, events.TypeTaskCreated, id, "create", spec, 1, t0),
		commandStep(t, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id}, 2, t0.Add(1500*time.Millisecond)),
		commandStep(t, events.VerbResumed, events.TypeTaskResumed, id, "resume-2", events.TaskRef{ID: id}, 3, t0.Add(time.Second)),
	} {
		dec := Apply(&spec, st, step)
		if dec.Ignored {
			t.Fatalf("%s ignored on its first delivery", step.CommandID)
		}
		st = dec.State
	}
	again := commandStep(t, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id}, 2, t0.Add(1500*time.Millisecond))
	again.Redelivered = true
	dec := Apply(&spec, st, again)
	if !dec.Ignored || dec.State.Paused || dec.State.LastCommandSeq != 3 {
		t.Fatalf("pause-1 (sequence 2) redelivered after resume-2 (sequence 3, stored 0.5 s earlier by the clock) was applied: ignored=%v paused=%v lastCommandSeq=%d",
			dec.Ignored, dec.State.Paused, dec.State.LastCommandSeq)
	}
}
