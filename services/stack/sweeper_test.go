package stack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

func keyExists(js jetstream.JetStream, bucket, key string) bool {
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		return false
	}
	_, err = kv.Get(context.Background(), key)
	return err == nil
}

// putMinuteTask stores a 1-minute task's spec and its schedule st.
func putMinuteTask(t *testing.T, srv *natstest.Server, st gov.State) {
	t.Helper()
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, st.TaskID, events.TaskSpec{ID: st.TaskID, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
	natstest.PutJSON(t, srv.JS, streams.BucketSchedules, st.TaskID, st)
}

// dispatches subscribes to the dispatches of task id (flushed, so none
// published from now on is missed); next returns the next one, or fails
// the test with what after 10 s.
func dispatches(t *testing.T, srv *natstest.Server, id string) (next func(what string) events.Dispatch) {
	t.Helper()
	ch := make(chan *nats.Msg, 4)
	natstest.ChanSubscribe(t, srv.NC, events.DispatchSubject(id), ch)
	return func(what string) events.Dispatch {
		t.Helper()
		select {
		case m := <-ch:
			ev, err := events.Decode(m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			var d events.Dispatch
			if err := events.DecodeData(ev, &d); err != nil {
				t.Fatal(err)
			}
			return d
		case <-time.After(10 * time.Second):
			t.Fatal(what + " was not re-dispatched")
		}
		return events.Dispatch{}
	}
}

func TestSweeperRenudgesZombiesRemovesOrphansAndScoresStaleness(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	now := time.Now().UTC()
	// "zombie" fell due 10 minutes ago and nothing ever happened.
	putMinuteTask(t, srv, gov.State{
		TaskID: "zombie", NextRunAt: now.Add(-10 * time.Minute), Source: gov.SourceBaselineInterval,
		LastScheduledAt: now.Add(-11 * time.Minute), LastSuccessAt: now.Add(-11 * time.Minute),
	})
	// "orphan" has schedule and breaker state but no spec: it was deleted.
	natstest.PutJSON(t, srv.JS, streams.BucketSchedules, "orphan", gov.State{TaskID: "orphan", NextRunAt: now.Add(time.Hour)})
	natstest.PutJSON(t, srv.JS, streams.BucketBreakers, "orphan", map[string]any{"key": "orphan", "state": "open"})

	zombie := dispatches(t, srv, "zombie")
	e := &env{t: t, srv: srv}
	e.st = e.startWith(func(c *stack.Config) { c.PerTaskMetrics = true }, "sweeper")
	if d := zombie("the zombie run"); d.Reason != "zombie" || !d.ScheduledAt.Equal(now.Add(-10*time.Minute).Truncate(time.Nanosecond)) {
		t.Fatalf("re-nudged dispatch = %+v, want reason zombie for the missed slot", d)
	}
	natstest.Eventually(t, 5*time.Second, "orphaned schedule and breaker removed", func() bool {
		return !keyExists(srv.JS, streams.BucketSchedules, "orphan") && !keyExists(srv.JS, streams.BucketBreakers, "orphan")
	})
	m := e.st.Metrics()
	natstest.Eventually(t, 5*time.Second, "staleness exported", func() bool {
		// 11 minutes since the last success of a 1m task: fully stale.
		return testutil.ToFloat64(m.StalenessMax) == 1 && testutil.ToFloat64(m.TaskStaleness.WithLabelValues("zombie")) == 1
	})
	// Counted once the re-nudge's publish returns, an instant after the
	// dispatch is stored.
	natstest.Eventually(t, 5*time.Second, "flyball_zombies_renudged_total counts the re-nudge", func() bool {
		return testutil.ToFloat64(m.ZombiesRenudged) >= 1
	})

	// A schedule written once the sweeper has caught up is kept undecoded
	// until the next sweep, which must still see it.
	late := dispatches(t, srv, "late")
	putMinuteTask(t, srv, gov.State{
		TaskID: "late", NextRunAt: now.Add(-10 * time.Minute), Source: gov.SourceBaselineInterval,
		LastScheduledAt: now.Add(-11 * time.Minute),
	})
	if d := late("a zombie schedule written after the sweeper caught up"); d.Reason != "zombie" {
		t.Fatalf("re-nudged dispatch of the late schedule: %+v", d)
	}
}

// TestPausedTaskDoesNotRaiseTheStalenessGauge: a paused task grows stale
// on purpose, and flyball_staleness_score, the highest score, counted it:
// one task paused for a week held the gauge (and the FlyballTaskStale
// alert built on it) at 1 and hid every task that really stopped
// succeeding. The gauge covers tasks that are not paused now; the API,
// `flyball status` and the per-task series still show the paused one.
func TestPausedTaskDoesNotRaiseTheStalenessGauge(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	now := time.Now().UTC()
	putMinuteTask(t, srv, gov.State{
		TaskID: "resting", Paused: true, Source: gov.SourcePaused,
		LastScheduledAt: now.Add(-time.Hour), LastSuccessAt: now.Add(-time.Hour),
	})
	putMinuteTask(t, srv, gov.State{
		TaskID: "busy", NextRunAt: now.Add(30 * time.Second), Source: gov.SourceBaselineInterval,
		LastScheduledAt: now.Add(-30 * time.Second), LastSuccessAt: now.Add(-30 * time.Second),
	})
	e := &env{t: t, srv: srv}
	e.st = e.startWith(func(c *stack.Config) { c.PerTaskMetrics = true }, "sweeper")
	m := e.st.Metrics()
	natstest.Eventually(t, 10*time.Second, "the paused task scored", func() bool {
		return testutil.ToFloat64(m.TaskStaleness.WithLabelValues("resting")) == 1
	})
	// The per-task gauge is set just before the maximum: two sweeps'
	// ends (the first may be one signalled earlier) take the scoring
	// sweep to its end, so a maximum that counted the paused task shows.
	for range 2 {
		<-e.st.Sweeper.Swept()
	}
	if got := testutil.ToFloat64(m.StalenessMax); got != 0 {
		t.Fatalf("flyball_staleness_score = %v with one paused stale task and one fresh task, want 0", got)
	}
}

// TestRunAfterAnEndedPauseIsRenudged: a timed pause stays in the state
// until the run after it. If that run's dispatch never ran, the sweeper
// skipped the task as paused and it stayed stuck; a pause whose end has
// passed no longer counts, so the zombie is re-dispatched like any other.
func TestRunAfterAnEndedPauseIsRenudged(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	now := time.Now().UTC()
	putMinuteTask(t, srv, gov.State{
		TaskID: "woke", Paused: true, PausedUntil: now.Add(-time.Hour), NextRunAt: now.Add(-10 * time.Minute), Source: gov.SourcePaused,
		LastScheduledAt: now.Add(-2 * time.Hour), LastSuccessAt: now.Add(-2 * time.Hour),
	})
	woke := dispatches(t, srv, "woke")
	e := &env{t: t, srv: srv}
	e.st = e.startWith(nil, "sweeper")
	woke("the run after an ended pause, 10 minutes overdue,")
	natstest.Eventually(t, 5*time.Second, "the task counts for staleness", func() bool {
		return testutil.ToFloat64(e.st.Metrics().StalenessMax) == 1
	})
}

// TestRunLostAfterARetryIsRenudged: a run that failed and was waiting for
// its retry, whose dispatch then left DISPATCH with no final outcome (lost
// with the stream's data, say), was taken for a run whose outcome the
// governor had yet to apply: its non-final run.failed counted as the
// slot's outcome. The governor ignores non-final failures, so the slot
// stayed planned, nothing dispatched it, and the task never ran again.
// Only a final outcome means the slot completed: a run that failed for
// good is left to the governor.
func TestRunLostAfterARetryIsRenudged(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	slot := time.Now().UTC().Add(-10 * time.Minute)
	for _, id := range []string{"retrying", "failed"} {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, id, gov.State{
			TaskID: id, NextRunAt: slot, Source: gov.SourceBaselineInterval,
			LastScheduledAt: slot.Add(-time.Hour), LastSuccessAt: slot.Add(-time.Hour),
		})
		r := events.Run{
			DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1,
			StartedAt: slot, FinishedAt: slot.Add(time.Second), Error: "503", ErrorKind: events.ErrorTransient,
			RetryIn: events.Duration(5 * time.Second), Final: id == "failed",
		}
		if err := jsutil.PublishEvent(t.Context(), srv.JS, events.RunSubject(events.OutcomeFailed, id), r.DispatchID+"/1",
			events.TypeRunFailed, "flyball/executor/test", id, r, r.FinishedAt); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, srv: srv}
	e.st = e.startWith(nil, "sweeper")
	<-e.st.Sweeper.Swept() // a sweep re-nudges before it reports
	st, err := srv.JS.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), events.DispatchSubject("retrying"))
	if err != nil {
		t.Fatalf("a run lost after a non-final failure, 10 minutes overdue, was not re-dispatched (%v): its failed attempt counted as the slot's outcome", err)
	}
	if !strings.Contains(string(m.Data), `"reason":"zombie"`) || m.Header.Get(jetstream.MsgIDHeader) != events.DispatchID("retrying", slot) {
		t.Fatalf("re-nudged dispatch %s %s, want the slot's, reason zombie", m.Header.Get(jetstream.MsgIDHeader), m.Data)
	}
	if _, err := st.GetLastMsgForSubject(t.Context(), events.DispatchSubject("failed")); err == nil {
		t.Fatal("a run that failed for good was re-dispatched: its final outcome is the governor's to apply")
	}
}

