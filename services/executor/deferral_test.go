package executor

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// delivered is how many deliveries the DISPATCH consumer has made,
// redeliveries included.
func (f *attemptsFixture) delivered(t *testing.T) uint64 {
	t.Helper()
	return f.dispatchInfo(t).Delivered.Consumer
}

// dispatchInfo is the state of the DISPATCH consumer the executor reads.
func (f *attemptsFixture) dispatchInfo(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := f.srv.JS.Consumer(t.Context(), streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// putBreaker stores rec as the fixture task's breaker and waits until the
// executor's view of flyball-breakers holds it, so that a dispatch sent
// next meets it (the view follows a watch, a moment behind the bucket).
func (f *attemptsFixture) putBreaker(t *testing.T, rec BreakerRecord) {
	t.Helper()
	putBreakerSeen(t, f.srv.JS, f.ex, f.id, rec)
}

// putBreakerSeen stores rec under key in flyball-breakers and waits until
// ex's view holds it.
func putBreakerSeen(t *testing.T, js jetstream.JetStream, ex *Service, key string, rec BreakerRecord) {
	t.Helper()
	natstest.PutJSON(t, js, streams.BucketBreakers, key, rec)
	natstest.Eventually(t, 10*time.Second, "the executor's view holds the breaker record", func() bool {
		r := ex.breakers.Lookup(key)
		return r.Found && r.Value.State == rec.State && r.Value.RetryAt.Equal(rec.RetryAt)
	})
}

// TestWaitingForAProbeUsesNoDeliveries: a dispatch that waits for
// another call's probe of a half-open breaker is checked again every
// half second or more, for as long as the probe runs (a slow target,
// several re-open cycles of a host breaker). Its waits must not use up
// the consumer's deliveries: MaxDeliver is 3 here (50 in production), the
// dispatch waits through more checks than that, and once the probe
// closes the breaker it calls its target, on its first delivery. Before,
// each check was a NakWithDelay, a delivery of its own: the dispatch was
// dead-lettered as max-deliveries without ever calling its target.
func TestWaitingForAProbeUsesNoDeliveries(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 5*time.Second, 3)
	exhausted := f.deliveriesExhausted(t)
	retryAt := time.Now().Add(-time.Second).UTC()
	f.putBreaker(t, BreakerRecord{
		Key: f.id, State: events.BreakerHalfOpen, Failures: 3, OpenDelay: events.Duration(time.Second), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
	})
	now := time.Now().UTC()
	natstest.PutJSON(t, f.srv.JS, streams.BucketProbes, probeKey(f.id, retryAt), probeClaim{
		TaskID: "other", DispatchID: "other:1", Executor: "flyball/executor/other", ClaimedAt: now, ExpiresAt: now.Add(time.Hour),
	})
	f.dispatch(t)
	deferred := func() int { return int(testutil.ToFloat64(f.ex.cfg.Metrics.ProbeDeferred)) }
	natstest.Eventually(t, 20*time.Second, "4 checks of the probe, or the deliveries used up", func() bool {
		select {
		case <-exhausted:
			return true
		default:
			return deferred() >= 4
		}
	})
	select {
	case <-exhausted:
		t.Fatalf("the dispatch used up its 3 deliveries waiting for another call's probe (%d checks), without calling its target: MAX_DELIVERIES", deferred())
	default:
	}
	if n := f.delivered(t); n != 1 {
		t.Fatalf("%d deliveries for %d checks of the probe, want 1: a wait is not a delivery", n, deferred())
	}
	if got := target.attempts(); len(got) != 0 {
		t.Fatalf("target called %v while another call probes", got)
	}
	// The probe succeeds: the breaker closes, and the dispatch calls.
	natstest.PutJSON(t, f.srv.JS, streams.BucketBreakers, f.id, BreakerRecord{Key: f.id, State: events.BreakerClosed, UpdatedAt: time.Now().UTC()})
	natstest.Eventually(t, 20*time.Second, "run.succeeded on RUNS", func() bool { return len(f.stored(t)) == 1 })
	if got := fmt.Sprint(f.stored(t)); got != "[succeeded(attempt 1, final false)]" {
		t.Fatalf("RUNS holds %s, want one run.succeeded of attempt 1", got)
	}
	if got := target.attempts(); len(got) != 1 {
		t.Fatalf("target called with attempts %v, want one call", got)
	}
	if n := f.delivered(t); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}

// TestOpenBreakerWaitIsKeptAlive: a dispatch deferred until its open
// breaker's retryAt, past the consumer's AckWait (2 s here, the wait 2.5
// times that, kept alive every 0.5 s; an open period
// runs up to breaker.maxOpenDelay, 5 min by default, and a host outage
// repeats it), stays with its executor, kept alive, and calls its target
// at retryAt on its one delivery. Before, each open period was a
// NakWithDelay, so every re-open cycle took one of the 50 deliveries.
func TestOpenBreakerWaitIsKeptAlive(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 2*time.Second, 50)
	retryAt := time.Now().Add(5 * time.Second).UTC()
	f.putBreaker(t, BreakerRecord{
		Key: f.id, State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(5 * time.Second), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
	})
	f.dispatch(t)
	// The breaker is open: the success is repeated for it (recovered.go).
	f.awaitSucceededAndRecovered(t)
	if got := target.attempts(); len(got) != 1 {
		t.Fatalf("target called with attempts %v, want one call", got)
	}
	if n := f.delivered(t); n != 1 {
		t.Fatalf("the dispatch was delivered %d times while its breaker was open for 5 s, want once: a deferral is not a delivery", n)
	}
	if got := f.stored(t)[0].run.StartedAt; got.Before(retryAt) {
		t.Fatalf("called at %s, %s before retryAt", got, retryAt.Sub(got))
	}
}

