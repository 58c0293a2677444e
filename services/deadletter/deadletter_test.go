package deadletter_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

type harness struct {
	t       *testing.T
	js      jetstream.JetStream
	metrics *metrics.Set
}

// newHarness starts a dead-letter service on its own embedded server.
func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	cfg := deadletter.Config{}
	cfg.JS = srv.JS
	cfg.Metrics = metrics.New()
	startService(t, cfg)
	return &harness{t: t, js: srv.JS, metrics: cfg.Metrics}
}

// startService starts a dead-letter service with cfg, stopped when the
// test ends.
func startService(t *testing.T, cfg deadletter.Config) *deadletter.Service {
	t.Helper()
	svc, err := deadletter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	return svc
}

// failed publishes a run.failed with data on flyball.run.failed.<task>
// and waits until the dead-letter service has settled it.
func (h *harness) failed(task, data string) {
	h.t.Helper()
	h.publishRun(events.TypeRunFailed, task, data)
}

// publishRun publishes an event of type typ with data on task's
// run.failed subject and waits until the dead-letter service acked it.
func (h *harness) publishRun(typ, task, data string) {
	h.t.Helper()
	body, err := events.Marshal(typ, "test", task, json.RawMessage(data), time.Now(), "")
	if err != nil {
		h.t.Fatal(err)
	}
	ack, err := h.js.Publish(h.t.Context(), events.RunSubject(events.OutcomeFailed, task), body)
	if err != nil {
		h.t.Fatal(err)
	}
	natstest.AwaitAcked(h.t, h.js, streams.StreamRuns, streams.ConsumerDeadLetter, ack.Sequence)
}

