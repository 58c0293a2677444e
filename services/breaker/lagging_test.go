package breaker_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/breaker"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestALaggingBreakerDatesTheOpeningByTheFailure: a breaker service that
// was down or behind on RUNS applies three failures at t0…t0+2s, then
// the success of a call started at t0+10s, at t0+60s. It dated the
// opening by its own clock (retryAt t0+65s), took the success for a call
// in flight when the breaker tripped, and ignored it: the executors
// deferred every call to a target that had recovered, and the governor
// held the task for a whole openDelay. The opening is when the tripping
// failure happened; a success started after it closes the breaker. So
// does a success started after a failed probe that was applied late.
func TestALaggingBreakerDatesTheOpeningByTheFailure(t *testing.T) {
	pol := &events.BreakerPolicy{FailureThreshold: 3, OpenDelay: events.Duration(5 * time.Second), MaxOpenDelay: events.Duration(time.Hour)}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	late := t0.Add(time.Minute) // when the breaker catches up
	b := executor.BreakerRecord{Key: "t1", State: events.BreakerClosed}
	for i := range 3 {
		started := t0.Add(time.Duration(i) * time.Second)
		b = breaker.Next(b, pol, false, started, started.Add(100*time.Millisecond), late)
	}
	if want := t0.Add(2100 * time.Millisecond).Add(5 * time.Second); b.State != events.BreakerOpen || !b.RetryAt.Equal(want) {
		t.Errorf("after 3 failures applied a minute late: %s, retryAt %s; want open, retryAt %s (5s after the tripping failure)", b.State, b.RetryAt, want)
	}
	// A failure of a call started after the opening, before retryAt, is
	// no probe: it does not re-open the breaker, half-open or not.
	for _, state := range []events.BreakerState{events.BreakerOpen, events.BreakerHalfOpen} {
		in := b
		in.State = state
		if got := breaker.Next(in, pol, false, t0.Add(3*time.Second), t0.Add(4*time.Second), late); got.State != state || !got.RetryAt.Equal(b.RetryAt) {
			t.Fatalf("%s: a failure at t0+4s (before retryAt), applied late, moved the breaker to %s, retryAt %s; want it left as it was", state, got.State, got.RetryAt)
		}
	}
	got := breaker.Next(b, pol, true, t0.Add(10*time.Second), t0.Add(10100*time.Millisecond), late.Add(time.Millisecond))
	if got.State != events.BreakerClosed {
		t.Fatalf("a success started 8s after the tripping failure, applied late: %s, retryAt %s; want closed", got.State, got.RetryAt)
	}

	// A half-open breaker's probe fails at r+1s; the breaker applies it
	// at r+60s. The second probe, started at r+20s (after the first
	// failed), succeeds.
	r := b.RetryAt
	b.State = events.BreakerHalfOpen
	b = breaker.Next(b, pol, false, r, r.Add(time.Second), r.Add(time.Minute))
	if want := r.Add(time.Second).Add(10 * time.Second); b.State != events.BreakerOpen || !b.RetryAt.Equal(want) {
		t.Fatalf("the probe's failure applied late: %s, retryAt %s; want open, retryAt %s (10s after the failure)", b.State, b.RetryAt, want)
	}
	b.State = events.BreakerHalfOpen
	if got := breaker.Next(b, pol, true, r.Add(20*time.Second), r.Add(21*time.Second), r.Add(time.Minute+time.Millisecond)); got.State != events.BreakerClosed {
		t.Fatalf("the second probe's success, started after the first probe failed: %s, retryAt %s; want closed", got.State, got.RetryAt)
	}
}

// TestALaggingBreakerClosesOnASuccessAfterTheFailures is
// TestALaggingBreakerDatesTheOpeningByTheFailure through RUNS: the
// outcomes happened a minute before the service applies them, as when it
// restarts into a backlog (the runbook's "Start a breaker").
func TestALaggingBreakerClosesOnASuccessAfterTheFailures(t *testing.T) {
	h := prepare(t)
	h.putBreakerTask("1h") // before start: the service's view holds it
	h.start()
	t0 := time.Now().UTC().Add(-time.Minute)
	h.failedFrom(t0, 3)
	if b, _, _ := h.record("t1"); b.State != events.BreakerOpen || !b.RetryAt.Equal(h.finished.Add(time.Hour)) {
		t.Errorf("after 3 failures applied a minute late: %s, retryAt %s; want open, retryAt %s (an hour after the tripping failure)", b.State, b.RetryAt, h.finished.Add(time.Hour))
	}
	started := t0.Add(10 * time.Second)
	h.finished = started.Add(100 * time.Millisecond)
	h.outcomeOf(events.OutcomeRecovered, "t1", "t1", started)
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed || b.Failures != 0 {
		t.Fatalf("a success started 8s after the tripping failure, applied late: %s, retryAt %s; want closed", b.State, b.RetryAt)
	}
}

