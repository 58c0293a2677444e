package stack_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestTaskCreatedAgainWithinTheLeadRunsAtItsFirstSlot: the timer publishes
// a cron task's slot up to its lead (1 s) early, and the executor holds it
// until the slot. A task deleted and created again under the same ID in
// that second gets that very slot as its first, and its dispatch has the
// same Nats-Msg-Id (<id>:<slot ms>) as the old task's, still in DISPATCH's
// duplicate window: JetStream drops it. The old dispatch was then skipped
// as another task's, so nothing ran the new task's slot, and its schedule
// stayed there until the sweeper re-nudged it (--zombie-after, 5 min by
// default). Now the executor runs the held dispatch as the new task's
// slot: the new target is called at the slot, and the task goes on.
//
// The delete and the creation must both land inside the lead; on a
// machine too slow for that the new task's first slot is the next one,
// which is not the case under test, so the test tries again.
func TestTaskCreatedAgainWithinTheLeadRunsAtItsFirstSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "executor", "timer") // no sweeper: nothing re-nudges a stalled slot
	const id = "recut"
	const tries = 4
	targets := make([]*scripted, tries+1)
	for i := range targets {
		targets[i] = newScripted(t, 200)
	}
	specOf := func(i int) string {
		return fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"cron":"*/4 * * * * *"}}`, id, targets[i].srv.URL)
	}
	dispatches := e.collect(events.DispatchSubject(id))
	accepted := e.collect("flyball.task.accepted." + id)
	commands := 0
	command := func(typ, cmdID string, data []byte) {
		t.Helper()
		body := fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":"test/user","id":%q,"subject":%q,"datacontenttype":"application/json","data":%s}`, typ, cmdID, id, data)
		subject := "flyball.task.created." + id
		if typ == events.TypeTaskDeleted {
			subject = "flyball.task.deleted." + id
		}
		if err := e.srv.NC.Publish(subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
		commands++
		natstest.Eventually(t, 10*time.Second, typ+" accepted", func() bool { return len(accepted()) == commands })
	}
	command(events.TypeTaskCreated, "create-0", []byte(specOf(0)))
	created := e.storedSchedule(id).CreatedAt

	var (
		slot time.Time
		now  int // the target of the task created within the lead
	)
	for try := range tries {
		// A dispatch of the current task held ahead of its slot by most
		// of the lead (the first slot of a task gets a quarter of it).
		seen := len(dispatches())
		natstest.Eventually(t, 15*time.Second, "a dispatch published its lead early", func() bool {
			for _, ev := range dispatches()[seen:] {
				var d events.Dispatch
				if err := events.DecodeDispatch(ev, &d); err != nil {
					t.Fatalf("dispatch does not decode: %v", err)
				}
				if d.TaskCreatedAt.Equal(created) && time.Until(d.ScheduledAt) > 700*time.Millisecond {
					slot = d.ScheduledAt
					return true
				}
			}
			return false
		})
		command(events.TypeTaskDeleted, fmt.Sprintf("delete-%d", try), []byte(fmt.Sprintf(`{"id":%q}`, id)))
		command(events.TypeTaskCreated, fmt.Sprintf("create-%d", try+1), []byte(specOf(try+1)))
		st := e.storedSchedule(id)
		created = st.CreatedAt
		if st.NextRunAt.Equal(slot) {
			now = try + 1
			break
		}
		t.Logf("try %d: created again after the slot %s (first slot %s); trying the next one", try, slot.Format(time.RFC3339Nano), st.NextRunAt.Format(time.RFC3339Nano))
		if try == tries-1 {
			t.Fatalf("could not delete and create the task again within a 1 s lead in %d tries", tries)
		}
	}
	keyOf := func(at time.Time) string { return events.DispatchID(id, at) }
	calledAt := func(i int, at time.Time) bool {
		return slices.ContainsFunc(targets[i].Calls(), func(c call) bool { return c.key == keyOf(at) })
	}
	natstest.Eventually(t, 10*time.Second, "the new task's target called at the slot it was created within the lead of", func() bool {
		return calledAt(now, slot)
	})
	if calledAt(now-1, slot) {
		t.Errorf("the deleted task's target was called for %s too", slot.Format(time.RFC3339Nano))
	}
	// Its outcome was applied to the new task, whose schedule goes on.
	next := slot.Add(4 * time.Second)
	natstest.Eventually(t, 15*time.Second, "the new task's next slot runs", func() bool { return calledAt(now, next) })
	if got := e.storedSchedule(id).CreatedAt; !got.Equal(created) {
		t.Errorf("schedule names createdAt %v, want the new task's %v", got, created)
	}
}

// TestTaskCreatedAgainIsNotHeldBackByTheDeletedTasksRetry: a task is
// deleted, and created again under its ID, while its run waits for a
// retry 30 s away (its dispatch nakked with that delay, which the server
// keeps). DISPATCH holds one message per task: before, every dispatch of
// the task created again was refused (10077) until the old retry came
// due and was skipped as the deleted task's, up to retry.maxDelay (plus
// its jitter) later: the new task first ran about 30 s after its
// creation. The governor now purges the deleted task's DISPATCH subject
// as it applies the delete, and the new task runs at once.
func TestTaskCreatedAgainIsNotHeldBackByTheDeletedTasksRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "executor", "timer")
	const id = "retried"
	failing, succeeding := newScripted(t, 503), newScripted(t, 200)
	accepted := e.collect("flyball.task.accepted." + id)
	failed := e.collect(events.RunSubject(events.OutcomeFailed, id))
	commands := 0
	command := func(verb events.Verb, typ, cmdID, data string) {
		t.Helper()
		body, err := events.Marshal(typ, "test/user", id, json.RawMessage(data), time.Now(), cmdID)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.srv.NC.Publish(events.TaskSubject(verb, id), body); err != nil {
			t.Fatal(err)
		}
		commands++
		natstest.Eventually(t, 10*time.Second, typ+" accepted", func() bool { return len(accepted()) == commands })
	}
	command(events.VerbCreated, events.TypeTaskCreated, "create-1", fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1h"},
		"retry":{"maxAttempts":3,"initialDelay":"30s","multiplier":1,"maxDelay":"30s","jitter":0}}`, id, failing.srv.URL))
	natstest.Eventually(t, 10*time.Second, "attempt 1 failed, its retry due in 30 s", func() bool { return len(failed()) == 1 })
	command(events.VerbDeleted, events.TypeTaskDeleted, "delete-1", fmt.Sprintf(`{"id":%q}`, id))
	created := time.Now()
	command(events.VerbCreated, events.TypeTaskCreated, "create-2", fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, id, succeeding.srv.URL))
	natstest.Eventually(t, 10*time.Second, "the task created again runs (its first slot is due at once)", func() bool { return len(succeeding.Calls()) >= 1 })
	t.Logf("the task created again ran %s after its creation", time.Since(created).Round(10*time.Millisecond))
	if n := len(failing.Calls()); n != 1 {
		t.Errorf("the deleted task's target was called %d times, want once: its retry ran after the delete", n)
	}
}
