package governor

import (
	"fmt"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestACommandCompletesTheCreationOfATaskWithNoSchedule: a task has its
// spec and no schedule (a restore, a key deleted by hand, a crash between
// a creation's spec and schedule writes). A command other than a
// creation used to create the schedule from a zero state: taskId "" and
// createdAt 0001-01-01 (so the executor compared no createdAt and the
// sweeper never re-dispatched a zombie of it), an update stored the spec
// with a zero createdAt, and the sweeper's repair was then answered
// task.rejected ("already exists"). The command now completes the
// creation from the stored spec (its createdAt) and applies on top, and
// the repair is a harmless duplicate, answered task.accepted. A schedule
// that does not decode (written by hand or by another version), or that
// names no decision (JSON null or {}), is one with no schedule: the
// command used to apply to a zero state over it.
func TestACommandCompletesTheCreationOfATaskWithNoSchedule(t *testing.T) {
	s, js := startGovernor(t)
	cases := []struct {
		verb  events.Verb
		typ   string
		data  func(id string) any
		check func(st gov.State) error
	}{
		{
			events.VerbPaused, events.TypeTaskPaused, func(id string) any { return events.TaskPause{ID: id, Reason: "deploy"} },
			func(st gov.State) error {
				if !st.Paused {
					return fmt.Errorf("not paused")
				}
				return nil
			},
		},
		{events.VerbHinted, events.TypeTaskHinted, func(id string) any {
			return events.TaskHint{ID: id, Interval: events.Duration(5 * time.Minute), Reason: "load"}
		}, func(gov.State) error { return nil }},
		{events.VerbUpdated, events.TypeTaskUpdated, func(id string) any {
			spec := minuteSpec(id)
			spec.Schedule.Interval = events.Duration(2 * time.Minute)
			return *spec
		}, func(gov.State) error { return nil }},
		{
			events.VerbResumed, events.TypeTaskResumed, func(id string) any { return events.TaskRef{ID: id} },
			func(gov.State) error { return nil },
		},
		{
			events.VerbRequeued, events.TypeTaskRequeued, func(id string) any { return events.TaskRequeue{ID: id} },
			func(gov.State) error { return nil },
		},
	}
	// Each case with the schedule key deleted, then rewritten by hand with
	// a value that does not decode, or that names no decision.
	values := []struct{ suffix, value string }{
		{"", ""}, {"-unreadable", "not json"}, {"-null", "null"}, {"-empty", "{}"},
	}
	for i := range len(values) * len(cases) {
		c, v := cases[i%len(cases)], values[i/len(cases)]
		name := string(c.verb) + v.suffix
		t.Run(name, func(t *testing.T) {
			id := "unscheduled-" + name
			command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-"+id, *minuteSpec(id))
			createdAt := storedSpecCreatedAt(t, s, id)
			if createdAt.IsZero() {
				t.Fatal("the stored spec has no createdAt")
			}
			// The schedule key deleted, or rewritten, by hand.
			var err error
			if v.value != "" {
				_, err = s.schedules.PutString(t.Context(), id, v.value)
			} else {
				err = s.schedules.Delete(t.Context(), id)
			}
			if err != nil {
				t.Fatal(err)
			}
			s.states.drop(id)

			command(t, js, c.verb, c.typ, id, name+"-"+id, c.data(id))
			if rej := natstest.Read(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRejected, id)); len(rej) != 0 {
				t.Fatalf("the %s was rejected", c.verb)
			}
			st := storedState(t, s, id)
			if st.TaskID != id || !st.CreatedAt.Equal(createdAt) || st.NextRunAt.IsZero() && !st.Paused {
				t.Errorf("schedule after the %s: taskId %q, createdAt %v (spec's %v), next %v",
					c.verb, st.TaskID, st.CreatedAt.Format(time.RFC3339Nano), createdAt.Format(time.RFC3339Nano), st.NextRunAt)
			}
			if err := c.check(st); err != nil {
				t.Errorf("the %s was not applied: %v", c.verb, err)
			}
			if got := storedSpecCreatedAt(t, s, id); !got.Equal(createdAt) {
				t.Errorf("the spec's createdAt is %v after the %s, was %v", got.Format(time.RFC3339Nano), c.verb, createdAt.Format(time.RFC3339Nano))
			}

			// The sweeper's repair, published before it saw the schedule.
			ent, err := s.tasks.Get(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			spec := minuteSpec(id)
			if c.verb == events.VerbUpdated {
				spec = new(c.data(id).(events.TaskSpec))
			}
			repair := fmt.Sprintf("%s%s:%d", events.RepairCreatePrefix, id, ent.Revision())
			command(t, js, events.VerbCreated, events.TypeTaskCreated, id, repair, *spec)
			if rej := natstest.Read(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRejected, id)); len(rej) != 0 {
				var body events.TaskRejected
				e, _ := events.Decode(rej[0].Headers(), rej[0].Data())
				_ = events.DecodeData(e, &body)
				t.Fatalf("the sweeper's repair was rejected: %+v", body.Reasons)
			}
			if _, commands := answers(t, js, id); len(commands) != 3 || commands[2] != repair {
				t.Fatalf("task.accepted answers %v, want the repair's last", commands)
			}
			after := storedState(t, s, id)
			if after.TaskID != id || !after.CreatedAt.Equal(createdAt) || after.LastCommandID != name+"-"+id {
				t.Fatalf("schedule after the repair: taskId %q, createdAt %v (was %v), lastCommandId %q",
					after.TaskID, after.CreatedAt, createdAt, after.LastCommandID)
			}
			if err := c.check(after); err != nil {
				t.Fatalf("the repair undid the %s: %v", c.verb, err)
			}
			if got := storedSpecCreatedAt(t, s, id); !got.Equal(createdAt) {
				t.Fatalf("the spec's createdAt is %v after the repair, was %v", got, createdAt)
			}
		})
	}
}

