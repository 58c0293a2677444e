package breaker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/breaker"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// logSpy records a service's log lines.
type logSpy struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSpy) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *logSpy) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// startSpied starts a breaker service whose log the returned spy records.
func startSpied(t *testing.T, js jetstream.JetStream) *logSpy {
	t.Helper()
	spy := &logSpy{}
	cfg := breaker.Config{}
	cfg.JS = js
	cfg.Logger = slog.New(slog.NewTextHandler(spy, nil))
	svc, err := breaker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	return spy
}

// awaitHealthEvent waits until HEALTH holds a message on subject.
func awaitHealthEvent(t *testing.T, js jetstream.JetStream, subject string) {
	t.Helper()
	natstest.Eventually(t, 15*time.Second, "a transition event on "+subject, func() bool {
		health, err := js.Stream(t.Context(), streams.StreamHealth)
		if err != nil {
			return false
		}
		_, err = health.GetLastMsgForSubject(t.Context(), subject)
		return err == nil
	})
}

func breakerRecord(t *testing.T, js jetstream.JetStream, key string) executor.BreakerRecord {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var b executor.BreakerRecord
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTransitionSurvivesAFailedPublish: the breaker writes KV, then
// publishes the transition; when the publish fails it naks the outcome.
// The redelivered outcome must neither count the failure twice (the record
// names the outcomes it applied) nor lose the closed → open event on
// HEALTH (the record keeps the transition, and the redelivery publishes
// it again).
func TestTransitionSurvivesAFailedPublish(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := srv.JS
	ctx := context.Background()
	tasks, err := js.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"id":"t1","target":{"http":{"url":"http://example.com/"}},"schedule":{"interval":"1m"},"breaker":{"failureThreshold":3,"openDelay":"1h","maxOpenDelay":"2h"}}`
	if _, err := tasks.Put(ctx, "t1", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	spy := startSpied(t, js)

	publish := func(n int) uint64 {
		run := events.Run{
			DispatchID: fmt.Sprintf("t1:%d", n), TaskID: "t1", ScheduledAt: time.Now().UTC(), Attempt: 1,
			BreakerKey: "t1", Status: 500, Error: "status 500", ErrorKind: events.ErrorTransient,
		}
		body, err := events.Marshal(events.OutcomeFailed.Type(), "test", "t1", run, time.Now(), "")
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(events.RunSubject(events.OutcomeFailed, "t1"))
		msg.Data = body
		msg.Header.Set(events.HeaderBreakerKey, "t1")
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for n := range 2 {
		natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerBreaker, publish(n))
	}
	// HEALTH is unavailable while the third failure opens the breaker.
	if err := js.DeleteStream(ctx, streams.StreamHealth); err != nil {
		t.Fatal(err)
	}
	seq := publish(2)
	natstest.Eventually(t, 20*time.Second, "the transition publish to fail", func() bool { return spy.has("breaker update failed") })
	if err := streams.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerBreaker, seq)

	b := breakerRecord(t, js, "t1")
	health, err := js.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	_, herr := health.GetLastMsgForSubject(ctx, events.BreakerSubject(events.BreakerOpen, "t1"))
	if b.State != events.BreakerOpen || b.Failures != 3 || herr != nil {
		t.Fatalf("after 3 failed attempts (one outcome redelivered after a failed publish): breaker %s with %d failures, want open with 3; HEALTH flyball.breaker.open.t1: %v (want the transition event)",
			b.State, b.Failures, herr)
	}
}

// TestClosingSurvivesAFailedPublish: a success of a call started after the
// opening closes an open breaker while HEALTH is unavailable. The closed
// record reaches the service's view at once, and the redelivered outcome
// took the shortcut for a success on a settled breaker (closed, nothing
// counted): it was acked, and breaker.closed was never published. It
// must publish the closing again, as a redelivered failure publishes its
// opening: with the executor's Flyball-Breaker-Key header (the shortcut
// before decoding), and without it (the shortcut by the body's key).
func TestClosingSurvivesAFailedPublish(t *testing.T) {
	for _, header := range []bool{true, false} {
		t.Run(fmt.Sprintf("header=%t", header), func(t *testing.T) { closingSurvivesAFailedPublish(t, header) })
	}
}

func closingSurvivesAFailedPublish(t *testing.T, header bool) {
	srv := natstest.StartWithStreams(t)
	js := srv.JS
	ctx := context.Background()
	tasks, err := js.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"id":"t1","target":{"http":{"url":"http://example.com/"}},"schedule":{"interval":"1m"}}`
	if _, err := tasks.Put(ctx, "t1", []byte(spec)); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec, err := json.Marshal(executor.BreakerRecord{
		Key: "t1", State: events.BreakerOpen, Failures: 5,
		OpenDelay: events.Duration(time.Hour), RetryAt: now.Add(59 * time.Minute), UpdatedAt: now.Add(-time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1", rec); err != nil {
		t.Fatal(err)
	}
	spy := startSpied(t, js)
	// HEALTH is unavailable while the success closes the breaker.
	if err := js.DeleteStream(ctx, streams.StreamHealth); err != nil {
		t.Fatal(err)
	}
	run := events.Run{
		DispatchID: "t1:1", TaskID: "t1", ScheduledAt: time.Now().UTC(), StartedAt: time.Now().UTC(), Attempt: 1,
		BreakerKey: "t1", Status: 200,
	}
	body, err := events.Marshal(events.OutcomeRecovered.Type(), "test", "t1", run, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(events.RunSubject(events.OutcomeRecovered, "t1"))
	msg.Data = body
	if header {
		msg.Header.Set(events.HeaderBreakerKey, "t1")
	}
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "the transition publish to fail", func() bool { return spy.has("breaker update failed") })
	if err := streams.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerBreaker, ack.Sequence)

	b := breakerRecord(t, js, "t1")
	health, err := js.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	_, herr := health.GetLastMsgForSubject(ctx, events.BreakerSubject(events.BreakerClosed, "t1"))
	if b.State != events.BreakerClosed || herr != nil {
		t.Fatalf("after the success that closed an open breaker (redelivered after a failed publish): breaker %s; HEALTH flyball.breaker.closed.t1: %v (want the transition event)",
			b.State, herr)
	}
}

// TestHalfOpenTransitionSurvivesAFailedPublish: an open breaker falls due
// while HEALTH is unavailable. The record turns half-open, the publish
// fails, and the half-open loop tries again until the open → half-open
// event is on HEALTH (before, it gave up after one try).
func TestHalfOpenTransitionSurvivesAFailedPublish(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := srv.JS
	ctx := context.Background()
	spy := startSpied(t, js)
	if err := js.DeleteStream(ctx, streams.StreamHealth); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(executor.BreakerRecord{
		Key: "soon", State: events.BreakerOpen, Failures: 5,
		OpenDelay: events.Duration(time.Minute), RetryAt: time.Now().Add(200 * time.Millisecond).UTC(), UpdatedAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "soon", rec); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 15*time.Second, "the half-open publish to fail", func() bool { return spy.has("half-open transition failed") })
	if b := breakerRecord(t, js, "soon"); b.State != events.BreakerHalfOpen {
		t.Fatalf("breaker %s after its retryAt, want half-open", b.State)
	}
	if err := streams.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	awaitHealthEvent(t, js, events.BreakerSubject(events.BreakerHalfOpen, "soon"))
}
