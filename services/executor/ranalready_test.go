package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// publishEvent stores an event of typ with data on subject, as its
// service would.
func publishEvent(t *testing.T, js jetstream.JetStream, subject, typ, id string, data any) {
	t.Helper()
	body, err := events.Marshal(typ, "test", id, data, time.Now().UTC(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), subject, body); err != nil {
		t.Fatal(err)
	}
}

// TestASlotDispatchedAgainAfterItRanIsSkipped: a timer that starts while
// the governor has not applied a slot's outcome publishes the slot again
// (the schedule still names it); past DISPATCH's 2-minute duplicate window
// it is stored as a new dispatch, and ran the slot a second time. A
// dispatch fired a minute or more after its slot is now skipped when the
// slot, or a later one, has its final outcome on RUNS or its dead letter
// on DEADLETTER. One fired on time, one whose slot has only a failure with
// a retry to follow, or only outcomes of other slots or of another task
// of the same ID, is called.
//
// "Late" is judged by the time DISPATCH stored the dispatch too, not only
// by its firedAt: the re-firing timer's clock can run behind the server's
// (which judged the duplicate window by the first publish, made by
// another timer on its own clock). A dispatch fired, by its timer's
// clock, a second after its slot but stored minutes after it was called
// a second time (and restarted its attempt count at 1).
func TestASlotDispatchedAgainAfterItRanIsSkipped(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)

	slot := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond)
	created := slot.Add(-time.Hour)
	ran := func(id string, at time.Time, o events.Outcome, final bool, createdAt time.Time) func() {
		return func() {
			d := events.Dispatch{DispatchID: events.DispatchID(id, at), TaskID: id, ScheduledAt: at, TaskCreatedAt: createdAt}
			r := d.Run()
			r.Attempt, r.StartedAt, r.FinishedAt, r.Final = 1, at, at.Add(time.Second), final
			if o == events.OutcomeSkipped {
				r.Reason = "task paused"
			}
			publishEvent(t, srv.JS, events.RunSubject(o, id), o.Type(), id, r)
		}
	}
	deadLettered := func(id string, at time.Time) func() {
		return func() {
			d := events.Dispatch{DispatchID: events.DispatchID(id, at), TaskID: id, ScheduledAt: at, FiredAt: at, TaskCreatedAt: created}
			publishEvent(t, srv.JS, events.DeadLetterSubject(id), events.TypeDeadLettered, id, events.DeadLetter{
				TaskID: id, Reason: events.DeadLetterMaxDeliveries, Dispatch: d, Attempts: 1, FirstFailedAt: at, DeadLetteredAt: at,
			})
		}
	}
	// onTime is the slot of the dispatch fired, and stored, on time.
	onTime := time.Now().UTC().Truncate(time.Millisecond)
	cases := []struct {
		id     string
		before func()        // what RUNS or DEADLETTER holds
		late   time.Duration // the dispatch's firedAt after its slot
		called bool
		at     time.Time // the slot, when not slot
	}{
		{id: "succeeded", before: ran("succeeded", slot, events.OutcomeSucceeded, false, created), late: 3 * time.Minute},
		{id: "skipped", before: ran("skipped", slot, events.OutcomeSkipped, false, created), late: 3 * time.Minute},
		{id: "failed-final", before: ran("failed-final", slot, events.OutcomeFailed, true, created), late: 3 * time.Minute},
		{id: "dead-lettered", before: deadLettered("dead-lettered", slot), late: 3 * time.Minute},
		{id: "on-time", before: ran("on-time", onTime, events.OutcomeSucceeded, false, created), late: time.Second, called: true, at: onTime},
		// Fired by a timer whose clock runs behind the server's: a second
		// after its slot by its clock, stored ten minutes after it.
		{id: "stored-late", before: ran("stored-late", slot, events.OutcomeSucceeded, false, created), late: time.Second},
		{id: "retry-pending", before: ran("retry-pending", slot, events.OutcomeFailed, false, created), late: 3 * time.Minute, called: true},
		// A run-now planned ahead of a slot held by a slow call: DISPATCH
		// refused it until that call ended, so it was fired late, after
		// the later slot's outcome.
		{id: "a-later-slot-ran", before: ran("a-later-slot-ran", slot.Add(time.Minute), events.OutcomeSucceeded, false, created), late: 3 * time.Minute, called: true},
		{id: "earlier-slot-ran", before: ran("earlier-slot-ran", slot.Add(-time.Minute), events.OutcomeSucceeded, false, created), late: 3 * time.Minute, called: true},
		{id: "other-task-ran", before: ran("other-task-ran", slot, events.OutcomeSucceeded, false, created.Add(-time.Hour)), late: 3 * time.Minute, called: true},
		{id: "nothing-ran", before: func() {}, late: 3 * time.Minute, called: true},
	}
	for _, c := range cases {
		spec := target.spec(c.id)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, spec)
		c.before()
	}
	ex := startExecutor(t, srv, newLogLines())
	slotOf := func(at time.Time) time.Time {
		if at.IsZero() {
			return slot
		}
		return at
	}
	for _, c := range cases {
		slot := slotOf(c.at)
		d := events.Dispatch{
			DispatchID: events.DispatchID(c.id, slot), TaskID: c.id, ScheduledAt: slot, FiredAt: slot.Add(c.late),
			Source: "baseline-interval", TaskCreatedAt: created,
		}
		publishEvent(t, srv.JS, events.DispatchSubject(c.id), events.TypeRunDue, c.id, d)
	}
	// skipReason is the reason of the task's last run.skipped naming the
	// dispatched slot as already run, or "".
	skipReason := func(id string) string {
		if r, ok := lastRun(t, srv.JS, events.OutcomeSkipped, id); ok && strings.HasPrefix(r.Reason, "already ran") {
			return r.Reason
		}
		return ""
	}
	for _, c := range cases {
		natstest.Eventually(t, 20*time.Second, c.id+": a call or a skip", func() bool {
			return target.of(c.id) > 0 || skipReason(c.id) != ""
		})
		n := target.of(c.id)
		reason := skipReason(c.id)
		slot := slotOf(c.at)
		switch {
		case c.called && (n != 1 || reason != ""):
			t.Errorf("%s: %d calls and skip reason %q, want the slot called once", c.id, n, reason)
		case !c.called && (n != 0 || !strings.Contains(reason, "dispatched again at "+slot.Add(c.late).Format(time.RFC3339Nano))):
			t.Errorf("%s: %d calls and skip reason %q, want it skipped as already run", c.id, n, reason)
		}
	}
	// The counter follows the event's confirmation by a moment.
	natstest.Eventually(t, 10*time.Second, "flyball_skips_total{reason="+skipAlreadyRan+"} = 5", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.SkipsTotal.WithLabelValues(skipAlreadyRan)) == 5
	})
}
