package executor

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// failGetKV is a bucket (flyball-attempts, flyball-schedules) whose reads
// fail while fail is set, as in an outage of the bucket (an R1 bucket on a
// restarting node).
type failGetKV struct {
	jetstream.KeyValue
	fail    atomic.Bool
	refused atomic.Int32
	first   atomic.Int64 // UnixNano of the first refused read
}

func (k *failGetKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.fail.Load() {
		k.first.CompareAndSwap(0, time.Now().UnixNano())
		k.refused.Add(1)
		return nil, errors.New("test: bucket unavailable")
	}
	return k.KeyValue.Get(ctx, key)
}

// outageFor is how long reads have been failing.
func (k *failGetKV) outageFor() time.Duration {
	first := k.first.Load()
	if first == 0 {
		return 0
	}
	return time.Since(time.Unix(0, first))
}

// TestInfrastructureOutageDoesNotExhaustTheDispatch: a retry whose
// attempt record cannot be read (flyball-attempts down) is tried again in
// place, kept alive, using none of the consumer's deliveries. It was
// nakked for 1 s each time, so an outage longer than MaxDeliver x 1 s used
// up every delivery: the target was never called again and the dispatch
// was dead-lettered as max-deliveries. Once the bucket is back, the retry
// runs.
func TestInfrastructureOutageDoesNotExhaustTheDispatch(t *testing.T) {
	t.Parallel()
	const maxDeliver = 5
	target := newAttemptTarget(t, http.StatusServiceUnavailable, http.StatusOK)
	kv := &failGetKV{}
	kv.fail.Store(true)
	f := newTunedAttemptsFixture(t, target, 5, 2*time.Second, maxDeliver, func(s *Service) {
		kv.KeyValue = s.attempts
		s.attempts = kv
		s.infraRetryFirst, s.infraRetryMax = 250*time.Millisecond, time.Second
	})
	exhausted := f.deliveriesExhausted(t)
	seq := f.dispatch(t)
	// Longer than MaxDeliver deliveries 1 s apart, past an AckWait.
	outage := time.Duration(maxDeliver+1) * time.Second
	natstest.Eventually(t, 30*time.Second, "an outage of flyball-attempts longer than MaxDeliver x 1 s, or the dispatch exhausted", func() bool {
		select {
		case <-exhausted:
			return true
		default:
		}
		return kv.outageFor() > outage && kv.refused.Load() > maxDeliver
	})
	select {
	case <-exhausted:
		t.Fatalf("dispatch exhausted its %d deliveries after %d failed reads of flyball-attempts in %s; target calls %v",
			maxDeliver, kv.refused.Load(), kv.outageFor().Round(100*time.Millisecond), target.attempts())
	default:
	}
	if calls := target.attempts(); !slices.Equal(calls, []int{1}) {
		t.Fatalf("target calls during the outage: %v, want [1]", calls)
	}
	kv.fail.Store(false)
	natstest.Eventually(t, 20*time.Second, "the retry succeeded", func() bool {
		return slices.ContainsFunc(f.stored(t), func(r storedRun) bool { return r.outcome == "succeeded" })
	})
	natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
	if calls := target.attempts(); !slices.Equal(calls, []int{1, 2}) {
		t.Fatalf("target calls: %v, want [1 2]", calls)
	}
	select {
	case <-exhausted:
		t.Fatal("dispatch exhausted its deliveries")
	default:
	}
}

// TestInfrastructureRetryIsHandedBackAtShutdown: a dispatch kept for
// another try after an infrastructure failure does not hold up Stop, and
// is handed back (a nak) rather than lost: the next executor, whose reads
// work, runs its pending retry.
func TestInfrastructureRetryIsHandedBackAtShutdown(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusServiceUnavailable, http.StatusOK)
	kv := &failGetKV{}
	kv.fail.Store(true)
	f := newTunedAttemptsFixture(t, target, 5, 2*time.Second, 5, func(s *Service) {
		kv.KeyValue = s.attempts
		s.attempts = kv
		s.infraRetryFirst, s.infraRetryMax = time.Second, time.Second
	})
	seq := f.dispatch(t)
	natstest.Eventually(t, 20*time.Second, "two failed reads of the retry's attempt record", func() bool { return kv.refused.Load() >= 2 })
	stopped := make(chan struct{})
	go func() {
		f.ex.Stop()
		close(stopped)
	}()
	awaitClosed(t, stopped, 5*time.Second, "Stop with a dispatch kept for another try")
	f.startTunedExecutor(t, "b", nil)
	natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
	if calls := target.attempts(); !slices.Equal(calls, []int{1, 2}) {
		t.Fatalf("target calls: %v, want [1 2]", calls)
	}
	if !slices.ContainsFunc(f.stored(t), func(r storedRun) bool { return r.outcome == "succeeded" && r.run.Attempt == 2 }) {
		t.Fatalf("RUNS holds %v, want a run.succeeded of attempt 2", f.stored(t))
	}
}

