package breaker_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	keeps := healthConfig(t, h, nil).MaxAge
	if keeps <= 0 {
		t.Fatalf("HEALTH keeps events for ever (max_age %v): the case needs a max age", keeps)
	}
	staleHalfOpenIsNotRepublished(t, h, time.Now().Add(-keeps-24*time.Hour).UTC(), time.Now)
}

// TestAHalfOpenTransitionOlderThanAShortHEALTHMaxAgeIsNotPublishedAgain:
// the same with HEALTH's max age lowered to 30 minutes (an operator's
// limit, which provision keeps). Under an hour the guard was off, and
// every start or watch restart published again a transition hours old.
func TestAHalfOpenTransitionOlderThanAShortHEALTHMaxAgeIsNotPublishedAgain(t *testing.T) {
	h := prepare(t)
	healthConfig(t, h, func(c *jetstream.StreamConfig) { c.MaxAge = 30 * time.Minute })
	staleHalfOpenIsNotRepublished(t, h, time.Now().Add(-2*time.Hour).UTC(), time.Now)
}

// TestAHalfOpenTransitionHEALTHDroppedByCountIsNotPublishedAgain: HEALTH
// with max_msgs lowered drops its oldest events long before its max age.
// A transition made before the oldest event HEALTH still holds may have
// been published and dropped: it is not published again. The transitions
// made after it (here a few minutes after, beyond the clock margin) are.
func TestAHalfOpenTransitionHEALTHDroppedByCountIsNotPublishedAgain(t *testing.T) {
	h := prepare(t)
	healthConfig(t, h, func(c *jetstream.StreamConfig) { c.MaxMsgs = 3 })
	for i := range 5 { // HEALTH drops its first two
		if _, err := h.js.Publish(t.Context(), events.BreakerSubject(events.BreakerOpen, "filler"+strconv.Itoa(i)), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	staleHalfOpenIsNotRepublished(t, h, time.Now().Add(-2*time.Hour).UTC(), func() time.Time { return time.Now().Add(5 * time.Minute) })
}

// healthConfig applies edit (if any) to HEALTH's config and returns it.
func healthConfig(t *testing.T, h *harness, edit func(*jetstream.StreamConfig)) jetstream.StreamConfig {
	t.Helper()
	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	cfg := health.CachedInfo().Config
	if edit != nil {
		edit(&cfg)
		if _, err := h.js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// staleHalfOpenIsNotRepublished stores a half-open record whose
// transition was made at stale and no event on HEALTH, starts the
// service, then stores two records whose transitions were made at
// fresh(): those are published, the stale one must not be.
func staleHalfOpenIsNotRepublished(t *testing.T, h *harness, stale time.Time, fresh func() time.Time) {
	t.Helper()
	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, at time.Time) { t.Helper(); putHalfOpenRecord(t, h, key, at) }
	put("stale", stale)
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
		put(key, fresh().UTC())
		natstest.Eventually(t, 10*time.Second, key+"'s unpublished transition on HEALTH", func() bool { return stored(key) })
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(published, "stale") || stored("stale") {
		t.Fatalf("published %v: the transition made at %s, whose event HEALTH may have dropped, was published again", published, stale.Format(time.RFC3339))
	}
}

// A replayed half-open record whose first try fails before the HEALTH
// check (its read of flyball-breakers, as while KV elects a leader at a
// start) is still checked against HEALTH when it is tried again. The
// retry used to take it for this replica's own fresh transition and
// published it, though HEALTH (here count-limited) had dropped it.
func TestAReplayedHalfOpenRecordStaysCheckedWhenItsFirstTryFails(t *testing.T) {
	h := prepare(t)
	healthConfig(t, h, func(c *jetstream.StreamConfig) { c.MaxMsgs = 3 })
	for i := range 5 { // HEALTH drops its first two
		if _, err := h.js.Publish(t.Context(), events.BreakerSubject(events.BreakerOpen, "filler"+strconv.Itoa(i)), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	stale := time.Now().Add(-2 * time.Hour).UTC()
	putHalfOpenRecord(t, h, "stale", stale)
	kv := &failFirstGet{key: "stale"}
	var mu sync.Mutex
	var published []string
	h.start(func(s *breaker.Service) {
		s.TuneKV(streams.BucketBreakers, func(b jetstream.KeyValue) jetstream.KeyValue { kv.KeyValue = b; return kv })
		s.Publishing(func(key string, _ events.BreakerState) {
			mu.Lock()
			published = append(published, key)
			mu.Unlock()
		})
	})
	natstest.Eventually(t, 10*time.Second, "stale's record tried again after its failed read", func() bool { return kv.gets.Load() >= 2 })
	// A record stored after the retry began goes through a later round of
	// the loop: once it is on HEALTH, the retry was judged.
	health, err := h.js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	putHalfOpenRecord(t, h, "later", time.Now().Add(5*time.Minute).UTC())
	natstest.Eventually(t, 10*time.Second, "later's transition on HEALTH", func() bool {
		_, err := health.GetLastMsgForSubject(t.Context(), events.BreakerSubject(events.BreakerHalfOpen, "later"))
		return err == nil
	})
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(published, "stale") {
		t.Fatalf("published %v: the replayed transition made at %s, which HEALTH dropped, was published on the retry after a failed read", published, stale.Format(time.RFC3339))
	}
}

// failFirstGet is flyball-breakers whose first read of key fails.
type failFirstGet struct {
	jetstream.KeyValue
	key  string
	gets atomic.Int32
}

func (k *failFirstGet) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if key == k.key && k.gets.Add(1) == 1 {
		return nil, errors.New("injected: a read while KV elects a leader")
	}
	return k.KeyValue.Get(ctx, key)
}

// putHalfOpenRecord stores a half-open record of key whose transition was
// made at at, with no event on HEALTH.
func putHalfOpenRecord(t *testing.T, h *harness, key string, at time.Time) {
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
