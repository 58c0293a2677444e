package breaker_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestMalformedRecoveredIsTerminated: a run.recovered whose
// Flyball-Breaker-Key header named a closed (or absent) breaker, with an
// executor's id (<dispatch>:<attempt>:recovered), was acked without its
// body being decoded. The governor's RUNS consumer takes no
// run.recovered, so no one terminated or counted a malformed one,
// against docs/events.md ("a body that does not decode is still
// terminated and counted"). Each is terminated and counted now.
func TestMalformedRecoveredIsTerminated(t *testing.T) {
	h := newHarness(t)
	<-h.svc.RecordsLoaded()
	// t1's breaker is closed with nothing counted: a failure, then a
	// success that reset it.
	h.outcome(events.OutcomeFailed, "t1")
	h.outcome(events.OutcomeRecovered, "t1")
	if b, _, ok := h.record("t1"); !ok || b.State != events.BreakerClosed || b.Failures != 0 {
		t.Fatalf("t1's breaker: %+v (present %v), want closed with 0 failures", b, ok)
	}
	forged := func(typ, data string) string {
		b, err := events.Marshal(typ, "test", "t1", json.RawMessage(data), time.Now(), "")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	bodies := []string{
		`{bad`,
		forged(events.TypeRunRecovered, `{"taskId":"other","dispatchId":"d:1","attempt":1,"status":200}`),
		forged(events.TypeRunRecovered, `{"taskId":"t1","dispatchId":"d:1","attempt":1,"status":200,"nope":1}`),
		forged(events.TypeRunFailed, `{"taskId":"t1","dispatchId":"d:1","attempt":1,"status":500}`),
	}
	sent := 0
	for _, key := range []string{"t1", "absent"} { // closed, and no record
		for _, body := range bodies {
			sent++
			msg := nats.NewMsg(events.RunSubject(events.OutcomeRecovered, "t1"))
			msg.Data = []byte(body)
			msg.Header.Set(events.HeaderBreakerKey, key)
			msg.Header.Set(jetstream.MsgIDHeader, events.RunID(fmt.Sprintf("t1:%d", sent), 1, events.RunIDRecovered))
			ack, err := h.js.PublishMsg(t.Context(), msg)
			if err != nil {
				t.Fatal(err)
			}
			natstest.AwaitAcked(t, h.js, streams.StreamRuns, streams.ConsumerBreaker, ack.Sequence)
		}
	}
	counted := testutil.ToFloat64(h.metrics.RejectedEvents.WithLabelValues("malformed event")) +
		testutil.ToFloat64(h.metrics.RejectedEvents.WithLabelValues("malformed run"))
	if counted != float64(sent) {
		t.Fatalf("%v of %d malformed run.recovered terminated and counted, want all", counted, sent)
	}
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed || b.Failures != 0 {
		t.Fatalf("t1's breaker after the malformed successes: %+v, want closed with 0 failures", b)
	}
}