// TestDeadLetteredRunIsNotRenudged: a run dead-lettered while the governor
// was down for longer than the zombie window still had its slot as the
// schedule's nextRunAt, with no dispatch pending. A max-deliveries dead
// letter has no final run.failed on RUNS, so the sweeper took the slot for
// a lost run and dispatched it again: the target was called again for a
// run that had failed for good. The slot's dead letter on DEADLETTER now
// counts as its outcome; one for an earlier slot does not.
func TestDeadLetteredRunIsNotRenudged(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	slot := time.Now().UTC().Add(-10 * time.Minute)
	for id, deadSlot := range map[string]time.Time{"deadlettered": slot, "earlier": slot.Add(-time.Hour)} {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, id, gov.State{
			TaskID: id, NextRunAt: slot, Source: gov.SourceBaselineInterval,
			LastScheduledAt: slot.Add(-time.Hour), LastSuccessAt: slot.Add(-time.Hour),
		})
		d := events.Dispatch{DispatchID: events.DispatchID(id, deadSlot), TaskID: id, ScheduledAt: deadSlot}
		dl := events.DeadLetter{TaskID: id, Reason: events.DeadLetterMaxDeliveries, Dispatch: d, Errors: []events.AttemptError{}, DeadLetteredAt: deadSlot.Add(time.Minute)}
		if err := jsutil.PublishEvent(t.Context(), srv.JS, events.DeadLetterSubject(id), "deadletter:"+d.DispatchID,
			events.TypeDeadLettered, "flyball/deadletter/test", id, dl, dl.DeadLetteredAt); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, srv: srv}
	e.st = e.startWith(nil, "sweeper") // no governor: the dead letters stay unapplied
	<-e.st.Sweeper.Swept()             // a sweep re-nudges before it reports
	st, err := srv.JS.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetLastMsgForSubject(t.Context(), events.DispatchSubject("deadlettered")); err == nil {
		t.Fatalf("a dead-lettered slot was dispatched again: %s", m.Data)
	}
	if _, err := st.GetLastMsgForSubject(t.Context(), events.DispatchSubject("earlier")); err != nil {
		t.Fatalf("a lost run whose task has only an earlier slot's dead letter was not re-dispatched (%v)", err)
	}
}