// TestARedeliveredCreationAfterACommandCompletedItChangesNothing: the
// schedule key of a task is deleted by hand while this replica still
// caches it; a pause then completes the creation (its cached copy fails
// the compare-and-set, and KV has no schedule), and the creation,
// delivered again, is a copy of a command applied before: answered
// task.accepted, the pause and the createdAt kept.
func TestARedeliveredCreationAfterACommandCompletedItChangesNothing(t *testing.T) {
	s, js := startGovernor(t)
	const id = "cached-unscheduled"
	created := events.TaskSubject(events.VerbCreated, id)
	seq := publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-cu", *minuteSpec(id))
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, seq)
	createdAt := storedSpecCreatedAt(t, s, id)
	if err := s.schedules.Delete(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	command(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-cu", events.TaskPause{ID: id})
	st := storedState(t, s, id)
	if st.TaskID != id || !st.CreatedAt.Equal(createdAt) || !st.Paused || st.LastCommandID != "pause-cu" {
		t.Fatalf("schedule after the pause: taskId %q, createdAt %v (spec's %v), paused %v, lastCommandId %q",
			st.TaskID, st.CreatedAt, createdAt, st.Paused, st.LastCommandID)
	}
	if hint(t, s, id) == nil {
		t.Fatal("the paused task has no pause hint")
	}

	s.handleCommand(t.Context(), redeliverSeq(t, js, streams.StreamTasks, created, seq))
	if rej := natstest.Read(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRejected, id)); len(rej) != 0 {
		t.Fatal("the redelivered creation was rejected")
	}
	after := storedState(t, s, id)
	if !after.CreatedAt.Equal(createdAt) || !after.Paused || after.LastCommandID != "pause-cu" {
		t.Fatalf("schedule after the redelivered creation: createdAt %v (was %v), paused %v, lastCommandId %q",
			after.CreatedAt, createdAt, after.Paused, after.LastCommandID)
	}
}
