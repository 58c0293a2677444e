package breaker_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestTaskSwitchedToHostScopeForgetsItsOwnRecord: task t1 opened its own
// breaker, then its spec switched to breaker.scope: host. The executor
// keys its outcomes host_<host> since, so nothing wrote record t1 again:
// at retryAt the half-open loop moved it to half-open, and it stayed so
// for good (the spec exists, so the sweeper never purged it), counted in
// flyball_breakers_open and FlyballBreakerOpen. The breaker service now
// deletes the task's own record when its watch sees the switch; an
// outcome under the old key still in flight writes none, and a switch
// back to scope task starts from a closed breaker.
func TestTaskSwitchedToHostScopeForgetsItsOwnRecord(t *testing.T) {
	h := prepare(t)
	h.putFastBreakerTask()
	h.start()
	for range 3 {
		h.outcome(events.OutcomeFailed, "t1")
	}
	if b, _, ok := h.record("t1"); !ok || b.State == events.BreakerClosed {
		t.Fatalf("after three failures: %+v (present %v), want the breaker open", b, ok)
	}
	spec := `{"id":"t1","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"},"breaker":{"failureThreshold":3,"openDelay":"200ms","scope":"host"}}`
	rev, err := h.tasks.Put(t.Context(), "t1", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	var last events.BreakerState
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _, ok := h.record("t1")
		if !ok {
			break
		}
		last = b.State
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: the record t1 of a task switched to scope host is deleted; it is still %s", last)
		}
		<-tick.C
	}
	// A failure under the old key, in flight across the switch, handled
	// once the service's view of the spec holds the switch (the record's
	// delete comes from another watch of flyball-tasks).
	h.awaitSpec("t1", rev)
	h.outcome(events.OutcomeFailed, "t1")
	if b, _, ok := h.record("t1"); ok {
		t.Fatalf("an outcome under the task's key after the switch to scope host wrote %+v", b)
	}
	h.putFastBreakerTask() // back to scope task
	natstest.Eventually(t, 10*time.Second, "the spec switched back to scope task is seen", func() bool {
		h.outcome(events.OutcomeFailed, "t1")
		_, _, ok := h.record("t1")
		return ok
	})
	if b, _, _ := h.record("t1"); b.State != events.BreakerClosed || b.Failures != 1 {
		t.Fatalf("the task switched back to scope task: %+v, want closed with its one new failure", b)
	}
}
