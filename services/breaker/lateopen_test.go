package breaker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestLateOpenIsNotPublishedAfterALaterTransition: the outcome that opens
// the breaker writes the record, then publishes breaker.open. When that
// publish is late (a replica paused, a publish retried while HEALTH
// elects a leader, the republish of a redelivered outcome that read the
// record before it moved on), the breaker can move on and publish its
// next transition first; the late breaker.open then landed after it, and
// the governor held the task of a breaker that was no longer open. HEALTH
// must never hold a transition after the one that superseded it.
func TestLateOpenIsNotPublishedAfterALaterTransition(t *testing.T) {
	hp, hook := holdFirstPublish("t1", events.BreakerOpen, nil)
	h := newHarness(t, hook)
	t.Cleanup(hp.free) // before the service stops
	h.putFastBreakerTask()
	for range 2 {
		h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now())
	}
	h.n++
	third := h.send(events.OutcomeFailed, "t1", "t1", time.Now())
	<-hp.held // open written, its publish not yet made
	// The half-open loop moves the breaker on at retryAt, and publishes.
	awaitHealthEvent(t, h.js, events.BreakerSubject(events.BreakerHalfOpen, "t1"))
	hp.free()
	natstest.AwaitAcked(t, h.js, streams.StreamRuns, streams.ConsumerBreaker, third)

	b, _, _ := h.record("t1")
	if b.State != events.BreakerHalfOpen {
		t.Fatalf("record after the half-open: %+v, want half-open", b)
	}
	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	last, err := health.GetLastMsgForSubject(t.Context(), events.BreakerSubject("*", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	if last.Subject != events.BreakerSubject(events.BreakerHalfOpen, "t1") {
		t.Fatalf("HEALTH's last breaker event of t1 is %s (%s), stored after the half-open that superseded it; the breaker is %s",
			last.Subject, last.Header.Get(jetstream.MsgIDHeader), b.State)
	}
}
