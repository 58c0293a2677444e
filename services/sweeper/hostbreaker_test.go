package sweeper

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestHostBreakerNoTaskUsesIsForgotten: a host breaker outlives its
// tasks (deleted, moved to another host or to scope task). Left open, it
// turned half-open at retryAt and stayed so for good: no task was left
// to probe it, flyball_breakers_open counted it at every sweep, and
// FlyballBreakerOpen fired until someone deleted the key by hand. The
// sweeper must forget a host breaker no task uses any more, once it has
// not been written for a while, and keep one a task still uses.
func TestHostBreakerNoTaskUsesIsForgotten(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	breakers, err := srv.JS.KeyValue(ctx, streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(events.TaskSpec{
		ID: "live", Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
		Target:  events.Target{HTTP: &events.HTTPTarget{URL: "https://live.example/health"}},
		Breaker: &events.BreakerPolicy{Scope: "host"},
	})
	if _, err := tasks.Put(ctx, "live", spec); err != nil {
		t.Fatal(err)
	}
	long := time.Now().UTC().Add(-time.Hour) // written an hour ago
	for _, key := range []string{"host_live_example", "host_gone_example"} {
		b, _ := json.Marshal(executor.BreakerRecord{
			Key: key, State: events.BreakerHalfOpen, Failures: 3,
			OpenDelay: events.Duration(5 * time.Second), RetryAt: long, UpdatedAt: long,
		})
		if _, err := breakers.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS, Metrics: m}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	for range 3 {
		select {
		case <-s.Swept():
		case <-time.After(30 * time.Second):
			t.Fatal("no sweep in 30s")
		}
	}
	natstest.Eventually(t, 10*time.Second, "the host breaker no task uses is forgotten", func() bool {
		_, err := breakers.Get(ctx, "host_gone_example")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := breakers.Get(ctx, "host_live_example"); err != nil {
		t.Fatalf("the host breaker a task uses: %v, want it kept", err)
	}
	natstest.Eventually(t, 10*time.Second, "flyball_breakers_open counts only the breaker a task uses", func() bool {
		return testutil.ToFloat64(m.BreakersOpen) == 1
	})
}

// TestOwnRecordOfAHostScopedTaskIsPurged: task "moved" switched to
// breaker.scope: host with its own record open. The breaker service
// deletes that record when its watch sees the switch; a switch made while
// it was down (or a delete that lost a race) left the record, half-open
// for good once its retryAt passed: the spec exists, so the sweeper never
// purged it and counted it in flyball_breakers_open at every sweep. The
// sweeper now purges a task's own record once its spec is host-scoped,
// and keeps a task-scoped task's.
func TestOwnRecordOfAHostScopedTaskIsPurged(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	breakers, err := srv.JS.KeyValue(ctx, streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	for id, scope := range map[string]string{"moved": "host", "kept": "task"} {
		spec, _ := json.Marshal(events.TaskSpec{
			ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
			Target:  events.Target{HTTP: &events.HTTPTarget{URL: "https://" + id + ".example/health"}},
			Breaker: &events.BreakerPolicy{Scope: scope},
		})
		if _, err := tasks.Put(ctx, id, spec); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		b, _ := json.Marshal(executor.BreakerRecord{
			Key: id, State: events.BreakerHalfOpen, Failures: 3,
			OpenDelay: events.Duration(5 * time.Second), RetryAt: now, UpdatedAt: now,
		})
		if _, err := breakers.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS, Metrics: m}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	natstest.Eventually(t, 10*time.Second, "the own record of a task switched to scope host is purged", func() bool {
		_, err := breakers.Get(ctx, "moved")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := breakers.Get(ctx, "kept"); err != nil {
		t.Fatalf("the record of a task-scoped task: %v, want it kept", err)
	}
	natstest.Eventually(t, 10*time.Second, "flyball_breakers_open counts only the task-scoped task's breaker", func() bool {
		return testutil.ToFloat64(m.BreakersOpen) == 1
	})
}
