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
	hp, hook := holdFirstPublish("t1", events.BreakerOpen, nil)
	h := prepare(t)
	h.putFastBreakerTask() // before start: the service's view holds it
	h.start(hook)
	t.Cleanup(hp.free) // before the service stops
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

// TestLateOpenIsNotPublishedAfterTheClosing: a replica reads the record
// that holds a breaker.open, finds it still there, and pauses before its
// publish; meanwhile a success closes the breaker and its breaker.closed
// is stored. The late breaker.open must be dropped: stored after the
// closing, it held the task of a closed breaker until retryAt. The
// breaker's own publish of the open is dropped (Checked), so the late one
// is the only one, and no Nats-Msg-Id deduplication hides it.
func TestLateOpenIsNotPublishedAfterTheClosing(t *testing.T) {
	var svc *breaker.Service
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	opens := 0
	h := prepare(t)
	h.putBreakerTask("1m") // no half-open in the test's time; before start: the service's view holds it
	h.start(func(s *breaker.Service) {
		svc = s
		s.Checked(func(key string, to events.BreakerState) bool {
			if key != "t1" || to != events.BreakerOpen {
				return true
			}
			mu.Lock()
			opens++
			n := opens
			mu.Unlock()
			switch n {
			case 1: // the outcome's own publish: never made
				return false
			case 2: // the late one: checked, not yet published
				close(held)
				<-release
			}
			return true
		})
	})
	t.Cleanup(free) // before the service stops
	for range 3 {
		h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now())
	}
	ent, err := h.breakers.Get(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if b, _, _ := h.record("t1"); b.State != events.BreakerOpen {
		t.Fatalf("after three failures: %+v, want open", b)
	}
	late := make(chan error, 1)
	go func() { late <- svc.PublishRecorded(t.Context(), "t1", ent.Value()) }()
	<-held
	// A call started after the opening succeeds: the breaker closes, and
	// breaker.closed is stored while the open's publish is paused.
	h.outcomeOf(events.OutcomeRecovered, "t1", "t1", time.Now())
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed {
		t.Fatalf("after the success: %+v, want closed", b)
	}
	awaitHealthEvent(t, h.js, events.BreakerSubject(events.BreakerClosed, "t1"))
	free()
	if err := <-late; err != nil {
		t.Fatalf("late publish of the open: %v", err)
	}

	var order []string
	msgs := natstest.Read(t, h.js, streams.StreamHealth, events.BreakerSubject("*", "t1"))
	for _, m := range msgs {
		order = append(order, m.Subject()+" ("+m.Headers().Get(jetstream.MsgIDHeader)+")")
	}
	b, _, _ := h.record("t1")
	if len(msgs) != 1 || msgs[0].Subject() != events.BreakerSubject(events.BreakerClosed, "t1") {
		t.Fatalf("HEALTH's breaker events of t1, in order: %v; want only the breaker.closed, the late breaker.open dropped (the breaker is %s)", order, b.State)
	}
	if b.State != events.BreakerClosed {
		t.Fatalf("record after the late publish: %+v, want closed", b)
	}
}
