package executor

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
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

// slowAttemptsKV is the real flyball-attempts bucket whose first Get
// takes delay, as a read does while NATS is slow or electing a leader
// (nats.go waits up to 5 s for each). returned is closed once it has.
type slowAttemptsKV struct {
	jetstream.KeyValue
	delay    time.Duration
	once     sync.Once
	returned chan struct{}
}

func (k *slowAttemptsKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	slow := false
	k.once.Do(func() { slow = true })
	if slow {
		defer close(k.returned)
		select {
		case <-time.After(k.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return k.KeyValue.Get(ctx, key)
}

// TestSlowReadsBeforeTheCallAreKeptAlive: the first delivery of a slot
// dispatched late (a zombie the sweeper re-dispatched) reads its attempt
// record before its call, and that read takes three AckWaits. The
// dispatch must stay with this executor meanwhile: one delivery, one
// call. (Here the AckWait is 1 s; before the fix the redelivery called
// the target while the first delivery still read, then the first called
// it too: attempts [1 1].) Before, the keep-alive began only at the call, after every read
// (spec, schedule, pause, attempt record, ranAlready's reads of RUNS and
// DEADLETTER, the probe claim), each allowed nats.go's 5 s: reads that
// together outlasted the 30 s AckWait let JetStream redeliver the
// dispatch, and both deliveries called the target.
func TestSlowReadsBeforeTheCallAreKeptAlive(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	target := newAttemptTarget(t, http.StatusOK)
	target.gate = make(chan struct{}) // the first call waits for it
	slow := &slowAttemptsKV{delay: 3 * ackWait, returned: make(chan struct{})}
	f := newTunedAttemptsFixture(t, target, 3, ackWait, 0, func(s *Service) {
		slow.KeyValue = s.attempts
		s.attempts = slow
	})
	slot := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond)
	d := events.Dispatch{DispatchID: events.DispatchID(f.id, slot), TaskID: f.id, ScheduledAt: slot, FiredAt: time.Now().UTC(), Source: "test", Reason: "zombie"}
	body, err := events.Marshal(events.TypeRunDue, "test", f.id, d, d.FiredAt, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	progress := f.watchProgress(t)
	sent := time.Now()
	if _, err := f.srv.JS.Publish(t.Context(), events.DispatchSubject(f.id), body); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, slow.returned, 20*time.Second, "the slow read of the attempt record")
	readEnd := time.Now()
	if n, _ := progress.between(sent, readEnd); n < 2 {
		t.Fatalf("%d InProgress ack(s) during a read of %s (AckWait %s), want at least 2: the dispatch was not kept alive while it read", n, slow.delay, ackWait)
	}
	// The first call is held until the one that read slowly is made too:
	// a stored run.succeeded would make the later call's ranAlready skip
	// it, which covers this case only when the first call has ended.
	calls := 1
	redelivered := f.delivered(t) > 1
	if redelivered {
		calls = 2 // redelivered during the read: both deliveries call
	}
	natstest.Eventually(t, 20*time.Second, fmt.Sprintf("%d call(s) at the target", calls), func() bool { return len(target.attempts()) >= calls })
	close(target.gate)
	natstest.Eventually(t, 20*time.Second, "a run.succeeded on RUNS, the dispatch settled and no call in flight", func() bool {
		info := f.dispatchInfo(t)
		return len(f.stored(t)) >= 1 && info.NumAckPending == 0 && info.NumPending == 0 && len(f.ex.calls) == 0
	})
	// The stretches during the read only: settle sends an InProgress
	// before its ack, which would end the stretch of a keep-alive that
	// stopped during the read as if it had resumed.
	_, longest := progress.between(sent, readEnd)
	if redelivered && starved(t, ackWait, longest) {
		return
	}
	if got := target.attempts(); fmt.Sprint(got) != "[1]" {
		t.Errorf("target called with attempts %v, want [1]: the dispatch was redelivered while its first delivery read (longest stretch without an InProgress %s)", got, longest)
	}
	if info := f.dispatchInfo(t); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("DISPATCH delivered %d times (%d redelivered), want once (longest stretch without an InProgress %s)", info.Delivered.Consumer, info.NumRedelivered, longest)
	}
}

// TestALostInProgressDoesNotRedeliverALongCall: a call outlasts several
// AckWaits, and the keep-alive's InProgress sent during an eighth of an
// AckWait (two of its ticks) are lost, as those sent while the DISPATCH
// consumer elects a leader are (4-9 s of the 30 s AckWait). The dispatch
// must stay with this executor all the same: one delivery, one call.
// Before, each InProgress was sent unconfirmed, half an AckWait after the
// last: after a lost one the next came about a whole AckWait after the
// last that landed, when the server had redelivered the dispatch, and the
// second delivery called the target while the first call still ran
// (attempts [1 1]).
func TestALostInProgressDoesNotRedeliverALongCall(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	target := newAttemptTarget(t, http.StatusOK)
	target.gate = make(chan struct{}) // the first call waits for it
	var (
		mu       sync.Mutex
		lostFrom time.Time // the first InProgress's send: the loss begins
		lost     int
	)
	f := newTunedAttemptsFixture(t, target, 3, ackWait, 0, func(s *Service) {
		s.dropProgress = func() bool {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			if lostFrom.IsZero() {
				lostFrom = now
			}
			if now.Sub(lostFrom) < ackWait/8 {
				lost++
				return true
			}
			return false
		}
	})
	progress := f.watchProgress(t)
	start := time.Now()
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "the call", func() bool { return len(target.attempts()) == 1 })
	// Three InProgress at the server take an AckWait and more after the
	// lost one; a redelivery comes one AckWait after the last that landed.
	// (Within the call's 5 s timeout.)
	natstest.Eventually(t, 20*time.Second, "three InProgress at the server, or a second call", func() bool {
		n, _ := progress.between(start, time.Now())
		return n >= 3 || len(target.attempts()) > 1
	})
	close(target.gate)
	natstest.Eventually(t, 20*time.Second, "a run.succeeded on RUNS, the dispatch settled and no call in flight", func() bool {
		info := f.dispatchInfo(t)
		return len(f.stored(t)) >= 1 && info.NumAckPending == 0 && info.NumPending == 0 && len(f.ex.calls) == 0
	})
	mu.Lock()
	n := lost
	mu.Unlock()
	if n == 0 {
		t.Fatal("no InProgress was lost: the test lost nothing")
	}
	_, longest := progress.between(start, time.Now())
	if got := target.attempts(); fmt.Sprint(got) != "[1]" {
		t.Errorf("target called with attempts %v, want [1]: %d lost InProgress let the dispatch be redelivered while its call ran (longest stretch without an InProgress %s)", got, n, longest)
	}
	if info := f.dispatchInfo(t); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Errorf("DISPATCH delivered %d times (%d redelivered), want once", info.Delivered.Consumer, info.NumRedelivered)
	}
}

// starved reports whether a redelivery is the machine's doing, not the
// keep-alive's: keepWaitersAlive sends InProgress at most nine sixteenths
// of an AckWait apart, and one that went unconfirmed again at most an
// eighth of an AckWait and a tick later, so a stretch longer than three
// quarters of an AckWait without one that the
// keep-alive then ended with an InProgress (longest, from between; seen
// on the test's connection) means the process was starved, as under CI
// load, which eats the quarter AckWait the schedule leaves. The one-call
// checks are then skipped; the InProgress count has already shown the
// keep-alive ran. A redelivery with every stretch within the schedule
// still fails, and so does one after a keep-alive that stopped for good
// (no InProgress after its last stretch).
func starved(t *testing.T, ackWait, longest time.Duration) bool {
	t.Helper()
	if longest <= ackWait*3/4 {
		return false
	}
	t.Logf("redelivered after %s without an InProgress (AckWait %s): the process was starved; the one-call checks are skipped", longest, ackWait)
	return true
}
