package sweeper

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
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
	ctx := t.Context()
	breakers, m, logs := sweepHostBreakers(t, "live", "https://live.example/health", "host_live_example", "host_gone_example")
	natstest.Eventually(t, 10*time.Second, "the host breaker no task uses is forgotten", func() bool {
		_, err := breakers.Get(ctx, "host_gone_example")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	// Said as what it is: it was no task's state, and "removed state of a
	// deleted task" sent an operator looking for a task that never was.
	removed := logs.named("removed a host breaker that no task names")
	if len(removed) != 1 || removed[0].attrs["key"] != "host_gone_example" {
		t.Errorf("logged %+v, want one record naming key host_gone_example", removed)
	}
	if wrong := logs.named("removed state of a deleted task"); len(wrong) != 0 {
		t.Errorf("a host breaker logged as a deleted task's state: %+v", wrong)
	}
	if _, err := breakers.Get(ctx, "host_live_example"); err != nil {
		t.Fatalf("the host breaker a task uses: %v, want it kept", err)
	}
	natstest.Eventually(t, 10*time.Second, "flyball_breakers_open counts only the breaker a task uses", func() bool {
		return testutil.ToFloat64(m.BreakersOpen) == 1
	})
}

// TestOwnRecordOfAHostScopedTaskIsDeleted: task "moved" switched to
// breaker.scope: host with its own record open. The breaker service
// deletes that record when its watch sees the switch; a switch made while
// it was down (or a delete that lost a race) left the record, half-open
// for good once its retryAt passed: the spec exists, so the sweeper never
// removed it and counted it in flyball_breakers_open at every sweep. The
// sweeper now deletes a task's own record (on the revision it read) once
// its spec is host-scoped, and keeps a task-scoped task's.
func TestOwnRecordOfAHostScopedTaskIsDeleted(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks := bucket(t, srv.JS, streams.BucketTasks)
	breakers := bucket(t, srv.JS, streams.BucketBreakers)
	for id, scope := range map[string]string{"moved": "host", "kept": "task"} {
		spec, _ := json.Marshal(events.TaskSpec{
			ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
			Target:  events.Target{HTTP: &events.HTTPTarget{URL: "https://" + id + ".example/health"}},
			Breaker: &events.BreakerPolicy{Scope: scope},
		})
		if _, err := tasks.Put(ctx, id, spec); err != nil {
			t.Fatal(err)
		}
		putHalfOpen(t, breakers, id, time.Now().UTC())
	}
	s, m := startSweeping(t, srv.JS)
	natstest.Eventually(t, 10*time.Second, "the own record of a task switched to scope host is deleted", func() bool {
		_, err := breakers.Get(ctx, "moved")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := breakers.Get(ctx, "kept"); err != nil {
		t.Fatalf("the record of a task-scoped task: %v, want it kept", err)
	}
	natstest.Eventually(t, 10*time.Second, "flyball_breakers_open counts only the task-scoped task's breaker", func() bool {
		return testutil.ToFloat64(m.BreakersOpen) == 1
	})
	// The sweeper logs the removal after the delete the first wait saw.
	const removed = "removed the own breaker record of a task switched to breaker scope host"
	natstest.Eventually(t, 10*time.Second, "the removal is logged", func() bool {
		return len(logsOf(s).named(removed)) > 0
	})
	if got := logsOf(s).named(removed); len(got) != 1 || got[0].attrs["key"] != "moved" {
		t.Errorf("logged %+v, want one record naming key moved", got)
	}
}

// TestBreakerRecordOfATaskCreatedAgainIsDeleted: task "again" was
// deleted with its breaker open and created again while the breaker
// service was not watching (down, or its watch ended by a reconnect), so
// the old task's record stayed. A spec of that ID exists, so the sweeper
// never judged the record an orphan: it counted it in
// flyball_breakers_open at every sweep, and the executor deferred the new
// task's calls until the old retryAt. The sweeper now deletes a
// task-scoped record naming another createdAt than the spec's (on the
// revision it read), and keeps the record of the task the spec is, one
// naming no task (written before 2026-11-29), and a host breaker.
func TestBreakerRecordOfATaskCreatedAgainIsDeleted(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks := bucket(t, srv.JS, streams.BucketTasks)
	breakers := bucket(t, srv.JS, streams.BucketBreakers)
	old := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	cur := old.Add(30 * time.Minute)
	for _, c := range []struct {
		id, scope       string
		recordCreatedAt time.Time
	}{
		{"again", "task", old}, // the deleted task's, left behind
		{"same", "task", cur},  // the task's own
		{"legacy", "task", time.Time{}},
		{"shared", "host", old},
	} {
		spec, _ := json.Marshal(gov.StoredSpec{TaskSpec: &events.TaskSpec{
			ID: c.id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
			Target:  events.Target{HTTP: &events.HTTPTarget{URL: "https://" + c.id + ".example/health"}},
			Breaker: &events.BreakerPolicy{Scope: c.scope},
		}, CreatedAt: cur})
		if _, err := tasks.Put(ctx, c.id, spec); err != nil {
			t.Fatal(err)
		}
		key := c.id
		if c.scope == "host" {
			key = "host_shared_example"
		}
		putHalfOpenOf(t, breakers, key, time.Now().UTC(), c.recordCreatedAt)
	}
	s, m := startSweeping(t, srv.JS)
	natstest.Eventually(t, 10*time.Second, "the record of the deleted task of the same ID is deleted", func() bool {
		_, err := breakers.Get(ctx, "again")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	for _, key := range []string{"same", "legacy", "host_shared_example"} {
		if _, err := breakers.Get(ctx, key); err != nil {
			t.Fatalf("the record %s: %v, want it kept", key, err)
		}
	}
	natstest.Eventually(t, 10*time.Second, "flyball_breakers_open counts the three other breakers", func() bool {
		return testutil.ToFloat64(m.BreakersOpen) == 3
	})
	const removed = "removed the breaker record of a deleted task of the same ID"
	natstest.Eventually(t, 10*time.Second, "the removal is logged", func() bool {
		return len(logsOf(s).named(removed)) > 0
	})
	if got := logsOf(s).named(removed); len(got) != 1 || got[0].attrs["key"] != "again" {
		t.Errorf("logged %+v, want one record naming key again", got)
	}
}

// putHalfOpen stores a half-open breaker record under key, written at.
func putHalfOpen(t *testing.T, breakers jetstream.KeyValue, key string, at time.Time) {
	t.Helper()
	putHalfOpenOf(t, breakers, key, at, time.Time{})
}

// putHalfOpenOf stores a half-open breaker record under key, written at,
// counting the outcomes of the task created at created (zero: it names
// none).
func putHalfOpenOf(t *testing.T, breakers jetstream.KeyValue, key string, at, created time.Time) {
	t.Helper()
	b, err := json.Marshal(executor.BreakerRecord{
		Key: key, State: events.BreakerHalfOpen, Failures: 3,
		OpenDelay: events.Duration(5 * time.Second), RetryAt: at, UpdatedAt: at, TaskCreatedAt: created,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := breakers.Put(t.Context(), key, b); err != nil {
		t.Fatal(err)
	}
}

// startSweeping starts a sweeper that sweeps every 50 ms, stopped in
// t.Cleanup, and returns it and its metrics; logsOf(s) has what it
// logged.
func startSweeping(t *testing.T, js jetstream.JetStream) (*Service, *metrics.Set) {
	t.Helper()
	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{JS: js, Metrics: m, Logger: slog.New(&records{})}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, m
}

// logsOf is what a sweeper of startSweeping logged.
func logsOf(s *Service) *records { return s.cfg.Logger.Handler().(*records) }

// TestHostBreakerUnderItsOldPortOrUnderscoreKeyIsDeleted: a host's
// breaker key has changed, and the record under its old key is no task's
// breaker any more: the sweeper must delete it once idle, as any host
// breaker no task uses, and keep the new one. The old keys:
//   - the raw URL host (https://API.example.com:443:
//     host_API_example_com_443), now the canonical host
//     (host_api_example_com);
//   - an internationalized host's Unicode name, each non-ASCII byte an
//     '_' (https://bücher.example: host_b__cher_example), now its
//     punycode (host_xn--bcher-kva_example);
//   - a host with a port (host_api_example_com_8443) or an '_'
//     (host_a_b_example_com), a key another host shared, now
//     host_api_example_com_P8443 and a hash for '_'.
//
// The first two rows were tests of their own, and their subtests keep
// those names.
func TestHostBreakerUnderItsOldPortOrUnderscoreKeyIsDeleted(t *testing.T) {
	for _, c := range []struct{ name, id, url, old, key string }{
		{"TestHostBreakerUnderAnOldSpellingIsDeleted", "api", "https://API.example.com:443/health", "host_API_example_com_443", "host_api_example_com"},
		{"TestIDNHostBreakerUnderItsOldKeyIsDeleted", "idn", "https://bücher.example/health", "host_b__cher_example", "host_xn--bcher-kva_example"},
		{"host_api_example_com_8443", "h", "https://api.example.com:8443/health", "host_api_example_com_8443", "host_api_example_com_P8443"},
		{"host_a_b_example_com", "h", "https://a_b.example.com/health", "host_a_b_example_com", "host_a_b_example_com-Hc91c532ecff4d5e8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			breakers, _, _ := sweepHostBreakers(t, c.id, c.url, c.old, c.key)
			if _, err := breakers.Get(ctx, c.old); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("the record under the old key %s after 3 sweeps: %v, want it deleted", c.old, err)
			}
			if _, err := breakers.Get(ctx, c.key); err != nil {
				t.Fatalf("the record under the new key %s: %v, want it kept", c.key, err)
			}
		})
	}
}

// TestHostBreakerUnderAnOldKeyStillWrittenIsKept: while old and new
// executors both run, an old one still writes the host's breaker under
// its old key (host_api_example_com_8443). No task names that key on the
// new code, but the sweeper deletes a host breaker only once it has not
// been written for 10 minutes: a record under an old key written a
// minute ago must outlive the sweeps (and is counted in
// flyball_breakers_open while open), while one written an hour ago is
// deleted.
func TestHostBreakerUnderAnOldKeyStillWrittenIsKept(t *testing.T) {
	ctx := t.Context()
	now := time.Now().UTC()
	const recent, idle, key = "host_api_example_com_8443", "host_a_b_example_com", "host_api_example_com_P8443"
	breakers, m, _ := sweepHostBreakersWritten(t, "h", "https://api.example.com:8443/health", map[string]time.Time{
		key: now.Add(-time.Hour), recent: now.Add(-time.Minute), idle: now.Add(-time.Hour),
	})
	if _, err := breakers.Get(ctx, recent); err != nil {
		t.Fatalf("the record under the old key %s, written a minute ago, after 3 sweeps: %v, want it kept", recent, err)
	}
	if _, err := breakers.Get(ctx, idle); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the record under the old key %s, written an hour ago, after 3 sweeps: %v, want it deleted", idle, err)
	}
	if _, err := breakers.Get(ctx, key); err != nil {
		t.Fatalf("the record under the new key %s: %v, want it kept", key, err)
	}
	if got := testutil.ToFloat64(m.BreakersOpen); got != 2 {
		t.Errorf("flyball_breakers_open = %v, want 2: the new key's and the old key's still written", got)
	}
}

// sweepHostBreakers stores task id, host-scoped on url, and a half-open
// record written an hour ago under each key, then starts a sweeper and
// waits for three sweeps.
func sweepHostBreakers(t *testing.T, id, url string, keys ...string) (jetstream.KeyValue, *metrics.Set, *records) {
	t.Helper()
	long := time.Now().UTC().Add(-time.Hour) // written an hour ago
	written := make(map[string]time.Time, len(keys))
	for _, key := range keys {
		written[key] = long
	}
	return sweepHostBreakersWritten(t, id, url, written)
}

// sweepHostBreakersWritten is sweepHostBreakers with a half-open record
// under each key of written, written at its time.
func sweepHostBreakersWritten(t *testing.T, id, url string, written map[string]time.Time) (jetstream.KeyValue, *metrics.Set, *records) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks := bucket(t, srv.JS, streams.BucketTasks)
	breakers := bucket(t, srv.JS, streams.BucketBreakers)
	spec, _ := json.Marshal(events.TaskSpec{
		ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
		Target:  events.Target{HTTP: &events.HTTPTarget{URL: url}},
		Breaker: &events.BreakerPolicy{Scope: "host"},
	})
	if _, err := tasks.Put(ctx, id, spec); err != nil {
		t.Fatal(err)
	}
	for key, at := range written {
		putHalfOpen(t, breakers, key, at)
	}
	s, m := startSweeping(t, srv.JS)
	for range 3 {
		select {
		case <-s.Swept():
		case <-time.After(30 * time.Second):
			t.Fatal("no sweep in 30s")
		}
	}
	return breakers, m, logsOf(s)
}

// TestBreakerOfAPausedTaskIsNotCounted: a paused task is not dispatched,
// so nothing probes its half-open breaker, which stays half-open for the
// whole pause. flyball_breakers_open counted it, and FlyballBreakerOpen
// fired until the task was resumed. A task's own breaker is counted only
// while the task is not paused (a timed pause that has ended no longer
// counts as one), and a host breaker only while a task that uses it is
// not paused.
func TestBreakerOfAPausedTaskIsNotCounted(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, schedules := taskBuckets(t, srv.JS)
	breakers := bucket(t, srv.JS, streams.BucketBreakers)
	now := time.Now().UTC()
	for _, c := range []struct {
		id, host, scope string
		paused          bool
		until           time.Time
	}{
		{"paused", "p", "task", true, time.Time{}},
		{"running", "r", "task", false, time.Time{}},
		{"pause-ended", "e", "task", true, now.Add(-time.Minute)},
		{"a1", "a", "host", true, time.Time{}},
		{"a2", "a", "host", true, now.Add(time.Hour)},
		{"b1", "b", "host", true, time.Time{}},
		{"b2", "b", "host", false, time.Time{}},
	} {
		spec, _ := json.Marshal(events.TaskSpec{
			ID: c.id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
			Target:  events.Target{HTTP: &events.HTTPTarget{URL: "https://" + c.host + ".example/health"}},
			Breaker: &events.BreakerPolicy{Scope: c.scope},
		})
		if _, err := tasks.Put(ctx, c.id, spec); err != nil {
			t.Fatal(err)
		}
		st, _ := json.Marshal(schedule{
			// Due: a half-open breaker none of whose tasks has a run due is
			// not counted (TestHalfOpenBreakerWithNoRunDueIsNotCounted).
			TaskID: c.id, NextRunAt: now, Paused: c.paused, PausedUntil: c.until,
			CreatedAt: now, LastScheduledAt: now, LastSuccessAt: now,
		})
		if _, err := schedules.Put(ctx, c.id, st); err != nil {
			t.Fatal(err)
		}
		if c.scope == "task" {
			putHalfOpen(t, breakers, c.id, now)
		}
	}
	putHalfOpen(t, breakers, "host_a_example", now)
	putHalfOpen(t, breakers, "host_b_example", now)
	s, m := startSweeping(t, srv.JS)
	for range 2 {
		select {
		case <-s.Swept():
		case <-time.After(30 * time.Second):
			t.Fatal("no sweep in 30s")
		}
	}
	// running, pause-ended and host_b_example (b2 is not paused).
	if got := testutil.ToFloat64(m.BreakersOpen); got != 3 {
		t.Errorf("flyball_breakers_open = %v, want 3: the breakers of paused tasks not counted", got)
	}
}

// TestHalfOpenBreakerWithNoRunDueIsNotCounted: an hourly task whose last
// attempt re-opened its breaker turns half-open at retryAt and stays so
// until its next run, 50 minutes on: nothing is held back, the next call
// is the probe. flyball_breakers_open counted it, and FlyballBreakerOpen
// fired for as long. A half-open breaker counts only while a task of it
// has a run due (the probe pending or in flight); an open one counts
// whatever the runs.
func TestHalfOpenBreakerWithNoRunDueIsNotCounted(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, schedules := taskBuckets(t, srv.JS)
	breakers := bucket(t, srv.JS, streams.BucketBreakers)
	now := time.Now().UTC()
	later := now.Add(50 * time.Minute)
	for _, c := range []struct {
		id, host, scope string
		next            time.Time
	}{
		{"later", "l", "task", later}, // half-open, not counted
		{"due", "d", "task", now},     // half-open, its probe due
		{"open", "o", "task", later},  // open: counted
		{"h1", "h", "host", later},    // a host breaker none of whose tasks is due
		{"h2", "h", "host", later},
		{"g1", "g", "host", later}, // one of whose tasks is due
		{"g2", "g", "host", now},
	} {
		spec, _ := json.Marshal(events.TaskSpec{
			ID: c.id, Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
			Target:  events.Target{HTTP: &events.HTTPTarget{URL: "https://" + c.host + ".example/health"}},
			Breaker: &events.BreakerPolicy{Scope: c.scope},
		})
		if _, err := tasks.Put(ctx, c.id, spec); err != nil {
			t.Fatal(err)
		}
		st, _ := json.Marshal(schedule{TaskID: c.id, NextRunAt: c.next, CreatedAt: now, LastScheduledAt: now, LastSuccessAt: now})
		if _, err := schedules.Put(ctx, c.id, st); err != nil {
			t.Fatal(err)
		}
	}
	putHalfOpen(t, breakers, "later", now.Add(-time.Minute))
	putHalfOpen(t, breakers, "due", now.Add(-time.Minute))
	putHalfOpen(t, breakers, "host_h_example", now.Add(-time.Minute))
	putHalfOpen(t, breakers, "host_g_example", now.Add(-time.Minute))
	open, _ := json.Marshal(executor.BreakerRecord{
		Key: "open", State: events.BreakerOpen, Failures: 3,
		OpenDelay: events.Duration(time.Hour), RetryAt: later, UpdatedAt: now,
	})
	if _, err := breakers.Put(ctx, "open", open); err != nil {
		t.Fatal(err)
	}
	s, m := startSweeping(t, srv.JS)
	for range 2 {
		select {
		case <-s.Swept():
		case <-time.After(30 * time.Second):
			t.Fatal("no sweep in 30s")
		}
	}
	// due, open and host_g_example.
	if got := testutil.ToFloat64(m.BreakersOpen); got != 3 {
		t.Errorf("flyball_breakers_open = %v, want 3: a half-open breaker none of whose tasks has a run due not counted", got)
	}
}

// reopeningBreakers is flyball-breakers as the sweeper reads it, with
// the host breaker under key opened again (fresh updatedAt) by a new
// task's failures right before the sweeper deletes it: after the sweep
// judged it an orphan, idle and named by no task, on the record its
// watch had seen.
type reopeningBreakers struct {
	jetstream.KeyValue
	key    string
	reopen func()
}

func (k *reopeningBreakers) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if key == k.key && k.reopen != nil {
		k.reopen()
		k.reopen = nil
	}
	return k.KeyValue.Delete(ctx, key, opts...)
}

// TestHostBreakerOpenedAfterTheOrphanJudgementIsKept: the sweeper judged
// a host breaker an orphan on its view (no task names the host, not
// written for 10 minutes), then read the record again and deleted that
// revision: the only check between was the spec of a task named
// host_…, always missing. A record opened meanwhile (a new task naming
// the host, its spec not yet in the sweeper's view, failing) was deleted:
// the executor saw a closed breaker and sent full traffic at the failing
// host, and no breaker.closed was published. The sweeper deletes only
// the revision it judged.
func TestHostBreakerOpenedAfterTheOrphanJudgementIsKept(t *testing.T) {
	s := unstartedSweeper(t)
	runCtx, err := s.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	ctx := t.Context()
	now := time.Now().UTC()
	const key = "host_flaky_example"
	putHalfOpen(t, s.breakers, key, now.Add(-time.Hour)) // idle, and no task names it
	if err := s.watchAll(runCtx); err != nil {
		t.Fatal(err)
	}
	s.view.ready.Wait() // the view holds the idle record
	breakers := s.breakers
	s.breakers = &reopeningBreakers{KeyValue: breakers, key: key, reopen: func() {
		b, _ := json.Marshal(executor.BreakerRecord{
			Key: key, State: events.BreakerOpen, Failures: 5,
			OpenDelay: events.Duration(time.Minute), RetryAt: now.Add(time.Minute), UpdatedAt: now,
		})
		if _, err := breakers.Put(ctx, key, b); err != nil {
			t.Error(err)
		}
	}}
	s.sweepTasks(ctx, now)
	e, err := breakers.Get(ctx, key)
	if err != nil {
		t.Fatalf("the host breaker opened after the sweep judged it an orphan was deleted (%v): the executor sees it closed", err)
	}
	b, err := executor.DecodeBreaker(key, e.Value())
	if err != nil || b.State != events.BreakerOpen {
		t.Fatalf("host breaker after the sweep = %s (%v), want the record opened again", e.Value(), err)
	}
}