// TestStopHandsBackADeferredDispatch: an executor that stops while it
// keeps a dispatch its breaker defers hands it back, delayed to its
// retryAt: another executor calls it then, once, and the run is not lost.
func TestStopHandsBackADeferredDispatch(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	retryAt := time.Now().Add(2 * time.Second).UTC()
	f.putBreaker(t, BreakerRecord{
		Key: f.id, State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(2 * time.Second), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
	})
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "the dispatch deferred", func() bool {
		return testutil.ToFloat64(f.ex.cfg.Metrics.DispatchDeferred) == 1
	})
	f.ex.Stop()
	if n := testutil.ToFloat64(f.ex.cfg.Metrics.DispatchDeferred); n != 0 {
		t.Fatalf("%v dispatches still deferred after Stop, want 0", n)
	}
	nc, _ := f.srv.Connect(t)
	b := startProbeExecutor(t, nc, "b")
	t.Cleanup(b.Stop)
	// The breaker is open: the success is repeated for it (recovered.go).
	f.awaitSucceededAndRecovered(t)
	if got := target.attempts(); len(got) != 1 {
		t.Fatalf("target called with attempts %v, want one call", got)
	}
	if got := f.stored(t)[0].run.StartedAt; got.Before(retryAt) {
		t.Fatalf("called at %s, %s before retryAt", got, retryAt.Sub(got))
	}
	if n := f.delivered(t); n != 2 {
		t.Fatalf("%d deliveries, want 2 (the hand-back at Stop)", n)
	}
}

// TestDeferredDispatchWakesWhenItsBreakerChanges: a dispatch its open
// breaker defers is checked again as soon as the breaker's record
// changes, not only at retryAt. A breaker closed early, or removed with
// its deleted task, released it only at retryAt (up to
// breaker.maxOpenDelay), and a task created again under the same ID could
// not run before: the old dispatch held its DISPATCH subject.
func TestDeferredDispatchWakesWhenItsBreakerChanges(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	f.putBreaker(t, BreakerRecord{
		Key: f.id, State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(time.Hour), RetryAt: time.Now().Add(time.Hour).UTC(), UpdatedAt: time.Now().UTC(),
	})
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "the dispatch deferred", func() bool {
		return testutil.ToFloat64(f.ex.cfg.Metrics.DispatchDeferred) == 1
	})
	kv, err := f.srv.JS.KeyValue(t.Context(), streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), f.id); err != nil { // as the breaker service does for a deleted task
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "run.succeeded once the breaker record is gone, not an hour later", func() bool { return len(f.stored(t)) == 1 })
	if n := testutil.ToFloat64(f.ex.cfg.Metrics.DispatchDeferred); n != 0 {
		t.Fatalf("%v dispatches still deferred, want 0", n)
	}
}

// awaitSucceededAndRecovered waits for the task's run events on RUNS to
// be one run.succeeded and its run.recovered, and fails on anything else.
func (f *attemptsFixture) awaitSucceededAndRecovered(t *testing.T) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, "run.succeeded and run.recovered on RUNS", func() bool { return len(f.stored(t)) >= 2 })
	if got := f.stored(t); len(got) != 2 || got[0].outcome != "succeeded" || got[1].outcome != "recovered" || got[1].run.DispatchID != got[0].run.DispatchID {
		t.Fatalf("RUNS holds %v, want a run.succeeded and its run.recovered", got)
	}
}
