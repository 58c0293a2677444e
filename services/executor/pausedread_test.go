package executor

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestPausedTaskIsNotCalledWhileItsScheduleCannotBeRead: a dispatch of a
// paused task (a key in flyball-pauses) whose schedule cannot be read
// (flyball-schedules electing a leader, a Get timing out) is tried again
// in place, without calling its target. An unreadable schedule read as
// "not paused", and the target was called during the pause. Once the
// schedule reads again, the run is skipped as paused.
func TestPausedTaskIsNotCalledWhileItsScheduleCannotBeRead(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	kv := &failGetKV{}
	kv.fail.Store(true)
	f := newTunedAttemptsFixture(t, target, 1, 0, 0, func(s *Service) {
		kv.KeyValue = s.schedules
		s.schedules = kv
		s.infraRetryFirst, s.infraRetryMax = 100*time.Millisecond, 250*time.Millisecond
	})
	natstest.PutJSON(t, f.srv.JS, streams.BucketSchedules, f.id, map[string]any{"paused": true})
	natstest.PutJSON(t, f.srv.JS, streams.BucketPauses, f.id, map[string]any{"taskId": f.id})
	natstest.Eventually(t, 10*time.Second, "the executor's view holds the pause key", func() bool {
		return f.ex.pauses.Lookup(f.id).Found
	})
	seq := f.dispatch(t)
	natstest.Eventually(t, 20*time.Second, "three failed reads of the paused task's schedule, or a call", func() bool {
		return kv.refused.Load() >= 3 || len(target.attempts()) > 0
	})
	if calls := target.attempts(); len(calls) != 0 {
		t.Fatalf("paused task called while its schedule could not be read: calls %v, RUNS holds %v", calls, f.stored(t))
	}
	kv.fail.Store(false)
	natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
	if calls := target.attempts(); len(calls) != 0 {
		t.Fatalf("paused task called: %v", calls)
	}
	if got := f.stored(t); !slices.ContainsFunc(got, func(r storedRun) bool { return r.outcome == "skipped" }) {
		t.Fatalf("RUNS holds %v, want a run.skipped", got)
	}
}