// TestRunsOutageDoesNotExhaustTheDispatch: a call succeeds, and RUNS
// confirms none of its run event's publishes for longer than MaxDeliver
// outbox give-ups. The give-up nakked the dispatch for a second, and its
// redelivery published the event again and gave up again, one delivery
// each: the last delivery called the target a second time, and the
// dispatch of a run that had succeeded was dead-lettered as
// max-deliveries. The event is now published again in place, the
// dispatch kept alive, using none of its deliveries, until it is stored,
// and the dispatch is then acked.
func TestRunsOutageDoesNotExhaustTheDispatch(t *testing.T) {
	t.Parallel()
	const maxDeliver = 4
	target := newAttemptTarget(t, http.StatusOK)
	lossy := &lostRunAcks{}
	lossy.lose.Store(true)
	f := newTunedAttemptsFixture(t, target, 3, 5*time.Second, maxDeliver, func(s *Service) {
		lossy.JetStream = s.cfg.JS
		s.cfg.JS = lossy
		s.outRound, s.outBudget = 200*time.Millisecond, time.Second
		s.infraRetryFirst, s.infraRetryMax = 250*time.Millisecond, 500*time.Millisecond
	})
	exhausted := f.deliveriesExhausted(t)
	abandoned := f.ex.cfg.Metrics.OutboxAbandoned
	seq := f.dispatch(t)
	natstest.Eventually(t, 60*time.Second, "more outbox give-ups than MaxDeliver, or the dispatch exhausted", func() bool {
		select {
		case <-exhausted:
			return true
		default:
		}
		return testutil.ToFloat64(abandoned) > maxDeliver+1
	})
	select {
	case <-exhausted:
		t.Fatalf("dispatch exhausted its %d deliveries after %v outbox give-ups; target calls %v",
			maxDeliver, testutil.ToFloat64(abandoned), target.attempts())
	default:
	}
	if calls := target.attempts(); !slices.Equal(calls, []int{1}) {
		t.Fatalf("target calls during the outage: %v, want [1]", calls)
	}
	lossy.lose.Store(false)
	natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
	if calls := target.attempts(); !slices.Equal(calls, []int{1}) {
		t.Fatalf("target calls: %v, want [1]", calls)
	}
	if info := f.dispatchInfo(t); info.Delivered.Consumer != 1 {
		t.Errorf("dispatch delivered %d times, want once: each give-up used a delivery", info.Delivered.Consumer)
	}
	if n := f.ex.eventBytes.Load(); n != 0 {
		t.Errorf("%d bytes of kept run events still counted after the dispatch was settled, want 0", n)
	}
	select {
	case <-exhausted:
		t.Fatal("dispatch exhausted its deliveries")
	default:
	}
}

// TestRunEventsKeptToPublishAgainAreBounded: a dispatch kept to publish
// its run event again keeps the event in memory, and a RUNS outage makes
// the outbox give up on every event in flight, each up to max_payload.
// Past eventBytesMax the dispatch is nakked as before: a delivery used,
// and its redelivery calls the target again.
func TestRunEventsKeptToPublishAgainAreBounded(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	lossy := &lostRunAcks{}
	lossy.lose.Store(true)
	f := newTunedAttemptsFixture(t, target, 3, 5*time.Second, 50, func(s *Service) {
		lossy.JetStream = s.cfg.JS
		s.cfg.JS = lossy
		s.outRound, s.outBudget = 200*time.Millisecond, time.Second
		s.infraRetryFirst, s.infraRetryMax = 250*time.Millisecond, 500*time.Millisecond
		s.eventBytesMax = 0 // no event fits
	})
	seq := f.dispatch(t)
	natstest.Eventually(t, 60*time.Second, "the target called again after a give-up", func() bool {
		return len(target.attempts()) >= 2
	})
	if info := f.dispatchInfo(t); info.Delivered.Consumer < 2 {
		t.Errorf("dispatch delivered %d times, want a redelivery after each give-up", info.Delivered.Consumer)
	}
	lossy.lose.Store(false)
	natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
}
