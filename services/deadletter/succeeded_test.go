package deadletter_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestExhaustedDispatchOfASucceededRunIsNotDeadLettered: a run succeeded
// after retries (its attempt record in flyball-attempts says so), but its
// ack was lost on every delivery left until MaxDeliver. The
// MAX_DELIVERIES advisory dead-lettered it as max-deliveries, and the
// governor held the task for a 30-minute recheck after a run that had
// succeeded. The dispatch is deleted (it holds the task's one slot) and no
// entry is written.
func TestExhaustedDispatchOfASucceededRunIsNotDeadLettered(t *testing.T) {
	h := newHarness(t)
	seq := publishDispatch(t, h.js, "t1")
	natstest.PutJSON(t, h.js, streams.BucketAttempts, "t1.1772442000000",
		map[string]any{"attempts": 3, "outcome": events.OutcomeSucceeded, "updatedAt": time.Now().UTC()})
	advise(t, h.js, seq, 50)
	if n := h.entries("t1"); n != 0 {
		t.Fatalf("%d dead-letter entries for a run whose attempt record says it succeeded, want 0", n)
	}
	if n := testutil.ToFloat64(h.metrics.DeadLetterTotal.WithLabelValues(events.DeadLetterMaxDeliveries)); n != 0 {
		t.Fatalf(`flyball_deadletter_total{reason="max-deliveries"} = %v, want 0`, n)
	}
	requireDispatchGone(t, h.js, seq)
}
