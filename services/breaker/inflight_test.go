package breaker_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestFailureStartedBeforeTheOpeningDoesNotReopen: a failure whose call
// started before the breaker opened (with scope host, another task's slow
// call that times out long after the fast failures tripped the breaker)
// was taken for the probe's failure once retryAt had passed: it re-opened
// the half-open breaker with the delay doubled, and the real probe, which
// started before that re-opening, then had its success ignored. Such a
// failure says nothing about the target since the opening, as a success
// of the same kind does not: it must leave the breaker half-open, and the
// probe's success must close it.
func TestFailureStartedBeforeTheOpeningDoesNotReopen(t *testing.T) {
	h, before := halfOpenWithSlowCalls(t)
	halfOpen, _, _ := h.record("slow")
	probe := time.Now() // the probe starts here

	// The slow call's failure arrives while the probe is in flight.
	h.outcomeOf(events.OutcomeFailed, "slow", "slow", before)
	if b, _, _ := h.record("slow"); b.State != events.BreakerHalfOpen || b.OpenDelay != halfOpen.OpenDelay || !b.RetryAt.Equal(halfOpen.RetryAt) {
		t.Fatalf("a failure of a call started before the opening moved the half-open breaker to %s (openDelay %s, retryAt %s); want half-open with openDelay %s, retryAt %s",
			b.State, b.OpenDelay, b.RetryAt, halfOpen.OpenDelay, halfOpen.RetryAt)
	}
	h.outcomeOf(events.OutcomeRecovered, "slow", "slow", probe)
	if b, _, _ := h.record("slow"); b.State != events.BreakerClosed || b.Failures != 0 {
		t.Fatalf("after the probe's success: %+v, want closed with 0 failures", b)
	}
}

// TestFailuresStartedBeforeTheClosingDoNotCount: calls in flight while a
// breaker opened (with scope host, other tasks' calls to an overloaded
// host that time out long after the fast failures tripped it) can fail
// after the probe's success closed it. They were counted as failures
// since the closing: failureThreshold of them opened the breaker again,
// at a target whose probe had just succeeded. A failure of a call that
// started before the closing must not count; one started after it does.
func TestFailuresStartedBeforeTheClosingDoNotCount(t *testing.T) {
	h, before := halfOpenWithSlowCalls(t)
	h.outcomeOf(events.OutcomeRecovered, "slow", "slow", time.Now()) // the probe
	if b, _, _ := h.record("slow"); b.State != events.BreakerClosed {
		t.Fatalf("after the probe's success: %+v, want closed", b)
	}
	// The slow calls time out now.
	for range 3 {
		h.outcomeOf(events.OutcomeFailed, "slow", "slow", before)
	}
	if b, _, _ := h.record("slow"); b.State != events.BreakerClosed || b.Failures != 0 {
		t.Fatalf("after 3 failures of calls started before the closing: %s with %d failures; want closed with 0", b.State, b.Failures)
	}
	// A call started after the closing counts.
	h.outcomeOf(events.OutcomeFailed, "slow", "slow", time.Now())
	if b, _, _ := h.record("slow"); b.State != events.BreakerClosed || b.Failures != 1 {
		t.Fatalf("after a failure of a call started after the closing: %s with %d failures; want closed with 1", b.State, b.Failures)
	}
}

// halfOpenWithSlowCalls returns a harness whose task "slow" (3 failures
// open its breaker for 200 ms) is half-open after three fast failures,
// and the time before them: when the slow calls, still in flight, began.
func halfOpenWithSlowCalls(t *testing.T) (*harness, time.Time) {
	t.Helper()
	h := newHarness(t)
	spec := `{"id":"slow","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"},"breaker":{"failureThreshold":3,"openDelay":"200ms"}}`
	if _, err := h.tasks.Put(t.Context(), "slow", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	for range 3 {
		h.outcomeOf(events.OutcomeFailed, "slow", "slow", time.Now())
	}
	natstest.Eventually(t, 10*time.Second, "the breaker turns half-open", func() bool {
		b, _, _ := h.record("slow")
		return b.State == events.BreakerHalfOpen
	})
	return h, before
}
