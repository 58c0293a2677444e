package breaker_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestFailureRedeliveredAfterManyOthersCountsOnce: a busy host-scoped
// breaker applies many outcomes of its host's tasks within one AckWait.
// A failure whose ack was lost is redelivered about an AckWait later; the
// record remembered only its last 8 applied outcomes, so a redelivery
// after more than 8 others was counted again, and the breaker opened one
// failure early. It must be recognised however many outcomes were
// applied since.
func TestFailureRedeliveredAfterManyOthersCountsOnce(t *testing.T) {
	h := prepare(t)
	const threshold = 20
	spec := `{"id":"t1","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"},"breaker":{"scope":"host","failureThreshold":20}}`
	if _, err := h.tasks.Put(t.Context(), "t1", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	h.start() // after the spec: the service's view holds it
	host := events.HostKeyPrefix + events.SanitizeToken("example.com")
	h.outcomeOf(events.OutcomeFailed, "t1", host, time.Now()) // d1: its ack is lost
	first := h.n
	for range threshold - 2 { // the host's other failures
		h.outcomeOf(events.OutcomeFailed, "t1", host, time.Now())
	}
	last := h.n
	h.n = first
	h.outcomeOfDispatch(events.OutcomeFailed, "t1", host, time.Now()) // d1 redelivered
	h.n = last
	if b, _, _ := h.record(host); b.State != events.BreakerClosed || b.Failures != threshold-1 {
		t.Fatalf("after %d distinct failures, one of them redelivered after the others: %s with %d failures; want closed with %d",
			threshold-1, b.State, b.Failures, threshold-1)
	}
}
