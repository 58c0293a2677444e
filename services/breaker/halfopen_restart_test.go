package breaker_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/breaker"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestHalfOpenTransitionUnpublishedAtARestartIsPublished: the half-open
// loop stores the transition with the record, then publishes it on
// HEALTH. A replica that stopped (or whose publish failed) between the
// two kept the retry only in memory: the replica that started next
// replayed a half-open record, which is not due, and the stored
// transition never reached HEALTH. A replayed half-open record whose
// transition is stored is now published, unless it already was.
func TestHalfOpenTransitionUnpublishedAtARestartIsPublished(t *testing.T) {
	h := prepare(t)
	const key = "t1"
	h.start(func(s *breaker.Service) {
		s.Checked(func(_ string, to events.BreakerState) bool {
			return to != events.BreakerHalfOpen // stops before the publish
		})
	})
	h.putOpen(key, time.Now().Add(100*time.Millisecond).UTC())
	natstest.Eventually(t, 10*time.Second, "the breaker turns half-open", func() bool {
		b, _, ok := h.record(key)
		return ok && b.State == events.BreakerHalfOpen
	})
	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.BreakerSubject(events.BreakerHalfOpen, key)
	if _, err := health.GetLastMsgForSubject(t.Context(), subject); err == nil {
		t.Fatal("the first replica published the transition its hook held back")
	}
	h.start() // the next replica
	natstest.Eventually(t, 10*time.Second, "the stored half-open transition on HEALTH", func() bool {
		_, err := health.GetLastMsgForSubject(t.Context(), subject)
		return err == nil
	})
}
