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

// TestDispatchIsKeptAliveWhileItsRunEventWaitsInTheOutbox: a call ends
// in milliseconds, but RUNS takes its run event only after several
// AckWaits (here it has no stream for the subject, as while RUNS elects a
// leader, and the outbox publishes it again each round). The dispatch
// must stay with this executor meanwhile and be acked once the event is
// stored: one call, one delivery. Before, the keep-alive ended with the
// call, and only a call that could end late in its AckWait had one: the
// dispatch came back after its AckWait and the target was called again.
// At the old 60 s AckWait that took a call of 40 s or more followed by
// the outbox's full 15 s; with a 1 s AckWait, this test's short call made
// six calls.
func TestDispatchIsKeptAliveWhileItsRunEventWaitsInTheOutbox(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, ackWait, 0)
	restore := f.changeRuns(t, func(c *jetstream.StreamConfig) { c.Subjects = []string{"flyball.run.elsewhere.>"} })
	republished := f.ex.cfg.Metrics.OutboxRepublished
	before := testutil.ToFloat64(republished)
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "the call", func() bool { return len(target.attempts()) == 1 })
	// Each round ends only after nats.go's four retries of the publish,
	// 250 ms apart, so five rounds span at least four AckWaits.
	natstest.Eventually(t, 14*time.Second, "five outbox rounds", func() bool { return testutil.ToFloat64(republished)-before >= 5 })
	restore()
	natstest.Eventually(t, 20*time.Second, "the run event on RUNS", func() bool { return len(f.stored(t)) == 1 })
	natstest.Eventually(t, 10*time.Second, "the dispatch acked", func() bool {
		info := f.dispatchInfo(t)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	info := f.dispatchInfo(t)
	if got := target.attempts(); fmt.Sprint(got) != "[1]" {
		t.Errorf("target called with attempts %v, want [1]: the dispatch was redelivered while its run event waited", got)
	}
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("DISPATCH delivered %d times (%d redelivered), want once", info.Delivered.Consumer, info.NumRedelivered)
	}
	if got := f.stored(t); fmt.Sprint(got) != "[succeeded(attempt 1, final false)]" {
		t.Errorf("RUNS holds %v, want one run.succeeded", got)
	}
}

// TestNakAfterALongWaitKeepsItsDelay: a run event waits in the outbox for
// longer than the AckWait, then the run fails and its dispatch is nakked
// for a retry in 100 ms. The InProgress that refreshes the dispatch before
// its settle (settle) must go before the nak, never after it: one after
// would restart the AckWait and put the retry off to it.
func TestNakAfterALongWaitKeepsItsDelay(t *testing.T) {
	t.Parallel()
	const ackWait = 20 * time.Second
	target := newAttemptTarget(t, http.StatusInternalServerError, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, ackWait, 0)
	restore := f.changeRuns(t, func(c *jetstream.StreamConfig) { c.Subjects = []string{"flyball.run.elsewhere.>"} })
	republished := f.ex.cfg.Metrics.OutboxRepublished
	before := testutil.ToFloat64(republished)
	f.dispatch(t)
	// Six rounds span at least five seconds, a quarter AckWait: settle
	// sends an InProgress before the nak.
	natstest.Eventually(t, 14*time.Second, "six outbox rounds", func() bool { return testutil.ToFloat64(republished)-before >= 6 })
	restore()
	// The retry is due 100 ms after the nak; a retry put off to the
	// AckWait would come 20 s later.
	natstest.Eventually(t, 10*time.Second, "the retry, attempt 2", func() bool { return len(target.attempts()) == 2 })
	natstest.Eventually(t, 10*time.Second, "its run.succeeded on RUNS", func() bool {
		got := f.stored(t)
		return len(got) >= 2 && got[1].outcome == "succeeded"
	})
	if got := target.attempts(); fmt.Sprint(got) != "[1 2]" {
		t.Errorf("target called with attempts %v, want [1 2]", got)
	}
	if got := f.stored(t); got[0].outcome != "failed" || got[0].run.Attempt != 1 {
		t.Errorf("RUNS holds %v, want attempt 1's run.failed first", got)
	}
}
