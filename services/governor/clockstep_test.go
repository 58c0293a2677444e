package governor

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// aheadOfTheNextLeader is how far ahead of the stream leader that stored
// the schedule's last input the clock of the leader that stored the
// earlier copy ran (TestRedeliveryStoredAfterAClockStepBackIsACopy).
const aheadOfTheNextLeader = 500 * time.Millisecond

// TestCommandCopyFromAClockAheadIsIgnored: pause-1 and resume-2 applied
// in order, then pause-1 redelivered, as stored by a TASKS leader whose
// clock ran half a second ahead of the one that stored resume-2 (a leader
// change, an NTP step back): its stored time is after the schedule's
// lastCommandAt. No test can set a server's clock, so the copy is the one
// the server redelivers, with that stored time given to its step. It was
// applied again (the task ended paused, resume-2 undone, lastCommandSeq
// back at pause-1's). The governor reads TASKS at lastCommandSeq, finds
// resume-2 stored at lastCommandAt, the same history, and acks the copy
// without effect. It runs under the governor's compose user: that read
// (a direct get by sequence, $JS.API.DIRECT.GET.TASKS) needs its
// permission, and a permission violation fails the test.
func TestCommandCopyFromAClockAheadIsIgnored(t *testing.T) {
	srv := natstest.StartCompose(t)
	_, gjs := srv.Connect(t, "governor")
	s := runGovernor(t, gjs)
	before, step := setUpCommandCopy(t, s, srv.JS) // admin: publishes the commands, reads the copy
	if before.Paused || before.LastCommandID != "resume-2" || before.LastCommandAt.IsZero() {
		t.Fatalf("after resume-2: %+v", before)
	}
	if !step.Redelivered || step.Seq >= before.LastCommandSeq {
		t.Fatalf("the copy: redelivered %v, sequence %d (lastCommandSeq %d)", step.Redelivered, step.Seq, before.LastCommandSeq)
	}
	acc, err := s.applyCommand(t.Context(), step)
	if err != nil {
		t.Fatalf("pause-1's copy: %v", err)
	}
	if acc == nil || len(acc.Trail) != 1 || !strings.HasPrefix(acc.Trail[0], "no change: a copy of a command applied before") {
		t.Fatalf("answer to pause-1's copy: %+v; want it accepted with no change, as a copy", acc)
	}
	after, _, _, err := s.readState(t.Context(), step.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Paused || after.LastCommandID != "resume-2" || after.LastCommandSeq != before.LastCommandSeq {
		t.Fatalf("pause-1 (sequence %d, stored %s after resume-2 by the clock) redelivered after resume-2 (sequence %d): paused=%v lastCommandId=%s lastCommandSeq=%d",
			step.Seq, aheadOfTheNextLeader, before.LastCommandSeq, after.Paused, after.LastCommandID, after.LastCommandSeq)
	}
}

// TestBreakerCopyFromAClockAheadIsIgnored: as
// TestCommandCopyFromAClockAheadIsIgnored, for HEALTH: breaker.open then
// breaker.closed applied, then the open redelivered with a stored time
// after lastBreakerAt. It held the task's runs again until its retryAt.
// The governor reads HEALTH at lastBreakerSeq (a message get: HEALTH has
// no direct get, $JS.API.STREAM.MSG.GET.HEALTH), finds the close stored
// at lastBreakerAt, and ignores the copy.
func TestBreakerCopyFromAClockAheadIsIgnored(t *testing.T) {
	srv := natstest.StartCompose(t)
	_, gjs := srv.Connect(t, "governor")
	s := runGovernor(t, gjs)
	before, step := setUpBreakerCopy(t, s, srv.JS)
	if !before.BreakerOpenUntil.IsZero() || before.LastBreakerAt.IsZero() {
		t.Fatalf("after breaker.closed: %+v", before)
	}
	spec, err := s.loadSpec(t.Context(), step.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := s.decide(t.Context(), spec, step)
	if err != nil {
		t.Fatalf("breaker.open's copy: %v", err)
	}
	after, _, _, err := s.readState(t.Context(), step.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if !dec.Ignored || !after.BreakerOpenUntil.IsZero() || after.LastBreakerSeq != before.LastBreakerSeq {
		t.Fatalf("breaker.open (sequence %d, stored %s after breaker.closed by the clock) redelivered after breaker.closed (sequence %d): ignored %v, runs held until %s, lastBreakerSeq %d",
			step.Seq, aheadOfTheNextLeader, before.LastBreakerSeq, dec.Ignored, after.BreakerOpenUntil, after.LastBreakerSeq)
	}
}

// setUpCommandCopy applies pause-1 and resume-2 to task "stepped", and
// returns its state then with pause-1 redelivered, its stored time set
// aheadOfTheNextLeader after resume-2's.
func setUpCommandCopy(t *testing.T, s *Service, js jetstream.JetStream) (gov.State, Step) {
	t.Helper()
	const id = "stepped"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
	command(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id})
	command(t, js, events.VerbResumed, events.TypeTaskResumed, id, "resume-2", events.TaskRef{ID: id})
	before, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	step := stepOf(t, redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbPaused, id)))
	step.At = before.LastCommandAt.Add(aheadOfTheNextLeader)
	return before, step
}

// setUpBreakerCopy applies breaker.open and breaker.closed to task
// "stepped", and returns its state then with the open redelivered, its
// stored time set aheadOfTheNextLeader after the close's.
func setUpBreakerCopy(t *testing.T, s *Service, js jetstream.JetStream) (gov.State, Step) {
	t.Helper()
	const id = "stepped"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
	open := applyOpen(t, js, id)
	closed := events.BreakerTransition{Key: id, TaskID: id, From: events.BreakerOpen, To: events.BreakerClosed, At: open.At}
	natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishTransition(t, js, events.TypeBreakerClosed, closed))
	before, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	step := stepOf(t, redeliver(t, js, streams.StreamHealth, events.BreakerSubject(events.BreakerOpen, id)))
	step.At = before.LastBreakerAt.Add(aheadOfTheNextLeader)
	return before, step
}
