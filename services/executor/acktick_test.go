package executor

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// isTicking reports whether the settler's ticker goroutine runs.
func (st *settler) isTicking() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ticking
}

// TestSettlerRetriesOnItsProductionTimings: the other settler tests
// shorten its timings (newTestSettler); this one keeps newSettler's own:
// the 100 ms ticker (settleTick), a 2 s try (ackTry) and a 250 ms first
// retry (ackRetry). A settle the server answers "no responders" (a
// consumer with no leader) is sent again by the ticker until it is
// confirmed; the ticker stops once nothing is pending, and starts again
// for the next settle, whose first try goes unanswered (lost in a leader
// change): that try is counted as failed after ackTry, not before, and
// sent again.
func TestSettlerRetriesOnItsProductionTimings(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	st, err := newSettler(nc, quietLog(), metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.stop) // on failure too: its ticker and reply subscription
	if st.tick != settleTick || st.try != ackTry || st.retry != ackRetry {
		t.Fatalf("newSettler's timings: tick %v, try %v, retry %v; want %v, %v, %v", st.tick, st.try, st.retry, settleTick, ackTry, ackRetry)
	}

	// No responder yet: every try is answered "no responders".
	st.settle("ack.one", "d.t", "ack", ackBody, time.Now().Add(time.Minute))
	natstest.Eventually(t, 10*time.Second, "three tries answered no responders", func() bool { return st.triesOfPending() >= 3 })
	natstest.Subscribe(t, nc, "ack.one", func(m *nats.Msg) { _ = m.Respond(nil) })
	settled(t, st, 10*time.Second)
	natstest.Eventually(t, 5*time.Second, "the ticker stopped once nothing is pending", func() bool { return !st.isTicking() })

	// The first try reaches the consumer, but its answer is lost.
	var got atomic.Int32
	natstest.Subscribe(t, nc, "ack.two", func(m *nats.Msg) {
		if got.Add(1) == 2 {
			_ = m.Respond(nil)
		}
	})
	start := time.Now()
	st.settle("ack.two", "d.u", "ack", ackBody, time.Now().Add(time.Minute))
	settled(t, st, 10*time.Second)
	took := time.Since(start)
	if n := got.Load(); n != 2 {
		t.Fatalf("%d tries reached the consumer, want 2: the unanswered one and its retry", n)
	}
	if took < ackTry {
		t.Fatalf("confirmed after %v: the unanswered try was sent again before its %v wait", took, ackTry)
	}
	natstest.Eventually(t, 5*time.Second, "the ticker stopped again", func() bool { return !st.isTicking() })
}
