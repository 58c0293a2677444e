package deadletter_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// warnCounter counts the lines logged at Warn or above whose message is msg.
type warnCounter struct {
	msg string
	n   *atomic.Int32
}

func (w warnCounter) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (w warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == w.msg {
		w.n.Add(1)
	}
	return nil
}

func (w warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }

func (w warnCounter) WithGroup(string) slog.Handler { return w }

// TestExhaustedDispatchWaitsForItsAttemptCount: while flyball-attempts
// cannot be read, an exhausted dispatch is not dead-lettered with 0
// attempts: the read is tried again, and the entry, written once the
// bucket is back, counts the attempts its record holds. Its reason does
// not claim a crash, which the service cannot know.
func TestExhaustedDispatchWaitsForItsAttemptCount(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	js := srv.JS
	const bucketStream = "KV_" + streams.BucketAttempts
	st, err := js.Stream(ctx, bucketStream)
	if err != nil {
		t.Fatal(err)
	}
	bucketCfg := st.CachedInfo().Config
	seq := publishDispatch(t, js, "t1")

	var retried atomic.Int32
	cfg := deadletter.Config{ReconcileInterval: 20 * time.Millisecond}
	cfg.JS = js
	cfg.Metrics = metrics.New()
	cfg.Logger = slog.New(warnCounter{msg: "exhausted dispatch not dead-lettered; retrying next interval", n: &retried})
	svc, err := deadletter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	h := &harness{t: t, js: js, metrics: cfg.Metrics}

	if err := js.DeleteStream(ctx, bucketStream); err != nil { // flyball-attempts is gone
		t.Fatal(err)
	}
	exhaustWithoutAdvisory(t, js, 2)
	natstest.Eventually(t, 10*time.Second, "a dead letter, or a retry of the attempt read", func() bool {
		return h.entries("t1") > 0 || retried.Load() > 0
	})
	if h.entries("t1") > 0 {
		e := entryOf(t, js, "t1")
		t.Fatalf("dead-lettered with %d attempts while flyball-attempts could not be read, want no entry until it can", e.Attempts)
	}

	if _, err := js.CreateStream(ctx, bucketCfg); err != nil { // back
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "t1.1772442000000", []byte(`{"attempts":2}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the dispatch is dead-lettered", func() bool { return h.entries("t1") == 1 })
	e := entryOf(t, js, "t1")
	if e.Attempts != 2 || e.Reason != events.DeadLetterMaxDeliveries {
		t.Fatalf("entry: reason %q, %d attempts; want %s, 2", e.Reason, e.Attempts, events.DeadLetterMaxDeliveries)
	}
	for _, ae := range e.Errors {
		if strings.Contains(ae.Error, "crash or timeout") {
			t.Fatalf("entry error %q claims a crash or timeout the service cannot know", ae.Error)
		}
	}
	dispatch, err := js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch.GetMsg(ctx, seq); err == nil {
		t.Fatal("the dead-lettered dispatch is still in DISPATCH")
	}
}

// entryOf reads task's last dead-letter entry.
func entryOf(t *testing.T, js jetstream.JetStream, task string) events.DeadLetter {
	t.Helper()
	st, err := js.Stream(t.Context(), streams.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(t.Context(), events.DeadLetterSubject(task))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	var dl events.DeadLetter
	if err := events.DecodeData(e, &dl); err != nil {
		t.Fatal(err)
	}
	return dl
}
