package governor

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// redeliverSeq returns a second delivery (NumDelivered 2) of the message
// at stream sequence seq, on subject, read through a durable of the
// test's own (redeliver, for a message that is not the subject's last).
func redeliverSeq(t *testing.T, js jetstream.JetStream, stream, subject string, seq uint64) jetstream.Msg {
	t.Helper()
	cons, err := js.CreateConsumer(t.Context(), stream, jetstream.ConsumerConfig{
		Durable: fmt.Sprintf("copy-%d", seq), FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq,
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.Sequence.Stream == seq && md.NumDelivered == 2 {
			return m
		}
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
}

// stepOf translates a delivered command as the service does (command).
func stepOf(t *testing.T, m jetstream.Msg) Step {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	step, err := Translate(m.Subject(), m.Headers(), m.Data(), stampOf(md))
	if err != nil {
		t.Fatal(err)
	}
	step.Seq, step.Redelivered = deliveryOf(md)
	return step
}

// TestRedeliveredCreationDoesNotBringBackADeletedTask: a task.created is
// applied, its ack is lost, the owner's task.deleted is applied (spec and
// schedule gone, and with the schedule its lastCommandSeq), then the
// creation comes again. There was no schedule to compare it with, and it
// created the deleted task again. The governor now finds the task's last
// task.deleted on TASKS stored after it, and acks it without effect,
// answering task.accepted with a trail naming the delete. It runs under
// the governor's compose user: the lookup (a direct get of
// flyball.task.deleted.<id> on TASKS) needs its permission, and a
// permission violation fails the test.
func TestRedeliveredCreationDoesNotBringBackADeletedTask(t *testing.T) {
	srv := natstest.StartCompose(t)
	_, gjs := srv.Connect(t, "governor")
	s := runGovernor(t, gjs)
	js := srv.JS // admin: publishes the commands, reads the copy
	const id = "deleted"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	deleteSeq := publish(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, deleteSeq)

	m := redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbCreated, id))
	step := stepOf(t, m)
	if !step.Redelivered || step.Seq == 0 || step.Seq >= deleteSeq {
		t.Fatalf("the copy: redelivered %v, sequence %d (the delete's %d)", step.Redelivered, step.Seq, deleteSeq)
	}
	acc, err := s.applyCommand(t.Context(), step)
	if err != nil {
		t.Fatalf("the creation's copy: %v", err)
	}
	gone := func(when string) {
		t.Helper()
		if _, err := s.loadSpec(t.Context(), id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s: the deleted task's spec is back (err %v)", when, err)
		}
		if st, rev, _, err := s.readState(t.Context(), id); err != nil || rev != 0 {
			t.Fatalf("%s: the deleted task has a schedule again: rev %d, lastCommandId %q, err %v", when, rev, st.LastCommandID, err)
		}
	}
	gone("after its creation's copy")
	want := fmt.Sprintf("redelivered after the task was deleted (task.deleted at sequence %d, %q)", deleteSeq, "delete-1")
	if acc == nil || acc.CommandID != "create-1" || acc.Source != string(gov.SourceDeleted) || len(acc.Trail) != 1 ||
		!strings.HasPrefix(acc.Trail[0], "no change: ") || !strings.Contains(acc.Trail[0], want) {
		t.Fatalf("answer to the copy: %+v; want create-1 accepted with no change, source deleted, its trail saying %q", acc, want)
	}

	// The service's own path: answered and acked, still without effect.
	s.handleCommand(t.Context(), m)
	gone("after the copy was handled")

	// Explain replays TASKS in stream order (the create, then the
	// delete) and needs no rule of its own: it ends deleted, as stored.
	var steps []Step
	for _, msg := range natstest.Read(t, js, streams.StreamTasks, "flyball.task.*."+id) {
		md, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		st, err := Translate(msg.Subject(), msg.Headers(), msg.Data(), md.Timestamp)
		if errors.Is(err, ErrNoEffect) {
			continue // an answer
		}
		if err != nil {
			t.Fatal(err)
		}
		st.Seq = md.Sequence.Stream
		steps = append(steps, st)
	}
	entries := ReplayAnswers(steps, func(int) Answer { return Answer{Accepted: true, Known: true} })
	if n := len(entries); n != 2 || entries[n-1].Decision.Source != gov.SourceDeleted {
		t.Fatalf("replay of TASKS: %+v; want the creation, then the delete", entries)
	}
}

