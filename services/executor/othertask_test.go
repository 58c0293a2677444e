package executor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// dispatchOf publishes a run.due for task id, due now, dispatched from a
// schedule created at created (zero: a dispatch of flyball before
// 2026-11-27).
func dispatchOf(t *testing.T, js jetstream.JetStream, id string, created time.Time) {
	t.Helper()
	dispatchAt(t, js, id, created, time.Now().UTC())
}

// dispatchAt publishes a run.due for task id's slot at slot, fired now.
func dispatchAt(t *testing.T, js jetstream.JetStream, id string, created, slot time.Time) {
	t.Helper()
	fired := time.Now().UTC()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: fired, Source: "test", TaskCreatedAt: created}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, fired, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
}

// outcomeOf waits for the first succeeded, skipped or failed run of task
// id on RUNS and returns its outcome and record.
func outcomeOf(t *testing.T, js jetstream.JetStream, id string) (events.Outcome, events.Run) {
	t.Helper()
	var (
		got events.Outcome
		run events.Run
	)
	natstest.Eventually(t, 20*time.Second, "a run of "+id, func() bool {
		for _, o := range []events.Outcome{events.OutcomeSucceeded, events.OutcomeSkipped, events.OutcomeFailed} {
			if r, ok := lastRun(t, js, o, id); ok {
				got, run = o, r
				return true
			}
		}
		return false
	})
	return got, run
}

// TestADispatchOfADeletedTaskDoesNotCallItsNamesake: the timer publishes
// a dispatch up to its lead (1 s) before the slot. A task deleted and
// created again under the same ID within that time left a dispatch that
// named the old task (its taskCreatedAt) and called the new spec's
// target. Now it is skipped, with a reason naming both tasks, unless the
// schedule, which decides, names the dispatch's task; a dispatch or spec
// naming no createdAt (flyball before 2026-11-27) calls as before.
func TestADispatchOfADeletedTaskDoesNotCallItsNamesake(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)

	old := time.Date(2026, 11, 27, 1, 0, 0, 123456789, time.UTC)
	created := old.Add(90 * time.Second)
	third := created.Add(time.Minute)
	cases := []struct {
		id             string
		spec, schedule time.Time // createdAt stored with the spec and the schedule (zero: none)
		noSchedule     bool
		dispatch       time.Time
		want           events.Outcome
		reason         string
	}{
		{
			id: "old-dispatch", spec: created, schedule: created, dispatch: old, want: events.OutcomeSkipped,
			reason: "task deleted: this slot is of the task created at " + old.Format(time.RFC3339Nano) + "; the task of this ID now was created at " + created.Format(time.RFC3339Nano),
		},
		{id: "new-dispatch", spec: created, schedule: created, dispatch: created, want: events.OutcomeSucceeded},
		{id: "spec-lags", spec: old, schedule: created, dispatch: created, want: events.OutcomeSucceeded},
		{
			id: "schedule-names-a-third", spec: created, schedule: third, dispatch: old, want: events.OutcomeSkipped,
			reason: "now was created at " + third.Format(time.RFC3339Nano),
		},
		{
			id: "no-schedule", spec: created, noSchedule: true, dispatch: old, want: events.OutcomeSkipped,
			reason: "the task of this ID now is being deleted or created",
		},
		{id: "old-version-dispatch", spec: created, schedule: created, want: events.OutcomeSucceeded},
		{id: "old-version-spec", schedule: created, dispatch: old, want: events.OutcomeSucceeded},
		{id: "schedule-names-none", spec: created, dispatch: old, want: events.OutcomeSucceeded},
	}
	for _, c := range cases {
		spec := target.spec(c.id)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, governor.StoredSpec{TaskSpec: &spec, CreatedAt: c.spec})
		if !c.noSchedule {
			st := map[string]any{"taskId": c.id, "nextRunAt": time.Now().Add(time.Hour).UTC()}
			if !c.schedule.IsZero() {
				st["createdAt"] = c.schedule
			}
			natstest.PutJSON(t, srv.JS, streams.BucketSchedules, c.id, st)
		}
	}
	ex := startExecutor(t, srv, newLogLines())
	for _, c := range cases {
		dispatchOf(t, srv.JS, c.id, c.dispatch)
	}
	for _, c := range cases {
		got, run := outcomeOf(t, srv.JS, c.id)
		n := target.of(c.id)
		if got != c.want {
			t.Errorf("%s: run.%s (reason %q), want run.%s", c.id, got, run.Reason, c.want)
			continue
		}
		if want := map[events.Outcome]int{events.OutcomeSucceeded: 1}[c.want]; n != want {
			t.Errorf("%s: %d calls of its target, want %d", c.id, n, want)
		}
		if !run.TaskCreatedAt.Equal(c.dispatch) {
			t.Errorf("%s: run names taskCreatedAt %v, want the dispatch's %v", c.id, run.TaskCreatedAt, c.dispatch)
		}
		if c.reason != "" && !strings.Contains(run.Reason, c.reason) {
			t.Errorf("%s: reason %q, want it to contain %q", c.id, run.Reason, c.reason)
		}
	}
	// The counter follows the event's confirmation by a moment.
	natstest.Eventually(t, 10*time.Second, "flyball_skips_total{reason="+skipRecreated+"} = 3", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.SkipsTotal.WithLabelValues(skipRecreated)) == 3
	})
}

