package stack_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// terminations records the reasons of the MSG_TERMINATED advisories the
// server sends from now on.
func terminations(t *testing.T, nc *nats.Conn) func() []string {
	t.Helper()
	var mu sync.Mutex
	var reasons []string
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>", func(m *nats.Msg) {
		var adv struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &adv)
		mu.Lock()
		reasons = append(reasons, adv.Reason)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reasons...)
	}
}

// publishDispatch publishes d as a run.due on its task's DISPATCH subject,
// whatever its fields say.
func publishDispatch(t *testing.T, e *env, d events.Dispatch) {
	t.Helper()
	body, err := events.Marshal(events.TypeRunDue, "test", d.TaskID, d, time.Now().UTC(), d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.JS.Publish(context.Background(), events.DispatchSubject(d.TaskID), body); err != nil {
		t.Fatal(err)
	}
}

// TestDispatchWithAnotherTasksIDIsTerminated: a run.due whose dispatchId
// is not "<taskId>:<scheduledAt Unix ms>" is malformed. The executor
// terminates it with a reason and counts it, and does not call the target:
// run, it would send another task's dispatch ID as its Idempotency-Key and
// count its attempts under the other task's flyball-attempts key.
func TestDispatchWithAnotherTasksIDIsTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "executor")
	tg := newScripted(t, 200)
	reasons := terminations(t, e.srv.NC)
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "mine", events.TaskSpec{ID: "mine", Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
	slot := time.Now().UTC()
	d := events.Dispatch{DispatchID: events.DispatchID("theirs", slot), TaskID: "mine", ScheduledAt: slot, FiredAt: slot}
	publishDispatch(t, e, d)
	natstest.Eventually(t, 10*time.Second, "the dispatch is terminated or called", func() bool {
		return len(reasons()) > 0 || len(tg.Calls()) > 0
	})
	if calls := tg.Calls(); len(calls) > 0 {
		t.Fatalf("a dispatch of task mine with dispatchId %q was run (Idempotency-Key %q), want it terminated as malformed", d.DispatchID, calls[0].key)
	}
	if r := reasons()[0]; !strings.Contains(r, "dispatchId") {
		t.Fatalf("terminated with reason %q, want one naming the dispatchId", r)
	}
	if n := counterSum(t, e.st.Metrics().Registry, "flyball_rejected_events_total"); n != 1 {
		t.Fatalf("flyball_rejected_events_total = %v, want 1", n)
	}
}

// TestFarFutureDispatchIsTerminated: a run.due whose scheduledAt is more
// than executor.MaxDispatchAhead ahead (no timer publishes one; it can
// only be a malformed publish) is terminated with a reason and counted,
// so the task's next dispatch can be stored. Before, it was nakked with
// that delay and kept, holding the task's one DISPATCH slot: every later
// dispatch of the task was refused (10077) and the task stopped running.
func TestFarFutureDispatchIsTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "executor")
	tg := newScripted(t, 200)
	reasons := terminations(t, e.srv.NC)
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "future", events.TaskSpec{ID: "future", Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
	dispatchAt(t, e.srv.JS, "future", time.Now().AddDate(100, 0, 0).UTC())
	natstest.Eventually(t, 10*time.Second, "the executor has seen the dispatch", func() bool {
		c, err := e.srv.JS.Consumer(context.Background(), streams.StreamDispatch, streams.ConsumerExecutor)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.Delivered.Consumer >= 1
	})
	slot := time.Now().UTC()
	d := events.Dispatch{DispatchID: events.DispatchID("future", slot), TaskID: "future", ScheduledAt: slot, FiredAt: slot}
	body, err := events.Marshal(events.TypeRunDue, "test", "future", d, slot, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	natstest.Eventually(t, 5*time.Second, "the task's next dispatch is stored", func() bool {
		_, lastErr = e.srv.JS.Publish(context.Background(), events.DispatchSubject("future"), body)
		return lastErr == nil
	})
	natstest.Eventually(t, 10*time.Second, "the next dispatch runs", func() bool { return len(tg.Calls()) == 1 })
	if k := tg.Calls()[0].key; k != d.DispatchID {
		t.Fatalf("the target was called with Idempotency-Key %q, want the next dispatch %q", k, d.DispatchID)
	}
	if r := reasons(); len(r) != 1 || !strings.Contains(r[0], "scheduledAt") {
		t.Fatalf("terminations %q, want one naming scheduledAt", r)
	}
	if n := counterSum(t, e.st.Metrics().Registry, "flyball_rejected_events_total"); n != 1 {
		t.Fatalf("flyball_rejected_events_total = %v, want 1", n)
	}
}
