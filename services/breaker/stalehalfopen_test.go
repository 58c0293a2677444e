package breaker_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestStaleHalfOpenIsNotPublishedAfterTheReopening: the half-open
// transition is written to KV, then published. When that publish is late
// (a replica paused, a publish retried while HEALTH elects a leader), the
// probe's failure can re-open the breaker and publish breaker.open first;
// the late breaker.half-open then landed after it, and the governor
// lifted its hold while the breaker was open again. HEALTH must never
// hold a half-open after the open that superseded it.
func TestStaleHalfOpenIsNotPublishedAfterTheReopening(t *testing.T) {
	again := make(chan struct{})
	hp, hook := holdFirstPublish("t1", events.BreakerHalfOpen, func(n int) {
		if n == 2 {
			close(again)
		}
	})
	h := prepare(t)
	h.putFastBreakerTask() // before start: the service's view holds it
	h.start(hook)
	t.Cleanup(hp.free) // before the service stops
	for range 3 {
		h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now())
	}
	<-hp.held                                                 // half-open written, its publish not yet made
	h.outcomeOf(events.OutcomeFailed, "t1", "t1", time.Now()) // the probe fails
	if b, _, _ := h.record("t1"); b.State != events.BreakerOpen || b.OpenDelay != events.Duration(400*time.Millisecond) {
		t.Fatalf("after the probe's failure: %+v, want open with openDelay 400ms", b)
	}
	awaitHealthEvent(t, h.js, events.BreakerSubject(events.BreakerOpen, "t1"))
	hp.free()
	<-again // the late publish is over: the loop moves to the next half-open

	var order []string
	for _, m := range natstest.Read(t, h.js, streams.StreamHealth, events.BreakerSubject("*", "t1")) {
		order = append(order, m.Headers().Get(jetstream.MsgIDHeader))
	}
	opens := 0
	for _, id := range order {
		switch {
		case strings.HasPrefix(id, "breaker:t1:open:"):
			opens++
		case strings.HasPrefix(id, "breaker:t1:half-open:") && opens == 2:
			// a half-open after the re-opening must be the re-opening's own
			b, _, _ := h.record("t1")
			if id != "breaker:t1:half-open:"+strconv.FormatInt(b.RetryAt.UnixMilli(), 10) {
				t.Fatalf("HEALTH holds %s after the re-opening's breaker.open (events for t1, in order: %v)", id, order)
			}
		}
	}
	if opens != 2 {
		t.Fatalf("breaker events for t1 on HEALTH: %v, want two breaker.open", order)
	}
}
