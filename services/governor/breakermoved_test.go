package governor

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// breakerOpened publishes the breaker service's breaker.open of key,
// naming task id created at created, until retryAt, and waits until the
// governor has acked it.
func breakerOpened(t *testing.T, js jetstream.JetStream, key, id string, created, retryAt time.Time) {
	t.Helper()
	at := time.Now().UTC()
	tr := events.BreakerTransition{
		Key: key, TaskID: id, From: events.BreakerClosed, To: events.BreakerOpen, Failures: 3,
		RetryAt: &retryAt, OpenDelay: events.Duration(retryAt.Sub(at)), At: at, TaskCreatedAt: created,
	}
	body, err := events.Marshal(events.TypeBreakerOpen, "flyball/breaker/test", id, tr, at, fmt.Sprintf("breaker:%s:open:%d", key, at.UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishRaw(t, js, events.BreakerSubject(events.BreakerOpen, key), body))
}

// TestAnUpdateThatMovesTheBreakerLiftsItsHold: a task's breaker opened for
// an hour (breakerOpenUntil), then an update moved the task to another
// breaker: breaker.scope task → host, host → task, or a host-scoped
// task's URL to another host. The executor calls under the new key at
// once, but the governor lifted the hold only on a half-open or closed
// transition of the old breaker, which never came (the breaker service
// deletes a task's own record at the switch, and publishes nothing; a
// host breaker's transitions name the task whose call moved it): every
// run waited for the old retryAt, and flyball explain said breaker-open.
// An update that keeps the key (the same host spelled otherwise, another
// URL of a task-scoped task) keeps the hold, and a
// late breaker.open of the breaker the task left holds nothing.
func TestAnUpdateThatMovesTheBreakerLiftsItsHold(t *testing.T) {
	for _, c := range []struct {
		name             string
		scope, url       string // before the update
		newScope, newURL string // after it
		lifted           bool
	}{
		{"scope task to host", "task", "https://a.example/", "host", "https://a.example/", true},
		{"scope host to task", "host", "https://a.example/", "task", "https://a.example/", true},
		{"another host", "host", "https://a.example/", "host", "https://b.example/", true},
		{"the same host spelled otherwise", "host", "https://a.example/", "host", "https://A.example:443/x", false},
		{"scope task, another URL", "task", "https://a.example/", "task", "https://b.example/", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, js := startGovernor(t)
			const id = "moved"
			spec := func(scope, url string, every time.Duration) events.TaskSpec {
				return events.TaskSpec{
					ID: id, Schedule: events.Schedule{Interval: events.Duration(every)},
					Target: events.Target{HTTP: &events.HTTPTarget{URL: url}}, Breaker: &events.BreakerPolicy{Scope: scope},
				}
			}
			before, after := spec(c.scope, c.url, time.Minute), spec(c.newScope, c.newURL, 2*time.Minute)
			command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", before)
			st, _, _, err := s.readState(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			// Its first run is done (a slot in flight is kept whatever
			// comes), then the breaker opens (failed attempts of the next
			// runs, retried).
			slot := st.NextRunAt
			publishRunAndWait(t, js, events.OutcomeSucceeded, events.Run{
				DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1, StartedAt: slot,
				FinishedAt: time.Now().UTC(), Status: 200, TaskCreatedAt: st.CreatedAt,
			})
			retryAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
			breakerOpened(t, js, executor.BreakerKey(&before), id, st.CreatedAt, retryAt)
			if st, _, _, err = s.readState(t.Context(), id); err != nil || !st.BreakerOpenUntil.Equal(retryAt) || st.Source != gov.SourceBreakerOpen {
				t.Fatalf("after breaker.open: next run %s (%s), breakerOpenUntil %s (%v); want held until %s", st.NextRunAt, st.Source, st.BreakerOpenUntil, err, retryAt)
			}
			command(t, js, events.VerbUpdated, events.TypeTaskUpdated, id, "update-1", after)
			if st, _, _, err = s.readState(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			held := st.Source == gov.SourceBreakerOpen || !st.BreakerOpenUntil.IsZero()
			if c.lifted && held {
				t.Fatalf("after the update (breaker key %s → %s): next run %s (%s), breakerOpenUntil %s; want the old breaker's hold lifted",
					executor.BreakerKey(&before), executor.BreakerKey(&after), st.NextRunAt.Format(time.RFC3339), st.Source, st.BreakerOpenUntil.Format(time.RFC3339))
			}
			if !c.lifted && (!st.BreakerOpenUntil.Equal(retryAt) || !st.NextRunAt.Equal(retryAt)) {
				t.Fatalf("after an update keeping breaker key %s: next run %s (%s), breakerOpenUntil %s; want the hold kept until %s",
					executor.BreakerKey(&after), st.NextRunAt.Format(time.RFC3339), st.Source, st.BreakerOpenUntil.Format(time.RFC3339), retryAt.Format(time.RFC3339))
			}
			if !c.lifted {
				return
			}
			// The old breaker's breaker.open, late (HEALTH and TASKS are
			// not ordered with each other): the task no longer uses it.
			breakerOpened(t, js, executor.BreakerKey(&before), id, st.CreatedAt, retryAt.Add(time.Minute))
			if st, _, _, err = s.readState(t.Context(), id); err != nil || st.Source == gov.SourceBreakerOpen || !st.BreakerOpenUntil.IsZero() {
				t.Fatalf("after a late breaker.open of %s, which the task left: next run %s (%s), breakerOpenUntil %s (%v); want no hold",
					executor.BreakerKey(&before), st.NextRunAt.Format(time.RFC3339), st.Source, st.BreakerOpenUntil.Format(time.RFC3339), err)
			}
			// Its new breaker's holds it.
			breakerOpened(t, js, executor.BreakerKey(&after), id, st.CreatedAt, retryAt)
			if st, _, _, err = s.readState(t.Context(), id); err != nil || !st.BreakerOpenUntil.Equal(retryAt) {
				t.Fatalf("after breaker.open of its new breaker %s: breakerOpenUntil %s (%v), want %s", executor.BreakerKey(&after), st.BreakerOpenUntil, err, retryAt)
			}
		})
	}
}