// TestALateFailedProbeDoesNotHideTheNextProbe: a half-open breaker's
// probe failed a minute before the service applies it. It re-opened the
// breaker dated by the service's clock, and the success of a call started
// after that failure, before it was applied, was ignored as in flight at
// the re-opening. The re-opening is dated by the probe's failure.
//
// The open record is stored before the service starts (putOpen).
func TestALateFailedProbeDoesNotHideTheNextProbe(t *testing.T) {
	h := prepare(t)
	now := time.Now().UTC()
	h.putOpen("t1", now.Add(-2*time.Minute)) // opened 3 min ago for 1 min
	h.start()
	probe := now.Add(-61 * time.Second)
	h.finished = probe.Add(time.Second)
	h.outcomeOf(events.OutcomeFailed, "t1", "t1", probe)
	if b, _, _ := h.record("t1"); b.State != events.BreakerOpen || !b.RetryAt.Equal(h.finished.Add(2*time.Minute)) {
		t.Errorf("the probe's failure applied a minute late: %s, retryAt %s; want open, retryAt %s (the doubled delay after the failure)", b.State, b.RetryAt, h.finished.Add(2*time.Minute))
	}
	second := now.Add(-30 * time.Second)
	h.finished = second.Add(time.Second)
	h.outcomeOf(events.OutcomeRecovered, "t1", "t1", second)
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed {
		t.Fatalf("the success of a call started after the failed probe: %s, retryAt %s; want closed", b.State, b.RetryAt)
	}
}

// TestALaggingBreakerWhoseRetryAtPassedTurnsHalfOpen: failures applied
// later than openDelay after they happened open the breaker with a
// retryAt already past. The half-open loop moves it on at once, and the
// next call is the probe; the breaker does not hold the target for a
// whole openDelay after catching up. (The breaker.open may never reach
// HEALTH: the half-open supersedes it before its publish.)
func TestALaggingBreakerWhoseRetryAtPassedTurnsHalfOpen(t *testing.T) {
	h := prepare(t)
	h.putBreakerTask("5s") // before start: the service's view holds it
	h.start()
	t0 := time.Now().UTC().Add(-time.Minute)
	h.failedFrom(t0, 3)
	awaitHealthEvent(t, h.js, events.BreakerSubject(events.BreakerHalfOpen, "t1"))
	if b, _, _ := h.record("t1"); b.State != events.BreakerHalfOpen || !b.RetryAt.Equal(h.finished.Add(5*time.Second)) {
		t.Fatalf("after 3 failures applied a minute late: %s, retryAt %s; want half-open, retryAt %s", b.State, b.RetryAt, h.finished.Add(5*time.Second))
	}
}

// TestAProbeFailingOnAServerClockBehindTheBreakerReopens: the breaker
// service's clock runs 1.5 s ahead of the NATS server's, which stamps the
// runs (startedAt, finishedAt). It turns the breaker half-open at
// retryAt by its own clock, the executor lets the probe through at once,
// and the probe fails 200 ms later, stamped 1.3 s before retryAt. A
// failure more than a second before retryAt was taken for one applied
// late by a lagging breaker, even by a breaker that turned half-open on
// time: the probe's failure was ignored, the breaker stayed half-open
// with no breaker.open, and the executors probed again once the probe
// claim ran out. It re-opens the breaker, as before a lagging breaker
// dated its openings by the failures. Next alone, then through RUNS.
func TestAProbeFailingOnAServerClockBehindTheBreakerReopens(t *testing.T) {
	const ahead = 1500 * time.Millisecond
	pol := &events.BreakerPolicy{FailureThreshold: 3, OpenDelay: events.Duration(5 * time.Second), MaxOpenDelay: events.Duration(time.Hour)}
	r := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Turned half-open at r by the breaker's clock.
	b := executor.BreakerRecord{Key: "t1", State: events.BreakerHalfOpen, Failures: 3, OpenDelay: pol.OpenDelay, RetryAt: r, UpdatedAt: r}
	started, finished := r.Add(-ahead), r.Add(-ahead+200*time.Millisecond)
	got := breaker.Next(b, pol, false, started, finished, r.Add(300*time.Millisecond))
	if want := finished.Add(10 * time.Second); got.State != events.BreakerOpen || !got.RetryAt.Equal(want) {
		t.Errorf("the probe's failure, stamped %s before retryAt by a server clock %s behind the breaker's: %s, retryAt %s; want open, retryAt %s (the doubled delay after the failure)",
			r.Sub(finished), ahead, got.State, got.RetryAt, want)
	}

	// The runs are stamped by a clock 1.5 s behind the service's.
	h := prepare(t)
	retryAt := time.Now().Add(500 * time.Millisecond).UTC()
	h.putOpen("t1", retryAt) // opened a minute before retryAt
	h.start()
	natstest.Eventually(t, 10*time.Second, "the breaker turns half-open", func() bool {
		b, _, _ := h.record("t1")
		return b.State == events.BreakerHalfOpen
	})
	h.finished = retryAt.Add(-ahead + 200*time.Millisecond)
	h.outcomeOf(events.OutcomeFailed, "t1", "t1", retryAt.Add(-ahead))
	if b, _, _ := h.record("t1"); b.State != events.BreakerOpen || !b.RetryAt.Equal(h.finished.Add(2*time.Minute)) {
		t.Fatalf("through RUNS: the probe's failure, stamped %s before retryAt: %s, failures %d, retryAt %s; want open, retryAt %s (the doubled delay after the failure)",
			retryAt.Sub(h.finished), b.State, b.Failures, b.RetryAt, h.finished.Add(2*time.Minute))
	}
}

// failedFrom applies n failures of t1's calls, started a second apart from
// t0, each finished 100 ms after it started (h.finished ends at the last).
func (h *harness) failedFrom(t0 time.Time, n int) {
	for i := range n {
		started := t0.Add(time.Duration(i) * time.Second)
		h.finished = started.Add(100 * time.Millisecond)
		h.outcomeOf(events.OutcomeFailed, "t1", "t1", started)
	}
}
