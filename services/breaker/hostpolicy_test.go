package breaker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/breaker"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/streams"
)

// TestFailedProbeNeverShortensTheOpenPeriod: a host breaker applies the
// policy of the task whose outcome it counts. Opened for an hour by task
// "a" (maxOpenDelay 1h), it re-opened for 5 minutes when task "b"
// (default cap 5m) probed and failed: the period shrank, where a failed
// probe doubles it. It must re-open for no less than the current hour
// (doubled up to the larger of b's cap and the current period).
func TestFailedProbeNeverShortensTheOpenPeriod(t *testing.T) {
	h := newHarness(t)
	for id, pol := range map[string]string{"a": `,"maxOpenDelay":"2h"`, "b": ``} {
		spec := `{"id":"` + id + `","target":{"http":{"url":"https://api.example.com/"}},"schedule":{"interval":"1m"},"breaker":{"scope":"host"` + pol + `}}`
		if _, err := h.tasks.Put(t.Context(), id, []byte(spec)); err != nil {
			t.Fatal(err)
		}
	}
	const key = "host_api_example_com"
	h.putOpenFor(key, time.Hour)
	h.outcomeOf(events.OutcomeFailed, "b", key, time.Now()) // b's probe fails
	b, _, _ := h.record(key)
	if b.State != events.BreakerOpen || b.OpenDelay.D() < time.Hour {
		t.Fatalf("after b's failed probe: %s with openDelay %s; want open for at least the current 1h0m0s", b.State, b.OpenDelay)
	}
	// a's cap (2h) lets a's failed probe double it.
	h.putOpenFor(key, time.Hour)
	h.outcomeOf(events.OutcomeFailed, "a", key, time.Now())
	if b, _, _ := h.record(key); b.OpenDelay.D() != 2*time.Hour {
		t.Fatalf("after a's failed probe: openDelay %s, want 2h0m0s", b.OpenDelay)
	}
}

// putOpenFor stores an open breaker record for key opened openDelay ago,
// due a second ago.
func (h *harness) putOpenFor(key string, openDelay time.Duration) {
	h.t.Helper()
	now := time.Now().UTC()
	rec, err := json.Marshal(executor.BreakerRecord{Key: key, State: events.BreakerOpen, Failures: 9, OpenDelay: events.Duration(openDelay), RetryAt: now.Add(-time.Second), UpdatedAt: now.Add(-openDelay)})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.breakers.Put(h.t.Context(), key, rec); err != nil {
		h.t.Fatal(err)
	}
}

// TestSpecReadErrorIsRetried: when the task's spec could not be read for
// any reason but its absence (KV electing a leader, a timeout), even a
// task-scoped outcome was counted with the default policy (3, 5s, 5m)
// instead of the task's. It must be tried again: here the first read of
// "gone" fails, and the retry finds no spec, so the outcome of the
// deleted task writes nothing (as documented for a missing spec).
func TestSpecReadErrorIsRetried(t *testing.T) {
	h := prepare(t)
	kv := &failFirstGet{key: "gone"}
	h.start(func(s *breaker.Service) {
		s.TuneKV(streams.BucketTasks, func(b jetstream.KeyValue) jetstream.KeyValue { kv.KeyValue = b; return kv })
	})
	h.outcomeOf(events.OutcomeFailed, "gone", "gone", time.Now())
	if b, _, found := h.record("gone"); found {
		t.Fatalf("after a failed spec read: record %s with %d failures, want the outcome retried (no spec: nothing written)", b.State, b.Failures)
	}
	if n := kv.gets.Load(); n < 2 {
		t.Fatalf("the spec was read %d times, want it read again after the failed read", n)
	}
}
