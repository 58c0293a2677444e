package governor

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
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
	st, _, _, err := s.readState(t.Context(), id)
	if err != nil || st.CreatedAt.IsZero() {
		t.Fatalf("schedule after the creation: %+v, %v", st, err)
	}
	// The second copy is stored later, so its time is another createdAt.
	natstest.Eventually(t, 10*time.Second, "a later millisecond", func() bool { return gov.CreatedAt(time.Now()).After(st.CreatedAt) })
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))

	again, _, _, err := s.readState(t.Context(), id)
	if err != nil || !again.CreatedAt.Equal(st.CreatedAt) {
		t.Fatalf("schedule's createdAt after the copy: %v (%v), want %v", again.CreatedAt, err, st.CreatedAt)
	}
	spec := storedSpecCreatedAt(t, s, id)
	if !spec.Equal(st.CreatedAt) {
		t.Fatalf("spec's createdAt after the copy = %v, the schedule's %v: the executor checks every dispatch (which names the schedule's) against KV again",
			spec, st.CreatedAt)
	}
}

// TestACommandStoredAgainIsAnsweredWithItsSpecRevision: the second
// stored copy of a creation or an update (one event id, as an HTTP retry
// with one Idempotency-Key after TASKS's duplicate window) is answered
// without being applied again (repeatedCommand). The answer named no
// specRevision, so a client that got only that answer (the first lost
// with its connection) had no revision for its next If-Match, and the
// CLI printed no "(revision N)". It names the revision the command's own
// write stored. (Within the duplicate window the copy's answer is
// dropped as a duplicate of the first, so the copy is handed to
// repeatedCommand directly.)
func TestACommandStoredAgainIsAnsweredWithItsSpecRevision(t *testing.T) {
	s, js := startGovernor(t)
	const id = "twice"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	update := hourly(id)
	update.Job = "changed"
	seq := publish(t, js, events.VerbUpdated, events.TypeTaskUpdated, id, "update-1", update)
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, seq)
	ent, err := s.tasks.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var first events.TaskAccepted
	natstest.LastData(t, js, streams.StreamTasks, events.TaskSubject(events.VerbAccepted, id), &first)
	if first.CommandID != "update-1" || first.SpecRevision != ent.Revision() {
		t.Fatalf("the update: accepted %s at specRevision %d, want update-1 at %d", first.CommandID, first.SpecRevision, ent.Revision())
	}
	for _, c := range []struct {
		what string
		step Step
		want uint64
	}{
		{"the update's copy", Step{TaskID: id, Input: gov.Input{Kind: gov.KindUpdated}, Spec: &update, CommandID: "update-1", CommandType: events.TypeTaskUpdated, Seq: seq + 10}, ent.Revision()},
		// A copy that stores no spec names none, as its first answer did.
		{"a pause's copy", Step{TaskID: id, Input: gov.Input{Kind: gov.KindPaused}, CommandID: "update-1", CommandType: events.TypeTaskPaused, Seq: seq + 11}, 0},
	} {
		acc, err := s.repeatedCommand(t.Context(), c.step)
		if err != nil || acc == nil {
			t.Fatalf("%s: answered %+v, %v; want it answered as applied already", c.what, acc, err)
		}
		if len(acc.Trail) != 1 || !strings.Contains(acc.Trail[0], "applied already") {
			t.Fatalf("%s: trail %q, want it answered as applied already", c.what, acc.Trail)
		}
		if acc.SpecRevision != c.want {
			t.Errorf("%s: answered at specRevision %d, want %d", c.what, acc.SpecRevision, c.want)
		}
	}
	if now, err := s.tasks.Get(t.Context(), id); err != nil || now.Revision() != ent.Revision() {
		t.Fatalf("after the copies: spec at %v (%v), want revision %d kept", now, err, ent.Revision())
	}
}
