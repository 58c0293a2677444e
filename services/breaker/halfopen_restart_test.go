package breaker_test

import (
	"slices"
	"strconv"
	"sync"
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

// TestAHalfOpenTransitionOlderThanHEALTHKeepsIsNotPublishedAgain: a
// replayed half-open record is published unless HEALTH has its event. A
// record half-open for longer than HEALTH keeps events (a weekly task's
// probe weeks away) found none, and each start published its old
// transition again, which the governor applied as new. Such a record is
// not due: only a transition HEALTH would still hold is published.
func TestAHalfOpenTransitionOlderThanHEALTHKeepsIsNotPublishedAgain(t *testing.T) {
	h := prepare(t)
	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	keeps := health.CachedInfo().Config.MaxAge
	if keeps <= 0 {
		t.Fatalf("HEALTH keeps events for ever (max_age %v): the case needs a max age", keeps)
	}
	put := func(key string, at time.Time) {
		t.Helper()
		rec := map[string]any{
			"key": key, "state": events.BreakerHalfOpen, "failures": 3, "openDelay": "1m", "retryAt": at, "updatedAt": at,
			"transition": map[string]any{
				"eventId": "breaker:" + key + ":half-open:" + strconv.FormatInt(at.UnixMilli(), 10),
				"key":     key, "from": events.BreakerOpen, "to": events.BreakerHalfOpen, "failures": 3, "openDelay": "1m", "at": at,
				"reason": "open delay elapsed: the next call is the probe",
			},
		}
		natstest.PutJSON(t, h.js, streams.BucketBreakers, key, rec)
	}
	put("stale", time.Now().Add(-keeps-24*time.Hour).UTC())
	var mu sync.Mutex
	var published []string
	h.start(func(s *breaker.Service) {
		s.Publishing(func(key string, _ events.BreakerState) {
			mu.Lock()
			published = append(published, key)
			mu.Unlock()
		})
	})
	stored := func(key string) bool {
		_, err := health.GetLastMsgForSubject(t.Context(), events.BreakerSubject(events.BreakerHalfOpen, key))
		return err == nil
	}
	// Each record goes through the loop after the one before: once the
	// last is on HEALTH, the stale one was judged.
	for _, key := range []string{"fresh", "after"} {
		put(key, time.Now().UTC())
		natstest.Eventually(t, 10*time.Second, key+"'s unpublished transition on HEALTH", func() bool { return stored(key) })
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(published, "stale") || stored("stale") {
		t.Fatalf("published %v: the transition older than HEALTH's max age (%v) was published again", published, keeps)
	}
}
