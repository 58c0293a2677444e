package executor

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestKeptRunEventIsHandedBackAtShutdown: a call succeeds, every ack of
// its run event's publishes is lost (the event is stored), the outbox
// gives up, and the executor keeps the dispatch to publish the event
// again in place (retryInfra with an unconfirmedRun). It then stops. The
// dispatch must be handed back at once (a nak delayed to its next try,
// handBackHeld), not held until AckWait, its kept bytes released, and it
// must not be marked handed back: a mark says no call was made, and this
// delivery made one. The next executor, for which the slot and its next
// one have passed (catchUp "none"), must therefore not skip it as missed
// (run.skipped over a slot that ran): as architecture.md says, it calls
// the target again, with the same attempt number, and RUNS keeps the one
// run.succeeded (the same Nats-Msg-Id, within the duplicate window).
func TestKeptRunEventIsHandedBackAtShutdown(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	lossy := &lostRunAcks{}
	lossy.lose.Store(true)
	f := newTunedAttemptsFixture(t, target, 3, 0, 0, func(s *Service) {
		lossy.JetStream = s.cfg.JS
		s.cfg.JS = lossy
		s.outRound, s.outBudget = 200*time.Millisecond, time.Second
		s.infraRetryFirst, s.infraRetryMax = time.Second, time.Second
	})
	f.putNoneTask(t, target.srv.URL, time.Hour)
	d := f.publishSlot(t, time.Now().UTC().Truncate(time.Millisecond))
	natstest.Eventually(t, 20*time.Second, "the dispatch kept to publish its run event again", func() bool {
		return testutil.ToFloat64(f.ex.cfg.Metrics.OutboxAbandoned) >= 1 && f.ex.eventBytes.Load() > 0
	})
	if calls := target.attempts(); fmt.Sprint(calls) != "[1]" {
		t.Fatalf("target calls before the stop: %v, want [1]", calls)
	}
	stopped := make(chan struct{})
	go func() {
		f.ex.Stop()
		close(stopped)
	}()
	awaitClosed(t, stopped, 10*time.Second, "Stop with a dispatch kept to publish its run event again")
	if n := f.ex.eventBytes.Load(); n != 0 {
		t.Errorf("%d bytes of kept run events still counted after Stop, want 0", n)
	}
	// Stop waits for hand-back marks (records): one would be there now.
	if r, found := f.attemptRecordOf(t, &d); found {
		t.Fatalf("record after the hand-back: %+v; want none: the delivery called the target, and a hand-back mark says it did not", r)
	}
	if n := f.delivered(t); n != 1 {
		t.Fatalf("%d deliveries before the next executor, want 1", n)
	}
	// For the next executor the slot and the next one (an hour later)
	// have passed: under catchUp "none" a marked hand-back is skipped.
	f.startTunedExecutor(t, "b", func(s *Service) {
		s.cfg.ClockOffset = func() (time.Duration, bool) { return -3 * time.Hour, true }
	})
	// A nak delayed to its next try (at most a second here): it comes
	// back well before the DISPATCH consumer's 30 s AckWait.
	natstest.Eventually(t, 15*time.Second, "the dispatch handed back and settled by the next executor", func() bool {
		info := f.dispatchInfo(t)
		return len(target.attempts()) >= 2 && info.NumAckPending == 0 && info.NumPending == 0
	})
	if calls := target.attempts(); fmt.Sprint(calls) != "[1 1]" {
		t.Errorf("target calls: %v, want [1 1] (the next executor calls again, with the same attempt number)", calls)
	}
	if got := successOf(f.stored(t)); fmt.Sprint(got) != "[succeeded(attempt 1, final false)]" {
		t.Errorf("RUNS holds %v, want the one run.succeeded of attempt 1 (no run.skipped for a slot that ran)", got)
	}
	if n := f.delivered(t); n != 2 {
		t.Errorf("%d deliveries, want 2 (the hand-back at Stop)", n)
	}
}
