package executor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestAnExecutorAheadOfTheServerRunsOnTimeSlotsUnderCatchUpNone: the
// governor plans slots on the NATS server's clock (the stored time of its
// inputs), and the executor judged a catchUp "none" slot missed on its own
// clock. An executor 1.3 s ahead of the server saw every on-time slot of a
// 1 s task as late by 1.3 s, past the next slot, and skipped it as
// "missed": the task never ran while the skew lasted. Judged on the
// server's clock (the executor's less the offset its heartbeat measured),
// an on-time slot runs, and a slot truly missed is still skipped.
func TestAnExecutorAheadOfTheServerRunsOnTimeSlotsUnderCatchUpNone(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	const ahead = 1300 * time.Millisecond // the executor's clock minus the server's
	for _, id := range []string{"on-time", "missed"} {
		spec := target.spec(id)
		spec.Schedule.Interval = events.Duration(time.Second)
		spec.CatchUp = events.CatchUpNone
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, governor.StoredSpec{TaskSpec: &spec})
	}
	startSkewedExecutor(t, srv, newLogLines(), ahead)
	// The test's clock is the server's and the executor's both: a slot
	// fired on time, as the executor 1.3 s ahead sees it, is 1.3 s behind
	// its clock. The missed one is 5 intervals ago on the server's clock.
	now := time.Now().UTC().Truncate(time.Millisecond)
	slots := map[string]time.Time{"on-time": now.Add(-ahead), "missed": now.Add(-ahead - 5*time.Second)}
	for id, slot := range slots {
		publishDispatchAt(t, srv, id, slot, time.Now().UTC())
	}
	if got, run := outcomeOf(t, srv.JS, "on-time"); got != events.OutcomeSucceeded || target.of("on-time") != 1 {
		t.Errorf("on-time slot seen by an executor %s ahead: run.%s (reason %q), %d calls; want it called", ahead, got, run.Reason, target.of("on-time"))
	}
	if got, run := outcomeOf(t, srv.JS, "missed"); got != events.OutcomeSkipped || target.of("missed") != 0 {
		t.Errorf("slot missed by 5 intervals on the server's clock: run.%s (reason %q), %d calls; want it skipped", got, run.Reason, target.of("missed"))
	}
}

// TestAnExecutorBehindTheServerCallsOnTimeDispatches: the governor plans
// slots on the NATS server's clock, and the executor judged a dispatch
// "ahead" (more than MaxDispatchAhead) and waited for its slot on its own.
// An executor 10 minutes behind the server terminated every on-time
// dispatch as "malformed dispatch: scheduledAt ... is 10m0s ahead, more
// than 5m0s": its target was never called, and no run event was written.
// Judged and waited on the server's clock (serverClock), an on-time slot is
// called, one due in a moment is held until the server's clock reaches it,
// and one truly more than 5 minutes ahead of the server is still
// terminated. The runs are stamped on the server's clock too (stamp): by
// its own, each started and finished 10 minutes before its slot, and the
// governor ignored such an outcome as outdated.
func TestAnExecutorBehindTheServerCallsOnTimeDispatches(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	logs := newLogLines()
	const behind = -10 * time.Minute // the executor's clock minus the server's
	for _, id := range []string{"on-time", "soon", "far-ahead"} {
		spec := target.spec(id)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, governor.StoredSpec{TaskSpec: &spec})
	}
	startSkewedExecutor(t, srv, logs, behind)
	// The test's clock is the executor's; the server's, as the executor
	// reads it, is 10 minutes later.
	server := time.Now().UTC().Add(-behind).Truncate(time.Millisecond)
	slots := map[string]time.Time{
		"on-time":   server,
		"soon":      server.Add(300 * time.Millisecond),
		"far-ahead": server.Add(MaxDispatchAhead + time.Minute),
	}
	for id, slot := range slots {
		publishDispatchAt(t, srv, id, slot, server)
	}
	publishDispatchAt(t, srv, "deleted", server, server) // no spec: skipped
	for _, id := range []string{"on-time", "soon"} {
		got, run := outcomeOf(t, srv.JS, id)
		if got != events.OutcomeSucceeded || target.of(id) != 1 {
			t.Errorf("%s dispatch seen by an executor %s behind the server: run.%s (reason %q), %d calls; want it called", id, -behind, got, run.Reason, target.of(id))
		}
		if run.StartedAt.Before(slots[id]) || run.FinishedAt.Before(run.StartedAt) || run.FinishedAt.Sub(run.StartedAt) != run.Duration.D() {
			t.Errorf("%s run of %s: started %s, finished %s, took %s; want it stamped on the server's clock, from its slot on", id, slots[id], run.StartedAt, run.FinishedAt, run.Duration)
		}
	}
	if got, run := outcomeOf(t, srv.JS, "deleted"); got != events.OutcomeSkipped || run.FinishedAt.Before(server) {
		t.Errorf("dispatch of a deleted task at %s: run.%s finished %s; want it skipped, stamped on the server's clock", server, got, run.FinishedAt)
	}
	natstest.Eventually(t, 10*time.Second, "the dispatch 6 minutes ahead of the server is terminated", func() bool {
		return logs.count("terminating malformed message") == 1
	})
	if n := target.of("far-ahead"); n != 0 {
		t.Errorf("dispatch 6 minutes ahead of the server: %d calls, want none", n)
	}
}

