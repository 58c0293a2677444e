package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// terminations records the reasons of the MSG_TERMINATED advisories the
// server sends from now on, one per terminated message (stream, consumer,
// stream sequence): a service sends its term again when no confirmation
// came within a try, and the server sends an advisory for each term it
// reads, also for a message the first one already removed
// (TestTerminationsKeepEachMessageOnce).
func terminations(t *testing.T, nc *nats.Conn) func() []string {
	t.Helper()
	return recordBy(t, nc, terminatedAdvisories, func(m *nats.Msg) (string, string, bool) {
		var adv struct {
			Stream   string `json:"stream"`
			Consumer string `json:"consumer"`
			Seq      uint64 `json:"stream_seq"`
			Reason   string `json:"reason"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Errorf("undecodable MSG_TERMINATED advisory: %v", err)
			return "", "", false
		}
		return adv.Reason, fmt.Sprintf("%s/%s/%d", adv.Stream, adv.Consumer, adv.Seq), true
	})
}

// terminatedAdvisories is the subject of every MSG_TERMINATED advisory.
const terminatedAdvisories = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>"

// TestTerminationsKeepEachMessageOnce: a service sends its term as a
// request and sends it again when no confirmation came within a try (2 s:
// a loaded machine), and the server sends a MSG_TERMINATED advisory for
// each term it reads, also one for a message the first term already
// removed. terminations keeps one reason per message (stream, consumer,
// stream sequence), as a test that counts terminations means.
func TestTerminationsKeepEachMessageOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := t.Context()
	reasons := terminations(t, srv.NC)
	// Every advisory the server sends, repeats and all.
	sent := recordBy(t, srv.NC, terminatedAdvisories, func(m *nats.Msg) (string, string, bool) { return m.Subject, "", true })
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := srv.JS.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"t.a", "t.b"} {
		if _, err := srv.JS.Publish(ctx, subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 2 {
		t.Fatalf("fetched %d messages, want 2 (%v)", len(msgs), batch.Error())
	}
	// The first message terminated twice (a retried term), the second once.
	for _, m := range []jetstream.Msg{msgs[0], msgs[0], msgs[1]} {
		if _, err := srv.NC.Request(m.Reply(), []byte("+TERM "+m.Subject()), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 5*time.Second, "the second message's termination", func() bool {
		return slices.Contains(reasons(), "t.b")
	})
	if got := strings.Join(reasons(), ","); got != "t.a,t.b" {
		t.Fatalf("terminations kept %s, want t.a,t.b", got)
	}
	natstest.Eventually(t, 5*time.Second, "three advisories: the server reports the retried term too", func() bool { return len(sent()) == 3 })
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
