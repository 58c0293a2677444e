package deadletter_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestExhaustedDispatchOfAStoredOutcomeIsNotDeadLettered: a run that
// succeeded at its first attempt, and a skipped dispatch, write no
// attempt record. When their acks were lost on every delivery until
// MaxDeliver, the MAX_DELIVERIES advisory found no record and wrote a
// max-deliveries entry (attempts 0, no errors), counted it and made the
// governor hold the task for its recheck, for a run whose outcome was on
// RUNS. The dispatch is deleted without an entry when its slot's outcome
// is stored; a stored outcome of another slot does not count.
func TestExhaustedDispatchOfAStoredOutcomeIsNotDeadLettered(t *testing.T) {
	slot := time.UnixMilli(1772442000000).UTC() // publishDispatch's
	for _, c := range []struct {
		name     string
		outcome  events.Outcome
		typ      string
		run      events.Run
		wantDead uint64
	}{
		{
			name: "succeeded at the first attempt", outcome: events.OutcomeSucceeded, typ: events.TypeRunSucceeded,
			run: events.Run{Attempt: 1, Status: 200},
		},
		{
			name: "skipped", outcome: events.OutcomeSkipped, typ: events.TypeRunSkipped,
			run: events.Run{Reason: "paused"},
		},
		{
			name: "an earlier slot succeeded", outcome: events.OutcomeSucceeded, typ: events.TypeRunSucceeded,
			run: events.Run{ScheduledAt: slot.Add(-time.Minute), Attempt: 1, Status: 200}, wantDead: 1,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			ctx := t.Context()
			seq := publishDispatch(t, h.js, "t1")
			r := c.run
			if r.ScheduledAt.IsZero() {
				r.ScheduledAt = slot
			}
			r.DispatchID, r.TaskID = events.DispatchID("t1", r.ScheduledAt), "t1"
			body, err := events.Marshal(c.typ, "test", "t1", r, time.Now(), r.DispatchID+"/1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.js.Publish(ctx, events.RunSubject(c.outcome, "t1"), body); err != nil {
				t.Fatal(err)
			}
			advise(t, h.js, seq, 50)
			if n := h.entries("t1"); n != c.wantDead {
				t.Fatalf("%d dead-letter entries, want %d", n, c.wantDead)
			}
			if n := testutil.ToFloat64(h.metrics.DeadLetterTotal.WithLabelValues(events.DeadLetterMaxDeliveries)); n != float64(c.wantDead) {
				t.Fatalf(`flyball_deadletter_total{reason="max-deliveries"} = %v, want %d`, n, c.wantDead)
			}
			requireDispatchGone(t, h.js, seq)
		})
	}
}