// TestOutcomeOfADeletedTaskDoesNotHideAZombie: the zombie check takes a
// final outcome of the slot on RUNS for the governor being behind, and
// does not re-dispatch. An outcome of a deleted task of the same ID (its
// taskCreatedAt is not the schedule's createdAt) is one the governor
// ignores, so it must not hide a lost run of the task created again: the
// schedule would never move.
func TestOutcomeOfADeletedTaskDoesNotHideAZombie(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	slot := time.Now().UTC().Add(-10 * time.Minute)
	created := slot.Add(-time.Hour)
	for id, runOf := range map[string]time.Time{"own": created, "namesake": created.Add(-time.Hour)} {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, id, gov.State{
			TaskID: id, NextRunAt: slot, Source: gov.SourceBaselineInterval, CreatedAt: created,
			LastScheduledAt: slot.Add(-time.Hour), LastSuccessAt: slot.Add(-time.Hour),
		})
		r := events.Run{
			DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1,
			StartedAt: slot, FinishedAt: slot.Add(time.Second), Status: 200, TaskCreatedAt: runOf,
		}
		if err := jsutil.PublishEvent(t.Context(), srv.JS, events.RunSubject(events.OutcomeSucceeded, id), r.DispatchID+"/1",
			events.TypeRunSucceeded, "flyball/executor/test", id, r, r.FinishedAt); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, srv: srv}
	e.st = e.startWith(nil, "sweeper") // no governor: the outcomes stay unapplied
	<-e.st.Sweeper.Swept()             // a sweep re-nudges before it reports
	st, err := srv.JS.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetLastMsgForSubject(t.Context(), events.DispatchSubject("own")); err == nil {
		t.Fatalf("a slot with its own outcome on RUNS was dispatched again: %s", m.Data)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), events.DispatchSubject("namesake"))
	if err != nil {
		t.Fatalf("a lost run whose slot has only a deleted namesake's outcome was not re-dispatched (%v)", err)
	}
	if !strings.Contains(string(m.Data), `"taskCreatedAt":"`+created.Format(time.RFC3339Nano)+`"`) {
		t.Fatalf("re-nudged dispatch %s does not name the schedule's createdAt", m.Data)
	}
}
