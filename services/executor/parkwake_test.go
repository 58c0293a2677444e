package executor

import (
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestParkedDispatchWakesWhenItsTaskChanges: three host-scoped tasks
// have a dispatch each parked behind their host's open breaker, retryAt
// an hour away. One is switched to scope: task, one pointed at another
// host, one deleted: each dispatch is checked again at once, against the
// spec as it is now, not at the old breaker's retryAt. Before, only a
// change of the old breaker's record woke them: the moved tasks' runs
// waited for the hour, holding the task's one DISPATCH slot, and the
// deleted task's run kept a task created again under its ID from being
// dispatched.
func TestParkedDispatchWakesWhenItsTaskChanges(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	created := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	retryAt := time.Now().Add(time.Hour).UTC()
	put := func(spec events.TaskSpec, at time.Time) {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, spec.ID, governor.StoredSpec{TaskSpec: &spec, CreatedAt: at})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, spec.ID, map[string]any{"taskId": spec.ID, "nextRunAt": retryAt, "createdAt": at})
	}
	hostScoped := func(id string) events.TaskSpec {
		spec := target.spec(id)
		spec.Breaker.Scope = "host"
		return spec
	}
	ids := []string{"to-task", "to-host", "deleted"}
	for _, id := range ids {
		put(hostScoped(id), created)
	}
	host := hostScoped(ids[0])
	key := BreakerKey(&host)
	ex := startExecutor(t, srv, newLogLines())
	putBreakerSeen(t, srv.JS, ex, key, BreakerRecord{
		Key: key, State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(time.Hour), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
	})
	natstest.Eventually(t, 10*time.Second, "the executor's view holds the specs", func() bool {
		for _, id := range ids {
			if !ex.specs.Lookup(id).Found {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		dispatchOf(t, srv.JS, id, created)
	}
	natstest.Eventually(t, 10*time.Second, "the three dispatches parked behind the host breaker", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred) == 3
	})

	// scope: host → scope: task (the task's own breaker is closed).
	put(target.spec("to-task"), created)
	// Another host: "localhost" is not 127.0.0.1, the same server.
	moved := hostScoped("to-host")
	u, err := url.Parse(moved.Target.HTTP.URL)
	if err != nil {
		t.Fatal(err)
	}
	moved.Target.HTTP.URL = "http://localhost:" + u.Port() + "/to-host"
	if k := BreakerKey(&moved); k == key {
		t.Fatalf("the moved task keys its breaker %s, the old host's", k)
	}
	put(moved, created)
	// Deleted.
	kv, err := srv.JS.KeyValue(t.Context(), streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), "deleted"); err != nil {
		t.Fatal(err)
	}

	for _, id := range ids[:2] {
		if got, run := outcomeOf(t, srv.JS, id); got != events.OutcomeSucceeded || target.of(id) != 1 {
			t.Errorf("%s: run.%s (%q), %d calls; want one call, succeeded, at once: its spec no longer keys the open host breaker", id, got, run.Reason, target.of(id))
		}
	}
	if got, run := outcomeOf(t, srv.JS, "deleted"); got != events.OutcomeSkipped || run.Reason != "task deleted" {
		t.Errorf("deleted: run.%s (%q), want run.skipped (\"task deleted\") at once", got, run.Reason)
	}
	natstest.Eventually(t, 10*time.Second, "no dispatch parked", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred) == 0
	})

	// Created again under the same ID, on another host: its DISPATCH
	// subject is free, and its run calls.
	again := created.Add(time.Minute)
	recreated := hostScoped("deleted")
	recreated.Target.HTTP.URL = "http://localhost:" + u.Port() + "/deleted"
	put(recreated, again)
	natstest.Eventually(t, 10*time.Second, "the executor's view holds the new spec", func() bool {
		r := ex.specs.Lookup("deleted")
		return r.Found && r.Value.createdAt.Equal(again)
	})
	dispatchOf(t, srv.JS, "deleted", again)
	natstest.Eventually(t, 20*time.Second, "the task created again called", func() bool {
		_, ok := lastRun(t, srv.JS, events.OutcomeSucceeded, "deleted")
		return ok && target.of("deleted") == 1
	})
}
