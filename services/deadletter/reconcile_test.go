package deadletter_test

import (
	"encoding/json"
	"errors"
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

// publishDispatch stores task's dispatch in DISPATCH and returns its
// sequence.
func publishDispatch(t *testing.T, js jetstream.JetStream, task string) uint64 {
	t.Helper()
	d := events.Dispatch{DispatchID: task + ":1772442000000", TaskID: task, ScheduledAt: time.UnixMilli(1772442000000).UTC()}
	body, err := events.Marshal(events.TypeRunDue, "test", task, d, time.Now(), d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := js.Publish(t.Context(), events.DispatchSubject(task), body)
	if err != nil {
		t.Fatal(err)
	}
	return pub.Sequence
}

// advise publishes JetStream's MAX_DELIVERIES advisory for the DISPATCH
// message at seq, as the server sends it after deliveries deliveries,
// and waits until the dead-letter service has acked it.
func advise(t *testing.T, js jetstream.JetStream, seq uint64, deliveries int) {
	t.Helper()
	adv, err := json.Marshal(map[string]any{"stream": streams.StreamDispatch, "consumer": streams.ConsumerExecutor, "stream_seq": seq, "deliveries": deliveries})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.DISPATCH.executor", adv)
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamAdvisories, streams.ConsumerDeadLetter, ack.Sequence)
}

// requireDispatchGone fails unless the DISPATCH message at seq was
// deleted: an exhausted dispatch left there holds its task's one slot.
func requireDispatchGone(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	dispatch, err := js.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch.GetMsg(t.Context(), seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the exhausted dispatch is still in DISPATCH (%v): it holds the task's slot", err)
	}
}

// startReconciling starts a dead-letter service that looks for exhausted
// dispatches every 20ms.
func startReconciling(t *testing.T, js jetstream.JetStream) (*deadletter.Service, *metrics.Set) {
	t.Helper()
	cfg := deadletter.Config{ReconcileInterval: 20 * time.Millisecond}
	cfg.JS = js
	cfg.Metrics = metrics.New()
	svc := startService(t, cfg)
	return svc, cfg.Metrics
}

// TestExhaustedDispatchWithoutAdvisoryIsDeadLettered: a dispatch whose
// deliveries ran out while its MAX_DELIVERIES advisory never reached
// ADVISORIES (a core NATS publish, lost during a leader change) stayed in
// DISPATCH for good: never delivered again, holding the task's one slot,
// so the task silently stopped. The dead-letter service finds it in
// DISPATCH, dead-letters it and frees the slot; the advisory arriving
// late after all adds no second entry.
func TestExhaustedDispatchWithoutAdvisoryIsDeadLettered(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := srv.JS
	seq := publishDispatch(t, js, "t1")
	exhaustWithoutAdvisory(t, js, 2)

	_, m := startReconciling(t, js)
	h := &harness{t: t, js: js, metrics: m}
	natstest.Eventually(t, 10*time.Second, "the exhausted dispatch is dead-lettered", func() bool { return h.entries("t1") == 1 })
	waitReconciled(t, js, m, seq)

	// The advisory arrives after all.
	advise(t, js, seq, 2)
	if n := h.entries("t1"); n != 1 {
		t.Fatalf("%d dead-letter entries for t1 after the late advisory, want 1", n)
	}
}

// TestHeldDispatchIsNotDeadLettered: a dispatch the executor holds
// (delivered, not yet settled) is pending, not exhausted, however many
// passes look at it.
func TestHeldDispatchIsNotDeadLettered(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	js := srv.JS
	seq := publishDispatch(t, js, "t1")
	// Held: never settled within its 30 s AckWait.
	natstest.FetchOne(t, js, streams.StreamDispatch, streams.ConsumerExecutor, func(jetstream.Msg) error { return nil })
	// A later dispatch settled, so the consumer's floors move.
	publishDispatch(t, js, "t2")
	natstest.FetchOne(t, js, streams.StreamDispatch, streams.ConsumerExecutor, func(m jetstream.Msg) error { return m.DoubleAck(ctx) })
	svc, m := startReconciling(t, js)
	for range 3 {
		if err := svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dispatch, err := js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch.GetMsg(ctx, seq); err != nil {
		t.Fatalf("the held dispatch left DISPATCH: %v", err)
	}
	h := &harness{t: t, js: js, metrics: m}
	if n := h.entries("t1"); n != 0 {
		t.Fatalf("a held dispatch was dead-lettered (%d entries)", n)
	}
}

// TestUnreadableExhaustedDispatchIsNotCountedAsDeadLettered: an exhausted
// dispatch that cannot be read is deleted (it holds its subject's slot)
// and counted as a malformed dispatch; no entry is written for it, so it
// must not be counted in flyball_deadletter_reconciled_total, whose every
// count the docs say is a dead letter in flyball_deadletter_total.
func TestUnreadableExhaustedDispatchIsNotCountedAsDeadLettered(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	js := srv.JS
	pub, err := js.Publish(ctx, events.DispatchSubject("t1"), []byte("not an event"))
	if err != nil {
		t.Fatal(err)
	}
	exhaustWithoutAdvisory(t, js, 1)
	svc, m := startReconciling(t, js)
	natstest.Eventually(t, 10*time.Second, "the unreadable dispatch is counted as malformed", func() bool {
		return testutil.ToFloat64(m.RejectedEvents.WithLabelValues("malformed dispatch")) == 1
	})
	dispatch, err := js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the unreadable dispatch leaves DISPATCH", func() bool {
		_, err := dispatch.GetMsg(ctx, pub.Sequence)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	// Passes are serialised: this one starts after the one that deleted it.
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.DeadLetterReconciled); n != 0 {
		t.Fatalf("flyball_deadletter_reconciled_total = %v for a dispatch with no dead letter, want 0", n)
	}
}

// exhaustWithoutAdvisory uses up the deliveries of the one dispatch in
// DISPATCH on the executor's consumer, created here with maxDeliver of
// them that run out fast (an executor that died on each), then loses its
// MAX_DELIVERIES advisory: stored (JetStream sends it on its own time),
// then purged before the service reads it.
func exhaustWithoutAdvisory(t *testing.T, js jetstream.JetStream, maxDeliver int) {
	t.Helper()
	ctx := t.Context()
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.StreamDispatch, jetstream.ConsumerConfig{
		Durable: streams.ConsumerExecutor, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 50 * time.Millisecond, MaxDeliver: maxDeliver, FilterSubject: events.DispatchSubject("*"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < maxDeliver; {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range batch.Messages() {
			n++
		}
	}
	// The next pull finds the deliveries used up.
	natstest.Eventually(t, 10*time.Second, "the consumer gives the dispatch up", func() bool {
		if batch, err := cons.FetchNoWait(1); err == nil {
			for range batch.Messages() {
			}
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0
	})
	adv, err := js.Stream(ctx, streams.StreamAdvisories)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the advisory is stored", func() bool {
		info, err := adv.Info(ctx, jetstream.WithSubjectFilter("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"))
		return err == nil && info.State.Msgs == 1
	})
	if err := adv.Purge(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitReconciled waits for the exhausted dispatch at seq to leave
// DISPATCH and for the reconcile pass to count it, once.
func waitReconciled(t *testing.T, js jetstream.JetStream, m *metrics.Set, seq uint64) {
	t.Helper()
	dispatch, err := js.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the exhausted dispatch leaves DISPATCH", func() bool {
		_, err := dispatch.GetMsg(t.Context(), seq)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	// Counted once the delete returns, which is an instant after the
	// server has removed the message.
	natstest.Eventually(t, 10*time.Second, "flyball_deadletter_reconciled_total reaches 1", func() bool {
		return testutil.ToFloat64(m.DeadLetterReconciled) == 1
	})
}
