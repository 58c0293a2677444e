package deadletter_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	ctx := t.Context()
	seq := publishDispatch(t, h.js, "t1")
	natstest.PutJSON(t, h.js, streams.BucketAttempts, "t1.1772442000000",
		map[string]any{"attempts": 3, "outcome": events.OutcomeSucceeded, "updatedAt": time.Now().UTC()})
	adv, err := json.Marshal(map[string]any{"stream": streams.StreamDispatch, "consumer": streams.ConsumerExecutor, "stream_seq": seq, "deliveries": 50})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := h.js.Publish(ctx, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.DISPATCH.executor", adv)
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, h.js, streams.StreamAdvisories, streams.ConsumerDeadLetter, ack.Sequence)
	if n := h.entries("t1"); n != 0 {
		t.Fatalf("%d dead-letter entries for a run whose attempt record says it succeeded, want 0", n)
	}
	if n := testutil.ToFloat64(h.metrics.DeadLetterTotal.WithLabelValues(events.DeadLetterMaxDeliveries)); n != 0 {
		t.Fatalf(`flyball_deadletter_total{reason="max-deliveries"} = %v, want 0`, n)
	}
	dispatch, err := h.js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the succeeded run's dispatch is still in DISPATCH (%v): it holds the task's slot", err)
	}
}
