package breaker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/breaker"
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
	held, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var delayed bool
	h := newHarness(t, func(s *breaker.Service) {
		s.Publishing(func(key string, to events.BreakerState) {
			mu.Lock()
			first := key == "t1" && to == events.BreakerOpen && !delayed
			delayed = delayed || first
			mu.Unlock()
			if first {
				close(held)
				<-release
			}
		})
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the service stops
	spec := `{"id":"t1","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"},"breaker":{"failureThreshold":3,"openDelay":"200ms"}}`
	if _, err := h.tasks.Put(t.Context(), "t1", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now())
	}
	h.n++
	third := h.send(events.OutcomeFailed, "t1", "t1", time.Now())
	<-held // open written, its publish not yet made
	// The half-open loop moves the breaker on at retryAt, and publishes.
	awaitHealthEvent(t, h.js, events.BreakerSubject(events.BreakerHalfOpen, "t1"))
	free()
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