// TestRedeliveredCreationOfATaskCreatedAgainApplies: a task created,
// deleted and created again (create-2, published after the delete, with
// a spec of its own). The governor crashed between create-2's spec and
// schedule writes, so the task has a spec and no schedule. The first
// creation's copy comes: its delete is later than it, so it is acked
// without overwriting create-2's spec. Then create-2's copy comes: it is
// later than the delete, so it finishes the creation.
func TestRedeliveredCreationOfATaskCreatedAgainApplies(t *testing.T) {
	s, js := startGovernor(t)
	const id = "twice"
	created := events.TaskSubject(events.VerbCreated, id)
	first := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, first)
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	again := hourly(id)
	again.Schedule.Interval = events.Duration(2 * time.Hour)
	second := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-2", again)
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, second)
	interval := func(when string) time.Duration {
		t.Helper()
		spec, err := s.loadSpec(t.Context(), id)
		if err != nil {
			t.Fatalf("%s: the task created again has no spec: %v", when, err)
		}
		return spec.Schedule.Interval.D()
	}
	if st, rev, _, err := s.readState(t.Context(), id); err != nil || rev == 0 || st.LastCommandID != "create-2" || interval("created again") != 2*time.Hour {
		t.Fatalf("created again: schedule rev %d, lastCommandId %q, err %v", rev, st.LastCommandID, err)
	}
	// A crash between create-2's two writes: the spec, no schedule.
	if err := s.schedules.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	s.states.drop(id)

	s.handleCommand(t.Context(), redeliverSeq(t, js, streams.StreamTasks, created, first))
	if got := interval("after create-1's copy"); got != 2*time.Hour {
		t.Fatalf("create-1's copy, redelivered after the delete, overwrote create-2's spec: interval %s, want 2h", got)
	}
	if st, rev, _, err := s.readState(t.Context(), id); err != nil || rev != 0 {
		t.Fatalf("create-1's copy wrote a schedule: rev %d, lastCommandId %q, err %v", rev, st.LastCommandID, err)
	}

	s.handleCommand(t.Context(), redeliverSeq(t, js, streams.StreamTasks, created, second))
	st, rev, _, err := s.readState(t.Context(), id)
	if err != nil || rev == 0 || st.LastCommandID != "create-2" || st.LastCommandSeq != second || st.NextRunAt.IsZero() {
		t.Fatalf("create-2's copy did not finish its creation: rev %d, state %+v, err %v", rev, st, err)
	}
	if got := interval("after create-2's copy"); got != 2*time.Hour {
		t.Fatalf("spec after create-2's copy: interval %s, want 2h", got)
	}
}

