package breaker_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestFailuresAfterTheClosingCountOnASlowExecutorClock: the failures of
// calls released when a probe's success closed the breaker were dropped
// as "started before the closing" when the executor's clock was a few
// milliseconds behind the breaker's: the cut-off was the breaker's own
// clock at the closing, and the parked calls start milliseconds after
// it. Open → half-open → closed by the probe, then 5 failures of calls
// started 1 ms after the closing, stamped by an executor 20 ms behind:
// they count, and open the breaker again (threshold 3).
func TestFailuresAfterTheClosingCountOnASlowExecutorClock(t *testing.T) {
	h, _ := halfOpenWithSlowCalls(t)
	h.outcomeOf(events.OutcomeRecovered, "slow", "slow", time.Now()) // the probe
	closed, _, _ := h.record("slow")
	if closed.State != events.BreakerClosed {
		t.Fatalf("after the probe's success: %+v, want closed", closed)
	}
	// The breaker's clock at the closing is the record's updatedAt; the
	// released calls start 1 ms later, on a clock 20 ms behind.
	started := closed.UpdatedAt.Add(time.Millisecond - 20*time.Millisecond)
	for range 5 {
		h.outcomeOf(events.OutcomeFailed, "slow", "slow", started)
	}
	if b, _, _ := h.record("slow"); b.State != events.BreakerOpen {
		t.Fatalf("after 5 failures started after the closing on a clock 20 ms behind: %s, failures=%d; want open (threshold 3)", b.State, b.Failures)
	}
}

// TestSecondProbeFailureAfterALateClosingCounts: a breaker consumer
// lagging longer than the probe claim lives applies the first probe's
// success after a second probe, started 50 s after the first, failed.
// The second probe's call started after the call whose success closed
// the breaker: its failure is evidence since, and counts (one failure of
// a closed breaker). The cut-off was the consumer's clock at the late
// closing, and dropped it.
//
// The open record is stored before the service starts (putOpen).
func TestSecondProbeFailureAfterALateClosingCounts(t *testing.T) {
	h := prepare(t)
	now := time.Now().UTC()
	// Opened 2 min ago for 1 min: half-open since a minute.
	h.putOpen("t1", now.Add(-time.Minute))
	h.start()
	probe1 := now.Add(-55 * time.Second)
	probe2 := probe1.Add(50 * time.Second)
	h.outcomeOf(events.OutcomeRecovered, "t1", "t1", probe1)
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed {
		t.Fatalf("after the first probe's late success: %+v, want closed", b)
	}
	h.outcomeOf(events.OutcomeFailed, "t1", "t1", probe2)
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed || b.Failures != 1 {
		t.Fatalf("after the second probe's failure: %s, failures=%d; want closed, failures=1", b.State, b.Failures)
	}
}
