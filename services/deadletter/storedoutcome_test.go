package deadletter_test

import (
	"encoding/json"
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
// is stored; a stored outcome of another slot does not count. A final
// failure of the slot has its entry (max-attempts) from its run.failed,
// and the advisory adds none.
func TestExhaustedDispatchOfAStoredOutcomeIsNotDeadLettered(t *testing.T) {
	slot := time.UnixMilli(1772442000000).UTC() // publishDispatch's
	for _, c := range []struct {
		name    string
		outcome events.Outcome
		typ     string
		run     events.Run
		// wantReason is the reason of the one entry the task gets, "" for none.
		wantReason string
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
			run: events.Run{ScheduledAt: slot.Add(-time.Minute), Attempt: 1, Status: 200}, wantReason: events.DeadLetterMaxDeliveries,
		},
		{
			name: "failed at its last attempt", outcome: events.OutcomeFailed, typ: events.TypeRunFailed,
			run:        events.Run{Attempt: 3, Status: 503, Error: "HTTP 503", ErrorKind: events.ErrorTransient, Final: true},
			wantReason: events.DeadLetterMaxAttempts,
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
			if r.Final {
				// The dead-letter service's RUNS path writes its entry
				// (h.failed waits for that) before the advisory comes.
				r.Dispatch = &events.Dispatch{DispatchID: r.DispatchID, TaskID: "t1", ScheduledAt: r.ScheduledAt}
				data, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				h.failed("t1", string(data))
			} else {
				body, err := events.Marshal(c.typ, "test", "t1", r, time.Now(), r.DispatchID+"/1")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.js.Publish(ctx, events.RunSubject(c.outcome, "t1"), body); err != nil {
					t.Fatal(err)
				}
			}
			advise(t, h.js, seq, 50)
			var want uint64
			if c.wantReason != "" {
				want = 1
			}
			if n := h.entries("t1"); n != want {
				t.Fatalf("%d dead-letter entries, want %d", n, want)
			}
			for _, reason := range []string{events.DeadLetterMaxDeliveries, events.DeadLetterMaxAttempts} {
				var want float64
				if reason == c.wantReason {
					want = 1
				}
				if n := testutil.ToFloat64(h.metrics.DeadLetterTotal.WithLabelValues(reason)); n != want {
					t.Fatalf(`flyball_deadletter_total{reason=%q} = %v, want %v`, reason, n, want)
				}
			}
			requireDispatchGone(t, h.js, seq)
		})
	}
}