// TestRedeliveredCreationAfterARejectedConditionalDeleteApplies: a task
// created again (create-2) whose replica died between its spec and
// schedule writes, then a conditional delete (ifRevision, the API's
// If-Match) naming the spec of the task deleted before, stored after
// create-2 and rejected as a stale revision: the spec stays. create-2's
// copy found the delete stored after it and was acked as "the task stays
// deleted", though the delete deleted nothing: the spec sat with no
// schedule until the sweeper's repair. The copy now finishes the
// creation. A conditional delete that was applied still keeps the task
// deleted (TestRedeliveredCreationDoesNotBringBackADeletedTask, and the
// end of this test). It runs under the governor's compose user: telling
// the delete rejected reads the task's last task.created on TASKS (a
// direct get of flyball.task.created.<id>), which needs its permission.
func TestRedeliveredCreationAfterARejectedConditionalDeleteApplies(t *testing.T) {
	srv := natstest.StartCompose(t)
	_, gjs := srv.Connect(t, "governor")
	s := runGovernor(t, gjs)
	js := srv.JS // admin: publishes the commands, reads the copy
	const id = "kept"
	created := events.TaskSubject(events.VerbCreated, id)
	revision := func() uint64 {
		t.Helper()
		e, err := s.tasks.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	old := revision()
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	second := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-2", hourly(id))
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, second)
	// A crash between create-2's two writes: the spec, no schedule.
	if err := s.schedules.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	s.states.drop(id)
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-2", events.TaskDelete{TaskRef: events.TaskRef{ID: id}, IfRevision: old})
	if reasons := lastRejection(t, js, id); len(reasons) != 1 || reasons[0].Field != "ifRevision" {
		t.Fatalf("delete-2, naming the deleted task's revision %d: rejected with %+v, want a stale ifRevision", old, reasons)
	}

	m := redeliverSeq(t, js, streams.StreamTasks, created, second)
	acc, err := s.applyCommand(t.Context(), stepOf(t, m))
	if err != nil {
		t.Fatalf("create-2's copy: %v", err)
	}
	if acc == nil || acc.CommandID != "create-2" || acc.Source == string(gov.SourceDeleted) {
		t.Fatalf("create-2's copy, after the rejected delete-2: answered %+v; want the creation finished", acc)
	}
	st, rev, _, err := s.readState(t.Context(), id)
	if err != nil || rev == 0 || st.LastCommandID != "create-2" || st.NextRunAt.IsZero() {
		t.Fatalf("create-2's copy did not finish its creation: rev %d, state %+v, err %v", rev, st, err)
	}

	// A conditional delete naming the stored revision is applied, and a
	// copy of the creation then leaves the task deleted.
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-3", events.TaskDelete{TaskRef: events.TaskRef{ID: id}, IfRevision: revision()})
	acc, err = s.applyCommand(t.Context(), stepOf(t, m))
	if err != nil || acc == nil || acc.Source != string(gov.SourceDeleted) {
		t.Fatalf("create-2's copy after the applied delete-3: answered %+v, %v; want no change, the task deleted", acc, err)
	}
	if _, err := s.loadSpec(t.Context(), id); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after create-2's last copy: the deleted task's spec is back (err %v)", err)
	}
}

// TestRedeliveredOlderCreationAfterARejectedConditionalDeleteStaysDeleted:
// create-1 is applied, delete-1 deletes the task, create-2 writes its
// spec and its replica dies before the schedule; a conditional delete-2
// naming create-1's revision is rejected. A copy of create-1 then came
// after a last delete that deleted nothing, and was applied: it wrote
// create-1's spec over create-2's, and create-2's own copy was refused as
// "already exists". Only the task's last creation may finish after a
// rejected delete; an older copy stays deleted by delete-1.
func TestRedeliveredOlderCreationAfterARejectedConditionalDeleteStaysDeleted(t *testing.T) {
	srv := natstest.StartCompose(t)
	_, gjs := srv.Connect(t, "governor")
	s := runGovernor(t, gjs)
	js := srv.JS
	const id = "kept"
	created := events.TaskSubject(events.VerbCreated, id)
	first := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, first)
	e, err := s.tasks.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	old := e.Revision()
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	newer := hourly(id)
	newer.Job = "newer"
	second := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-2", newer)
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, second)
	if err := s.schedules.Delete(t.Context(), id); err != nil { // create-2's crash
		t.Fatal(err)
	}
	s.states.drop(id)
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-2", events.TaskDelete{TaskRef: events.TaskRef{ID: id}, IfRevision: old})
	if reasons := lastRejection(t, js, id); len(reasons) != 1 || reasons[0].Field != "ifRevision" {
		t.Fatalf("delete-2: rejected with %+v, want a stale ifRevision", reasons)
	}

	acc, err := s.applyCommand(t.Context(), stepOf(t, redeliverSeq(t, js, streams.StreamTasks, created, first)))
	if err != nil || acc == nil || acc.Source != string(gov.SourceDeleted) {
		t.Fatalf("create-1's copy after delete-1, create-2 and the rejected delete-2: answered %+v, %v; want no change, deleted by delete-1", acc, err)
	}
	if spec, err := s.loadSpec(t.Context(), id); err != nil || spec.Job != "newer" {
		t.Fatalf("after create-1's copy: spec %+v, %v; want create-2's", spec, err)
	}
	acc, err = s.applyCommand(t.Context(), stepOf(t, redeliverSeq(t, js, streams.StreamTasks, created, second)))
	if err != nil || acc == nil || acc.CommandID != "create-2" || acc.Source == string(gov.SourceDeleted) {
		t.Fatalf("create-2's copy: answered %+v, %v; want the creation finished", acc, err)
	}
}
