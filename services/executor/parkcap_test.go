package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// openForAnHour stores an open breaker for each of ids, retryAt an hour
// away, and waits until ex's view holds them.
func openForAnHour(t *testing.T, srv *natstest.Server, ex *Service, ids ...string) time.Time {
	t.Helper()
	retryAt := time.Now().Add(time.Hour).UTC()
	for _, id := range ids {
		putBreakerSeen(t, srv.JS, ex, id, BreakerRecord{
			Key: id, State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(time.Hour), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
		})
	}
	return retryAt
}

// breakerSkips is the number of runs ex skipped as held back by an open
// breaker past its room in the consumer's max_ack_pending.
func breakerSkips(ex *Service) float64 {
	return testutil.ToFloat64(ex.cfg.Metrics.SkipsTotal.WithLabelValues("breaker"))
}

// checkBreakerSkip fails unless the last run.skipped of task id says
// which breaker held it back, until when, and why it was not kept.
func checkBreakerSkip(t *testing.T, js jetstream.JetStream, id string, retryAt time.Time, why string) {
	t.Helper()
	run, ok := lastRun(t, js, events.OutcomeSkipped, id)
	if !ok {
		t.Fatalf("no run.skipped of %s", id)
	}
	want := "breaker open until " + retryAt.Format(time.RFC3339Nano) + " (key " + id + "): not kept waiting, as "
	if !strings.HasPrefix(run.Reason, want) || !strings.Contains(run.Reason, why) {
		t.Errorf("run.skipped of %s has reason %q, want it to start %q and say %q", id, run.Reason, want, why)
	}
}

// TestBreakerDeferralsLeaveRoomForOtherTasks: an executor keeps a
// dispatch its open breaker defers, delivered and unacked, until retryAt
// (breaker.maxOpenDelay allows 24h). Every one counts toward the DISPATCH
// consumer's max_ack_pending (20,000), across all executors; a nak with a
// delay would count as well. With max_ack_pending 2 here and two
// dispatches held back by breakers open for an hour, JetStream delivered
// nothing more: a healthy task was not called (in production, a host
// breaker over 20,000 tasks, or a datacenter outage, stopped every other
// task until the breakers closed). The executor keeps at most half
// max_ack_pending so: the second dispatch is reported run.skipped, naming
// its breaker and retryAt, and acked, and the healthy task runs.
func TestBreakerDeferralsLeaveRoomForOtherTasks(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	changeDispatchConsumer(t, srv.JS, func(c *jetstream.ConsumerConfig) { c.MaxAckPending = 2 })
	target := newPathTarget(t)
	ex := startExecutor(t, srv, newLogLines(), target.spec("down1"), target.spec("down2"), target.spec("healthy"))
	retryAt := openForAnHour(t, srv, ex, "down1", "down2")
	dispatchNow(t, srv.JS, "down1")
	dispatchNow(t, srv.JS, "down2")
	natstest.Eventually(t, 10*time.Second, "both dispatches deferred or skipped", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred)+breakerSkips(ex) == 2
	})
	dispatchNow(t, srv.JS, "healthy")
	natstest.Eventually(t, 10*time.Second, "the healthy task called while two dispatches wait for their breakers", func() bool {
		return target.of("healthy") == 1
	})
	if n := breakerSkips(ex); n < 1 {
		t.Fatalf("flyball_skips_total{reason=\"breaker\"} = %v, want at least 1", n)
	}
	skipped := "down2"
	if _, ok := lastRun(t, srv.JS, events.OutcomeSkipped, skipped); !ok {
		skipped = "down1"
	}
	checkBreakerSkip(t, srv.JS, skipped, retryAt, "this executor keeps as many dispatches for their breakers as it may (1, half of DISPATCH's max_ack_pending 2)")
	if n := target.of("down1") + target.of("down2"); n != 0 {
		t.Fatalf("%d calls to targets whose breakers are open", n)
	}
	if got := testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferredLimit); got != 1 {
		t.Errorf("flyball_dispatch_deferred_limit = %v, want 1 (half of max_ack_pending 2)", got)
	}
}

// TestBreakerDeferralsAreShedWhenTheConsumerFills: each executor keeps
// at most half of max_ack_pending for open breakers, but the limit is
// the consumer's, across executors: two executors under a host breaker
// could each keep up to its half, and fill it. Here the test itself
// holds two deliveries (another executor's deferrals), max_ack_pending
// is 4, and the executor keeps two more, its own half: the consumer is
// full and delivers nothing. The executor reads the consumer's ack
// pending while it keeps deferrals, finds it full, and reports them
// run.skipped: the healthy task runs. It sheds its share of what is past
// parkCap, in proportion to what it parks (half here), tick by tick.
func TestBreakerDeferralsAreShedWhenTheConsumerFills(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	changeDispatchConsumer(t, srv.JS, func(c *jetstream.ConsumerConfig) { c.MaxAckPending = 4 })
	dispatchNow(t, srv.JS, "other1")
	dispatchNow(t, srv.JS, "other2")
	cons, err := srv.JS.Consumer(t.Context(), streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++ // held, not acked
	}
	if n != 2 {
		t.Fatalf("fetched %d dispatches, want 2: %v", n, batch.Error())
	}
	target := newPathTarget(t)
	ex := startExecutor(t, srv, newLogLines(), target.spec("down1"), target.spec("down2"), target.spec("healthy"))
	retryAt := openForAnHour(t, srv, ex, "down1", "down2")
	dispatchNow(t, srv.JS, "down1")
	dispatchNow(t, srv.JS, "down2")
	natstest.Eventually(t, 10*time.Second, "both dispatches deferred or skipped", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.RunsTotal.WithLabelValues("deferred")) == 2
	})
	dispatchNow(t, srv.JS, "healthy")
	natstest.Eventually(t, 10*time.Second, "the healthy task called while the consumer was full", func() bool {
		return target.of("healthy") == 1
	})
	natstest.Eventually(t, 10*time.Second, "both dispatches skipped, down to parkCap", func() bool {
		return breakerSkips(ex) == 2 // its share of 2 past parkCap in 4 delivered is 1, then of 1 in 3
	})
	for _, id := range []string{"down1", "down2"} {
		checkBreakerSkip(t, srv.JS, id, retryAt, "of its max_ack_pending 4 delivered and unacked")
	}
	if n := target.of("down1") + target.of("down2"); n != 0 {
		t.Fatalf("%d calls to targets whose breakers are open", n)
	}
}
