package deadletter_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
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

// TestFinalFailureReadAfterItsAdvisoryKeepsItsOwnReason: a final
// failure's run.failed is on RUNS, but the dead-letter service's RUNS
// consumer has not got to it (a backlog) when the dispatch's
// MAX_DELIVERIES advisory is read (its term was lost on every delivery).
// The advisory finds the slot's final outcome on RUNS and deletes the
// dispatch without a max-deliveries entry; the entry comes from RUNS,
// with the final failure's reason: one entry, not max-deliveries.
func TestFinalFailureReadAfterItsAdvisoryKeepsItsOwnReason(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	js := srv.JS
	slot := time.UnixMilli(1772442000000).UTC() // publishDispatch's
	id := events.DispatchID("t1", slot)
	seq := publishDispatch(t, js, "t1")
	natstest.PutJSON(t, js, streams.BucketAttempts, events.AttemptKey(id),
		map[string]any{"attempts": 3, "outcome": events.OutcomeFailed, "updatedAt": time.Now().UTC()})
	final := events.Run{
		DispatchID: id, TaskID: "t1", ScheduledAt: slot, Attempt: 3, Status: 503, Error: "HTTP 503",
		ErrorKind: events.ErrorTransient, Final: true,
		Dispatch: &events.Dispatch{DispatchID: id, TaskID: "t1", ScheduledAt: slot},
	}
	body, err := events.Marshal(events.TypeRunFailed, "test", "t1", final, time.Now(), id+"/3")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := js.Publish(ctx, events.RunSubject(events.OutcomeFailed, "t1"), body)
	if err != nil {
		t.Fatal(err)
	}
	// The backlog: the final failure is delivered on the service's RUNS
	// durable and held, before the service starts, until the advisory
	// has been handled.
	var held jetstream.Msg
	natstest.FetchOne(t, js, streams.StreamRuns, streams.ConsumerDeadLetter, func(m jetstream.Msg) error { held = m; return nil })
	_, m := startReconciling(t, js)
	h := &harness{t: t, js: js, metrics: m}

	advise(t, js, seq, 50)
	requireDispatchGone(t, js, seq)
	if n := h.entries("t1"); n != 0 {
		t.Fatalf("%d dead-letter entries written by the advisory of a dispatch whose final failure is on RUNS, want 0", n)
	}

	if err := held.Nak(); err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerDeadLetter, pub.Sequence)
	if n := h.entries("t1"); n != 1 {
		t.Fatalf("%d dead-letter entries, want 1", n)
	}
	var entry events.DeadLetter
	natstest.LastData(t, js, streams.StreamDeadLetter, events.DeadLetterSubject("t1"), &entry)
	if entry.Reason != events.DeadLetterMaxAttempts || entry.Attempts != 3 || entry.Dispatch.DispatchID != id {
		t.Fatalf("entry reason %q, attempts %d, dispatch %q; want the final failure's: %q, 3, %q",
			entry.Reason, entry.Attempts, entry.Dispatch.DispatchID, events.DeadLetterMaxAttempts, id)
	}
	for reason, want := range map[string]float64{events.DeadLetterMaxDeliveries: 0, events.DeadLetterMaxAttempts: 1} {
		if n := testutil.ToFloat64(m.DeadLetterTotal.WithLabelValues(reason)); n != want {
			t.Fatalf(`flyball_deadletter_total{reason=%q} = %v, want %v`, reason, n, want)
		}
	}
}
