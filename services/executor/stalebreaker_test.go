package executor

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestBreakerOfADeletedTaskIsNotApplied: task "again" was deleted with
// its breaker open and created again while the breaker service was not
// watching, so the old task's record (naming the old taskCreatedAt)
// stayed. The executor applied it to the new task's calls and deferred
// each until the old retryAt, and no outcome came for the breaker
// service to start the new task's breaker closed. The executor now calls
// through a task-scoped record naming another createdAt than the
// dispatch's, and still defers under the task's own record, one naming
// no task, and a host breaker, whichever task opened it.
func TestBreakerOfADeletedTaskIsNotApplied(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	old := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cur := old.Add(time.Minute)
	retryAt := time.Now().Add(time.Hour).UTC()
	cases := []struct {
		id        string
		host      bool
		recordFor time.Time // the taskCreatedAt its breaker record names
		calls     bool
	}{
		{id: "again", recordFor: old, calls: true},
		{id: "own", recordFor: cur},
		{id: "legacy"},
		{id: "shared", host: true, recordFor: old},
	}
	keys := make([]string, len(cases))
	for i, c := range cases {
		spec := target.spec(c.id)
		if c.host {
			spec.Breaker.Scope = "host"
		}
		keys[i] = BreakerKey(&spec)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, governor.StoredSpec{TaskSpec: &spec, CreatedAt: cur})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, c.id, map[string]any{"taskId": c.id, "nextRunAt": retryAt, "createdAt": cur})
		natstest.PutJSON(t, srv.JS, streams.BucketBreakers, keys[i], BreakerRecord{
			Key: keys[i], State: events.BreakerOpen, Failures: 1, OpenDelay: events.Duration(time.Hour),
			RetryAt: retryAt, UpdatedAt: time.Now().UTC(), TaskCreatedAt: c.recordFor,
		})
	}
	ex := startExecutor(t, srv, newLogLines())
	natstest.Eventually(t, 10*time.Second, "the executor's view holds the breaker records", func() bool {
		for _, k := range keys {
			if !ex.breakers.Lookup(k).Found {
				return false
			}
		}
		return true
	})
	for _, c := range cases {
		dispatchOf(t, srv.JS, c.id, cur)
	}
	if got, run := outcomeOf(t, srv.JS, "again"); got != events.OutcomeSucceeded || target.of("again") != 1 {
		t.Fatalf("the task created again: run.%s (%q), %d calls; want one call, succeeded: the old task's breaker is not its own", got, run.Reason, target.of("again"))
	}
	natstest.Eventually(t, 10*time.Second, "the three other dispatches deferred", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred) == 3
	})
	for _, c := range cases[1:] {
		if n := target.of(c.id); n != 0 {
			t.Errorf("%s: %d calls through its open breaker, want none", c.id, n)
		}
	}
}
