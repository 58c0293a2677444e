package timer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestLatenessOfADispatchWhoseAckWasLostIsItsStoredTry: a first try is
// stored on time but its ack is lost (here: counted as timed out); the
// retry, a RetryDelay later, is answered duplicate. The try that was
// stored is the first, so flyball_dispatch_lateness_seconds records its
// lateness, not the retry's (which, after the 3 s ack timeout, was at
// least 3.25 s).
func TestLatenessOfADispatchWhoseAckWasLostIsItsStoredTry(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	s, err := New(Config{JS: srv.JS, Instance: "test", Metrics: metrics.New(), RetryDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(-time.Second).Truncate(time.Millisecond).UnixNano()
	s.upsert("a", slot, "x", 0, 0)
	first, _ := s.takeDue()
	if len(first) != 1 {
		t.Fatalf("took %d runs, want 1", len(first))
	}
	s.publishAll(first)
	select {
	case <-first[0].future.Ok():
	case err := <-first[0].future.Err():
		t.Fatalf("first try not stored: %v", err)
	case <-time.After(within):
		t.Fatal("no ack for the first try")
	}
	// Stored, but its ack never reached the timer.
	if s.settle(&first[0], nil, jsutil.ErrAckTimeout) {
		t.Fatal("a try whose ack timed out settled as stored")
	}
	var retry []dueRun
	natstest.Eventually(t, within, "the retry due", func() bool {
		retry, _ = s.takeDue()
		return len(retry) == 1
	})
	s.publishAll(retry)
	s.collect(context.Background(), retry)
	if r := results(s); r[resultDuplicate] != 1 || r[resultError] != 1 {
		t.Fatalf("results %v, want the ack timeout then a duplicate", r)
	}
	want := time.Duration(first[0].sent - first[0].planned)
	n, got := lateness(t, s)
	if d := got - want; n != 1 || d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("lateness: %d observations summing to %v; want 1 of %v (the first try, which was stored), not %v (the retry)",
			n, got, want, time.Duration(retry[0].sent-retry[0].planned))
	}
	// The task's next slot starts with no try behind it.
	s.upsert("a", slot+int64(time.Minute), "x", 0, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items["a"]; it.tried != 0 {
		t.Fatalf("next slot: item %+v, want no earlier try", it)
	}
}

// TestLatenessCountsFromTheScheduleWrite: a slot the governor writes for
// "now" (a run-now hint, a requeue, a catch-up or backfill run) cannot be
// published before the timer learns of it. The timer planned it its lead
// before the slot (1 s once the previous slot is 4 s back), and
// flyball_dispatch_lateness_seconds recorded every such dispatch as about
// 1 s late, enough to trip FlyballDispatchLate; a slot written 10 s after
// it passed was recorded 10 s late. Lateness now counts from the later of
// the plan and the schedule's write.
func TestLatenessCountsFromTheScheduleWrite(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	s := startTimer(t, srv.JS, nil)
	putSchedule(t, srv.JS, "task", time.Now().Add(-10*time.Second).UTC(), gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "the past slot stored", func() bool { return results(s)[resultNew] == 1 })
	n, first := lateness(t, s)
	if n != 1 || first > 500*time.Millisecond {
		t.Errorf("a slot written 10s after it: lateness %d observations summing to %v, want 1 of under 500ms (from the write)", n, first)
	}
	// The run finished: its dispatch leaves DISPATCH.
	st, err := srv.JS.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(t.Context(), jetstream.WithPurgeSubject(events.DispatchSubject("task"))); err != nil {
		t.Fatal(err)
	}
	putSchedule(t, srv.JS, "task", time.Now().UTC(), gov.SourceHintOneShot)
	natstest.Eventually(t, within, "the run-now slot stored", func() bool { return results(s)[resultNew] == 2 })
	n, sum := lateness(t, s)
	if late := sum - first; n != 2 || late > 500*time.Millisecond {
		t.Errorf("a slot written for now: lateness %v (%d observations), want under 500ms", late, n)
	}
}

// TestLatenessIsNotRecordedForAnotherTimersDispatch: a timer that starts
// (a restart, a lease takeover) publishes again the slots its predecessor
// dispatched within DISPATCH's 2-minute duplicate window, and each is
// answered duplicate. The new timer did not store them: their lateness is
// the old timer's (recorded there, on time), and the time of the copy,
// up to 2 minutes after its slot, is not it. It recorded them all the
// same, a p99 spike after every failover.
func TestLatenessIsNotRecordedForAnotherTimersDispatch(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	a := startTimer(t, srv.JS, nil)
	putSchedule(t, srv.JS, "task", time.Now().Add(-time.Second).UTC(), gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "timer a stores the slot", func() bool { return results(a)[resultNew] == 1 })
	if n, _ := lateness(t, a); n != 1 {
		t.Fatalf("timer a: lateness observed %d times for the dispatch it stored, want 1", n)
	}
	a.Stop()
	b := startTimer(t, srv.JS, nil)
	natstest.Eventually(t, within, "timer b publishes the slot again", func() bool {
		r := results(b)
		return r[resultDuplicate]+r[resultPending]+r[resultNew] >= 1
	})
	if r := results(b); r[resultDuplicate] != 1 {
		t.Fatalf("timer b: results %v, want the slot answered duplicate", r)
	}
	if n, sum := lateness(t, b); n != 0 {
		t.Fatalf("timer b: lateness observed %d times (summing to %v) for a dispatch timer a stored, want 0", n, sum)
	}
}