// entries is the number of dead-letter entries stored for task.
func (h *harness) entries(task string) uint64 {
	h.t.Helper()
	st, err := h.js.Stream(h.t.Context(), streams.StreamDeadLetter)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(h.t.Context(), jetstream.WithSubjectFilter(events.DeadLetterSubject(task)))
	if err != nil {
		h.t.Fatal(err)
	}
	// State.Msgs counts every task's.
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func (h *harness) rejected(reason string) float64 {
	return testutil.ToFloat64(h.metrics.RejectedEvents.WithLabelValues(reason))
}

// TestForgedFinalFailureIsTerminated: a final run.failed on RUNS that
// names another task than its subject is terminated and counted, as the
// governor and the breaker do, instead of dead-lettering that other task.
func TestForgedFinalFailureIsTerminated(t *testing.T) {
	h := newHarness(t)
	h.failed("t1", `{"dispatchId":"other:1","taskId":"other","scheduledAt":"2026-03-02T09:00:00Z","attempt":1,"final":true,`+
		`"dispatch":{"dispatchId":"other:1","taskId":"other","scheduledAt":"2026-03-02T09:00:00Z"}}`)
	if n := h.entries("other"); n != 0 {
		t.Fatalf("a final failure on flyball.run.failed.t1 naming task other dead-lettered other (%d entries)", n)
	}
	if n := h.rejected("malformed run"); n != 1 {
		t.Fatalf(`flyball_rejected_events_total{reason="malformed run"} = %v, want 1`, n)
	}
}

// TestFinalFailureOfAnotherTypeIsTerminated: a run.succeeded stored on
// flyball.run.failed.t1 says two things at once; it is terminated and
// counted, not dead-lettered.
func TestFinalFailureOfAnotherTypeIsTerminated(t *testing.T) {
	h := newHarness(t)
	h.publishRun(events.TypeRunSucceeded, "t1",
		`{"dispatchId":"t1:1","taskId":"t1","attempt":1,"final":true,"dispatch":{"dispatchId":"t1:1","taskId":"t1"}}`)
	if n := h.entries("t1"); n != 0 {
		t.Fatalf("a run.succeeded on flyball.run.failed.t1 was dead-lettered (%d entries)", n)
	}
	if n := h.rejected("malformed event"); n != 1 {
		t.Fatalf(`flyball_rejected_events_total{reason="malformed event"} = %v, want 1`, n)
	}
}

// TestEntryTooLargeIsTerminated: a dead-letter entry the server refuses
// for its size (the attempts' errors add up past max_payload) can never
// be written; the final failure is terminated with the reason and
// counted, not nakked and redelivered every second forever.
func TestEntryTooLargeIsTerminated(t *testing.T) {
	h := newHarness(t)
	big := strings.Repeat("x", 600<<10)
	run := `{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z","error":"` + big + `"`
	d := `"dispatch":{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z"}`
	h.failed("t1", run+`,"attempt":1}`)
	h.failed("t1", run+`,"attempt":2,"final":true,`+d+`}`)
	if n := h.rejected("cannot be dead-lettered"); n != 1 {
		t.Fatalf(`flyball_rejected_events_total{reason="cannot be dead-lettered"} = %v, want 1`, n)
	}
}

// TestAdvisoryEntryTooLargeFreesTheSlot: the same for a dispatch that
// exhausted its deliveries: the entry that cannot be stored is counted,
// the dispatch is deleted (it holds the task's one DISPATCH slot) and the
// advisory is settled, not nakked forever.
func TestAdvisoryEntryTooLargeFreesTheSlot(t *testing.T) {
	h := newHarness(t)
	d := events.Dispatch{DispatchID: "t1:1772442000000", TaskID: "t1", ScheduledAt: time.UnixMilli(1772442000000).UTC()}
	body, err := events.Marshal(events.TypeRunDue, "test", "t1", d, time.Now(), d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := h.js.Publish(t.Context(), events.DispatchSubject("t1"), body)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 600<<10)
	for attempt := range 2 {
		h.failed("t1", `{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z","error":"`+big+`","attempt":`+strconv.Itoa(attempt+1)+`}`)
	}
	advise(t, h.js, pub.Sequence, 50)
	requireDispatchGone(t, h.js, pub.Sequence)
	if n := h.rejected("cannot be dead-lettered"); n != 1 {
		t.Fatalf(`flyball_rejected_events_total{reason="cannot be dead-lettered"} = %v, want 1`, n)
	}
}

// TestRedeliveredFinalFailureIsCountedOnce: a final run.failed that the
// service gets again (its ack lost in a leader election, or the service
// stopped between the entry's write and the ack) writes no second entry
// (its Nats-Msg-Id), and must not be counted or logged as a second dead
// letter either: flyball_deadletter_total drives FlyballDeadLetters.
func TestRedeliveredFinalFailureIsCountedOnce(t *testing.T) {
	h := newHarness(t)
	final := `{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z","attempt":1,"final":true,"errorKind":"permanent",` +
		`"dispatch":{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z"}}`
	h.failed("t1", final)
	h.failed("t1", final) // the same failure, handled again
	if n := h.entries("t1"); n != 1 {
		t.Fatalf("%d dead-letter entries, want 1", n)
	}
	if n := testutil.ToFloat64(h.metrics.DeadLetterTotal.WithLabelValues(events.DeadLetterPermanent)); n != 1 {
		t.Fatalf(`flyball_deadletter_total{reason="permanent"} = %v for one dead letter, want 1`, n)
	}
}

// TestAttemptsOfAnExecutorAheadOfTheServerAreKept: the executor calls a
// slot when its own clock reaches scheduledAt, while RUNS stores the
// attempts by the server's clock. An executor whose clock runs 30 s
// ahead stores its attempts about 30 s before scheduledAt by the server's
// clock: the entry still has every attempt's error, and its firstFailedAt
// is the first attempt's, not the last. The task's earlier dispatch,
// failed inside the same window, is not counted in.
func TestAttemptsOfAnExecutorAheadOfTheServerAreKept(t *testing.T) {
	h := newHarness(t)
	at := time.Now().Add(30 * time.Second).UTC().Truncate(time.Millisecond)
	prev := events.DispatchID("t1", at.Add(-10*time.Second))
	id := events.DispatchID("t1", at)
	run := func(dispatchID string, attempt int, finished time.Time, final bool) string {
		r := events.Run{
			DispatchID: dispatchID, TaskID: "t1", ScheduledAt: at, Attempt: attempt,
			StartedAt: finished.Add(-time.Millisecond), FinishedAt: finished, Status: 500 + attempt, Error: "attempt " + strconv.Itoa(attempt),
		}
		if final {
			r.Final = true
			r.Dispatch = &events.Dispatch{DispatchID: dispatchID, TaskID: "t1", ScheduledAt: at}
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	h.failed("t1", run(prev, 1, at.Add(-10*time.Second), false))
	h.failed("t1", run(id, 1, at.Add(time.Second), false))
	h.failed("t1", run(id, 2, at.Add(2*time.Second), true))

	var entry events.DeadLetter
	natstest.LastData(t, h.js, streams.StreamDeadLetter, events.DeadLetterSubject("t1"), &entry)
	var got []string
	for _, a := range entry.Errors {
		got = append(got, a.Error)
	}
	if len(got) != 2 || got[0] != "attempt 1" || got[1] != "attempt 2" {
		t.Fatalf("entry errors %q, want [attempt 1, attempt 2]: an attempt stored before scheduledAt by the server's clock was left out", got)
	}
	if want := at.Add(time.Second); !entry.FirstFailedAt.Equal(want) {
		t.Fatalf("firstFailedAt %s, want the first attempt's %s", entry.FirstFailedAt, want)
	}
}