// TestADispatchAheadBeforeTheOffsetIsMeasuredIsJudgedAgain: right after
// a start, before its heartbeat has measured its clock's offset from the
// server's, an executor has only its own clock, and a restart's backlog
// arrives then. One 10 minutes behind the server terminated an on-time
// dispatch as more than 5 minutes ahead: the slot was lost. It hands the
// dispatch back to be judged again, on the server's clock once the
// offset is measured: the on-time one is called, and one truly more than
// 5 minutes ahead is terminated then.
func TestADispatchAheadBeforeTheOffsetIsMeasuredIsJudgedAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	logs := newLogLines()
	const behind = -10 * time.Minute // the executor's clock minus the server's
	for _, id := range []string{"on-time", "far-ahead"} {
		spec := target.spec(id)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, governor.StoredSpec{TaskSpec: &spec})
	}
	var measured atomic.Bool
	startExecutorWithOffset(t, srv, logs, func() (time.Duration, bool) { return behind, measured.Load() })
	server := time.Now().UTC().Add(-behind).Truncate(time.Millisecond)
	for id, slot := range map[string]time.Time{"on-time": server, "far-ahead": server.Add(MaxDispatchAhead + time.Minute)} {
		publishDispatchAt(t, srv, id, slot, server)
	}
	// Both handed back and delivered again while the offset is unknown.
	natstest.Eventually(t, 10*time.Second, "both dispatches delivered again before the offset is measured", func() bool {
		ci, err := srv.JS.Consumer(t.Context(), streams.StreamDispatch, streams.ConsumerExecutor)
		if err != nil {
			return false
		}
		info, err := ci.Info(t.Context())
		return err == nil && info.Delivered.Consumer >= 4
	})
	if n := logs.count("terminating malformed message"); n != 0 || target.of("on-time") != 0 {
		t.Fatalf("before the offset is measured: %d terminated, %d calls; want none", n, target.of("on-time"))
	}
	measured.Store(true)
	if got, run := outcomeOf(t, srv.JS, "on-time"); got != events.OutcomeSucceeded || target.of("on-time") != 1 {
		t.Errorf("on-time dispatch: run.%s (reason %q), %d calls; want it called once the offset is measured", got, run.Reason, target.of("on-time"))
	}
	natstest.Eventually(t, 10*time.Second, "the dispatch 6 minutes ahead of the server is terminated once the offset is measured", func() bool {
		return logs.count("terminating malformed message") == 1
	})
	if n := target.of("far-ahead"); n != 0 {
		t.Errorf("dispatch 6 minutes ahead of the server: %d calls, want none", n)
	}
}

// startSkewedExecutor starts an executor on its own connection to srv
// whose heartbeat measured its clock offset from the server's (its clock
// minus the server's) as offset, logging to logs; it is stopped in
// t.Cleanup.
func startSkewedExecutor(t *testing.T, srv *natstest.Server, logs logLines, offset time.Duration) {
	t.Helper()
	startExecutorWithOffset(t, srv, logs, func() (time.Duration, bool) { return offset, true })
}

// startExecutorWithOffset starts an executor like startSkewedExecutor
// whose heartbeat's measurement is clockOffset.
func startExecutorWithOffset(t *testing.T, srv *natstest.Server, logs logLines, clockOffset func() (time.Duration, bool)) {
	t.Helper()
	nc, _ := srv.Connect(t)
	js, err := jsutil.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := New(Config{
		JS: js, Guard: Guard{AllowLoopback: true}, Logger: slog.New(logs), ShutdownGrace: time.Millisecond,
		ClockOffset: clockOffset,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
}

// publishDispatchAt publishes task id's dispatch of slot to DISPATCH, as
// a timer fires it at fired.
func publishDispatchAt(t *testing.T, srv *natstest.Server, id string, slot, fired time.Time) {
	t.Helper()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: fired, Source: string(governor.SourceBaselineInterval)}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, fired, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(context.Background(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
}
