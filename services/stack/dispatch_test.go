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
	putJSON(t, e.srv.JS, streams.BucketTasks, "mine", events.TaskSpec{ID: "mine", Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
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