// TestAStaleSpecViewIsReadAgain: the executor's view of flyball-tasks can
// still hold the deleted task's spec when the new task's first dispatch
// arrives. The dispatch names the schedule's createdAt, the view's spec
// another; the schedule says the dispatch is the task's own, so the
// executor reads the spec again and calls the new target, not the old.
func TestAStaleSpecViewIsReadAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	old := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	created := old.Add(time.Minute)
	const id = "lagging"
	stored := func(path string, createdAt time.Time) governor.StoredSpec {
		spec := target.spec(path)
		spec.ID = id
		return governor.StoredSpec{TaskSpec: &spec, CreatedAt: createdAt}
	}
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, stored("old", old))
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, stored("new", created))
	natstest.PutJSON(t, srv.JS, streams.BucketSchedules, id, map[string]any{"taskId": id, "createdAt": created})
	ex := startExecutor(t, srv, newLogLines())
	// The view lagging the re-creation: it holds the old spec at its
	// older revision, the bucket the new one.
	natstest.Eventually(t, 10*time.Second, "the view loaded", func() bool { return ex.specs.Lookup(id).Revision > 1 })
	rev := ex.specs.Lookup(id).Revision
	stale, err := json.Marshal(stored("old", old))
	if err != nil {
		t.Fatal(err)
	}
	ex.specs.Lagging(id, rev-1, stale)
	if got, _, err := ex.specs.Get(t.Context(), id); err != nil || !got.createdAt.Equal(old) {
		t.Fatalf("the view holds %+v (%v), want the old task's spec", got, err)
	}
	dispatchOf(t, srv.JS, id, created)
	natstest.Eventually(t, 20*time.Second, "a call", func() bool { return target.of("new")+target.of("old") > 0 })
	if n, o := target.of("new"), target.of("old"); n != 1 || o != 0 {
		t.Fatalf("calls: %d of the new target, %d of the old; want the new one's only", n, o)
	}
}

// TestTheSlotANewTaskWaitsForRunsAsItsOwn: a cron task deleted and created
// again within the timer's lead before a slot the old task had dispatched
// gets that slot as its first. Its own dispatch has the old one's
// Nats-Msg-Id, and DISPATCH drops it as a duplicate. The executor skipped
// the old dispatch as another task's, so the new task's slot did not run
// until the sweeper re-nudged it. Now the dispatch runs as the new task's
// when the new schedule waits for its slot and the spec names the same
// task; otherwise it is skipped as before.
func TestTheSlotANewTaskWaitsForRunsAsItsOwn(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	old := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	created := old.Add(time.Minute)
	slot := time.Now().Add(300 * time.Millisecond).UTC().Truncate(time.Millisecond)
	cases := []struct {
		id       string
		spec     time.Time // createdAt stored with the spec
		schedule time.Time // and with the schedule
		next     time.Time // the schedule's nextRunAt
		want     events.Outcome
		names    time.Time // the run's taskCreatedAt
	}{
		{id: "waits-for-the-slot", spec: created, schedule: created, next: slot, want: events.OutcomeSucceeded, names: created},
		{id: "waits-for-another-slot", spec: created, schedule: created, next: slot.Add(time.Second), want: events.OutcomeSkipped, names: old},
		{id: "spec-of-a-third-task", spec: created.Add(time.Minute), schedule: created, next: slot, want: events.OutcomeSkipped, names: old},
		{id: "schedule-older-than-the-dispatch", spec: old.Add(-time.Minute), schedule: old.Add(-time.Minute), next: slot, want: events.OutcomeSkipped, names: old},
	}
	for _, c := range cases {
		spec := target.spec(c.id)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, governor.StoredSpec{TaskSpec: &spec, CreatedAt: c.spec})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, c.id, map[string]any{"taskId": c.id, "nextRunAt": c.next, "createdAt": c.schedule})
	}
	startExecutor(t, srv, newLogLines())
	for _, c := range cases {
		dispatchAt(t, srv.JS, c.id, old, slot)
	}
	for _, c := range cases {
		got, run := outcomeOf(t, srv.JS, c.id)
		if got != c.want {
			t.Errorf("%s: run.%s (reason %q), want run.%s", c.id, got, run.Reason, c.want)
			continue
		}
		if want := map[events.Outcome]int{events.OutcomeSucceeded: 1}[c.want]; target.of(c.id) != want {
			t.Errorf("%s: %d calls of its target, want %d", c.id, target.of(c.id), want)
		}
		if !run.TaskCreatedAt.Equal(c.names) {
			t.Errorf("%s: run names taskCreatedAt %v, want %v", c.id, run.TaskCreatedAt, c.names)
		}
	}
}
