package executor

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestDispatchIsKeptAliveWhileTheOutboxFlushesAtStop: an executor stops
// while a run event waits in its outbox (RUNS takes it only after several
// AckWaits, as while RUNS elects a leader at a SIGTERM). Its dispatch
// must stay with the stopping executor until the event is stored and the
// dispatch acked: one call, one delivery, though another executor pulls.
// Before, the keep-alive ran on the run context, which Stop cancels
// before the outbox's final flush (up to its 15 s budget): the dispatch
// came back to the other executor after its AckWait, mid-flush, and the
// target was called twice.
func TestDispatchIsKeptAliveWhileTheOutboxFlushesAtStop(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, ackWait, 0)
	restore := f.changeRuns(t, func(c *jetstream.StreamConfig) { c.Subjects = []string{"flyball.run.elsewhere.>"} })
	republished := f.ex.cfg.Metrics.OutboxRepublished
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "the call", func() bool { return len(target.attempts()) == 1 })
	f.startTunedExecutor(t, "b", nil) // pulls DISPATCH: it would get a redelivery
	before := testutil.ToFloat64(republished)
	progress := f.watchProgress(t)
	stopping := time.Now()
	stopped := make(chan struct{})
	go func() {
		f.ex.Stop()
		close(stopped)
	}()
	// Each round ends only after nats.go's four retries of the publish,
	// 250 ms apart, so five rounds span at least four AckWaits.
	natstest.Eventually(t, 14*time.Second, "five outbox rounds while the executor stops", func() bool {
		return testutil.ToFloat64(republished)-before >= 5
	})
	// The keep-alive runs through the flush, not only at its start:
	// InProgress keeps coming after five rounds, with the flush's budget
	// (15 s) far from spent. (A keep-alive on the run context sent a few,
	// then none once Stop cancelled it; the one InProgress settle sends
	// before its ack or nak comes only when the flush has ended.)
	flushing := time.Now()
	natstest.Eventually(t, 10*time.Second, "two InProgress for the dispatch after five outbox rounds while the executor stops: it is not kept alive through the flush", func() bool {
		n, _ := progress.between(flushing, time.Now())
		return n >= 2
	})
	restore()
	awaitClosed(t, stopped, 20*time.Second, "Stop once RUNS takes the run event")
	natstest.Eventually(t, 10*time.Second, "the dispatch acked", func() bool {
		info := f.dispatchInfo(t)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	_, longest := progress.between(stopping, time.Now())
	if f.delivered(t) > 1 && starved(t, ackWait, longest) {
		return
	}
	if got := target.attempts(); fmt.Sprint(got) != "[1]" {
		t.Errorf("target called with attempts %v, want [1]: the dispatch was redelivered while the stopping executor's outbox flushed (longest stretch without an InProgress %s)", got, longest)
	}
	if info := f.dispatchInfo(t); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("DISPATCH delivered %d times (%d redelivered), want once (longest stretch without an InProgress %s)", info.Delivered.Consumer, info.NumRedelivered, longest)
	}
}
